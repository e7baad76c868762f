//! Version-independent checks of what a plugin returns: the bounds on its actions (count and
//! bytes, checked by every contract version before it parses anything) and its error
//! messages, capped where they enter the host.

use super::error::CallError;
use crate::contract::text::truncate_with_marker;
use crate::contract::{Action, OutputLimits, OutputViolation, validate_actions};

/// The most bytes kept of a plugin's error message (the rest is cut, with a marker), so that
/// logs, retries and audit records downstream only ever carry this much.
pub const MAX_ERROR_BYTES: usize = 4096;

/// A plugin's error message, cut to [`MAX_ERROR_BYTES`].
pub(super) fn cap_error(message: &str) -> String {
    truncate_with_marker(message, MAX_ERROR_BYTES, "…(truncated)").into_owned()
}

/// The error for a plugin that reported a transient failure (retried with backoff).
pub(super) fn transient(message: &str) -> CallError {
    CallError::Transient(cap_error(message))
}

/// The error for a plugin that reported a permanent failure (not retried until the object
/// changes).
pub(super) fn permanent(message: &str) -> CallError {
    CallError::Permanent(cap_error(message))
}

/// Refuses more actions than the limit, before any of them is converted.
pub(super) fn check_count(count: usize, limits: OutputLimits) -> Result<(), OutputViolation> {
    if count > limits.max_actions {
        return Err(OutputViolation::TooManyActions {
            count,
            limit: limits.max_actions,
        });
    }
    Ok(())
}

/// Refuses actions that carry more text than the limit, before any of them is parsed.
pub(super) fn check_bytes(bytes: usize, limits: OutputLimits) -> Result<(), OutputViolation> {
    if bytes > limits.max_bytes {
        return Err(OutputViolation::TooLarge {
            bytes,
            limit: limits.max_bytes,
        });
    }
    Ok(())
}

/// The checks of converted actions every version shares (names, scopes, sizes of fields).
pub(super) fn check_actions(
    actions: &[Action],
    limits: OutputLimits,
) -> Result<(), OutputViolation> {
    validate_actions(actions, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_bytes_are_bounded_inclusively() {
        let limits = OutputLimits::default();
        assert!(check_count(limits.max_actions, limits).is_ok());
        assert!(matches!(
            check_count(limits.max_actions + 1, limits),
            Err(OutputViolation::TooManyActions { .. })
        ));
        assert!(check_bytes(limits.max_bytes, limits).is_ok());
        assert!(matches!(
            check_bytes(limits.max_bytes + 1, limits),
            Err(OutputViolation::TooLarge { .. })
        ));
    }

    #[test]
    fn reported_errors_are_capped_and_typed() {
        let long = "x".repeat(MAX_ERROR_BYTES * 3);
        let CallError::Transient(m) = transient(&long) else {
            panic!("not transient")
        };
        assert!(m.len() <= MAX_ERROR_BYTES + 32, "{}", m.len());
        assert!(!permanent("no").is_transient());
    }
}
