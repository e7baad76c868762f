//! Text a plugin chose (messages, names, errors, versions), made safe to show: capped in
//! length and with control characters escaped, so that it cannot flood a log, forge a log
//! line with a newline, or drive a terminal with escape sequences.

use std::borrow::Cow;
use std::fmt::{self, Write};

/// The most bytes of one plugin-provided string shown in a log line, error or audit record.
pub const SHOWN_MAX_BYTES: usize = 1024;

/// Plugin-provided text for display: at most `max` bytes of the original, control characters
/// (newlines, carriage returns, escapes, …) written as `\n`, `\r`, `\t` or `\u{1b}`, and a
/// marker saying how much was cut. Formatting never allocates more than about `4 * max`.
#[derive(Clone, Copy)]
pub struct Shown<'a> {
    text: &'a str,
    max: usize,
}

/// `text` as it may be shown: capped at [`SHOWN_MAX_BYTES`] and escaped.
pub fn shown(text: &str) -> Shown<'_> {
    Shown {
        text,
        max: SHOWN_MAX_BYTES,
    }
}

/// `text` capped at `max` bytes and escaped.
pub fn shown_max(text: &str, max: usize) -> Shown<'_> {
    Shown { text, max }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// `text` cut to at most `max` bytes (on a character boundary), ending in `marker` when it
/// was cut; the marker counts against `max` when it fits.
pub fn truncate_with_marker<'a>(text: &'a str, max: usize, marker: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let room = max.saturating_sub(marker.len());
    let mut out = String::with_capacity(max);
    out.push_str(prefix(text, room));
    out.push_str(marker);
    Cow::Owned(out)
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = prefix(self.text, self.max);
        for c in kept.chars() {
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\\' => f.write_str("\\\\")?,
                c if c.is_control() || is_invisible_format(c) => {
                    write!(f, "\\u{{{:x}}}", c as u32)?
                }
                c => f.write_char(c)?,
            }
        }
        if kept.len() < self.text.len() {
            write!(f, "…({} more bytes)", self.text.len() - kept.len())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Characters that change how the text around them reads without being visible: bidi
/// overrides and isolates (which can reorder a log line on screen), line and paragraph
/// separators.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_and_escapes_cannot_forge_lines_or_drive_terminals() {
        let forged =
            "ok\n2026-11-23T00:00:00Z ERROR kubeplug::controller: pwned\r\x1b[31mred\u{202e}";
        let s = shown(forged).to_string();
        assert!(
            !s.contains('\n') && !s.contains('\r') && !s.contains('\x1b'),
            "{s}"
        );
        assert!(
            s.contains("\\n2026") && s.contains("\\u{1b}[31m") && s.contains("\\u{202e}"),
            "{s}"
        );
    }

    #[test]
    fn long_text_is_capped_with_a_count_of_what_was_cut() {
        let big = "é".repeat(1000); // 2000 bytes
        let s = shown_max(&big, 101).to_string();
        assert!(s.starts_with(&"é".repeat(50)), "{s}");
        assert!(s.ends_with("…(1900 more bytes)"), "{s}");
        assert_eq!(shown("short").to_string(), "short");
    }

    #[test]
    fn backslashes_are_escaped_so_escapes_are_unambiguous() {
        assert_eq!(shown("a\\nb").to_string(), "a\\\\nb");
    }

    #[test]
    fn truncation_keeps_char_boundaries_and_the_marker_fits() {
        let t = truncate_with_marker("ééééé", 7, "...");
        assert_eq!(t, "éé...");
        assert!(t.len() <= 7);
        assert_eq!(truncate_with_marker("abc", 3, "..."), "abc");
    }
}
