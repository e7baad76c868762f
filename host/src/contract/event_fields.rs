//! The fields of a plugin's Event action as the API server checks them, checked before the
//! Event is sent: a reason or action the server would refuse (or a 1 MiB one) is invalid
//! output, and a long message is cut to what the server keeps.

use super::text::{shown, truncate_with_marker};
use std::borrow::Cow;

/// The longest reason or action an Event may carry (`events.k8s.io/v1` validation).
pub const MAX_REASON_CHARS: usize = 128;

/// The longest Event note the API server accepts, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// What ends a note that was cut to [`MAX_NOTE_BYTES`].
pub const NOTE_CUT_MARKER: &str = " …[truncated]";

/// Checks an Event's `reason` or `action` (named by `field`): 1 to 128 ASCII letters and
/// digits, starting with an upper-case letter (CamelCase, as Kubernetes components write
/// them, e.g. `ImagePinned`).
pub fn check_camel_case(field: &'static str, value: &str) -> Result<(), EventFieldError> {
    let ok = value.len() <= MAX_REASON_CHARS
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.bytes().all(|b| b.is_ascii_alphanumeric());
    if ok {
        return Ok(());
    }
    Err(EventFieldError {
        field,
        value: format!("{:?}", shown(value)),
        bytes: value.len(),
    })
}

/// An Event's reason or action that is not CamelCase (the value shown capped and escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "event {field} {value} ({bytes} bytes) must be CamelCase: 1 to {MAX_REASON_CHARS} ASCII letters and digits starting with an upper-case letter"
)]
pub struct EventFieldError {
    /// `reason` or `action`.
    pub field: &'static str,
    /// The value as shown.
    pub value: String,
    /// Its length.
    pub bytes: usize,
}

/// The note sent for `message`: at most [`MAX_NOTE_BYTES`], ending in
/// [`NOTE_CUT_MARKER`] when it was cut.
pub fn note(message: &str) -> Cow<'_, str> {
    truncate_with_marker(message, MAX_NOTE_BYTES, NOTE_CUT_MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_camel_case_words() {
        for good in [
            "ImagePinned",
            "Synced",
            "ErrResourceExists",
            "A",
            &"A".repeat(128),
        ] {
            assert!(check_camel_case("reason", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "lowercase",
            "Has Space",
            "Dash-ed",
            "New\nLine",
            "Ünicode",
            &"A".repeat(129),
        ] {
            assert!(check_camel_case("reason", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_huge_reason_is_refused_without_repeating_it() {
        let huge = "A".repeat(1 << 20);
        let err = check_camel_case("reason", &huge).unwrap_err().to_string();
        assert!(err.len() < 2048, "error is {} bytes", err.len());
        assert!(err.contains("1048576 bytes"), "{err}");
    }

    #[test]
    fn long_notes_are_cut_with_a_marker() {
        let message = "é".repeat(1000);
        let cut = note(&message);
        assert!(cut.len() <= MAX_NOTE_BYTES);
        assert!(cut.ends_with(NOTE_CUT_MARKER));
        assert_eq!(note("short"), "short");
    }
}
