//! An error and its causes as one line (`a: b: c`), for messages that must say everything to
//! a reader who prints only the error itself: reqwest and oci-client keep the telling part
//! (`Connection refused`, a TLS failure) in their `source()` chains.

/// `err` and each of its sources, joined by `: `; a cause whose text the line already ends
/// with is said once (reqwest's errors repeat their inner text).
pub fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !part.is_empty() && !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Layer(&'static str, #[source] Option<Box<Layer>>);

    #[test]
    fn causes_are_joined_and_repeats_said_once() {
        let inner = Layer("connection refused", None);
        let middle = Layer("connection refused", Some(Box::new(inner)));
        let outer = Layer("error sending request", Some(Box::new(middle)));
        assert_eq!(
            chain_text(&outer),
            "error sending request: connection refused"
        );
        assert_eq!(chain_text(&Layer("alone", None)), "alone");
    }
}
