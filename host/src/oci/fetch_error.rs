//! Why a read from a registry failed, as a type: no answer, an error status, a hop the pull
//! may not take, an answer over its limit or not what was asked, or authentication this
//! client cannot give. Each names the URL asked; none quotes what the registry answered.

use super::access::HopRefused;
use super::error_chain::chain_text;

/// Why a read from a registry failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer: connection refused, reset, timed out.
    #[error("{url}: {}", chain_text(fault))]
    Transport {
        /// What was asked.
        url: String,
        /// reqwest's error; its causes are in the message, not a `source()`.
        fault: reqwest::Error,
    },
    /// The registry answered an error status.
    #[error("{url}: HTTP {status}{}", code.map(|c| format!(" ({c})")).unwrap_or_default())]
    Status {
        /// What was asked.
        url: String,
        /// The status.
        status: u16,
        /// The first error code of the body when it is one of the distribution spec's
        /// (`MANIFEST_UNKNOWN`, `DENIED`, …); the body itself is never kept.
        code: Option<&'static str>,
    },
    /// The registry pointed somewhere this pull may not go (a token realm or a redirect on
    /// a host no applying policy lists, a downgrade to plain http): nothing was sent there.
    #[error("{url}: {what} refused: {why}")]
    Refused {
        /// What was asked.
        url: String,
        /// What pointed there: the token realm, a redirect.
        what: &'static str,
        /// Why, naming the host only.
        why: HopRefused,
    },
    /// The answer was longer than its limit; reading stopped there.
    #[error("{url}: {what} is longer than {limit} bytes; stopped reading")]
    TooLarge {
        /// What was asked.
        url: String,
        /// What was read.
        what: Body,
        /// The limit.
        limit: u64,
    },
    /// The bytes do not have the digest they were asked by, or the length announced.
    #[error("{url}: {why}")]
    Mismatch {
        /// What was asked.
        url: String,
        /// What differs.
        why: String,
    },
    /// The registry asked for authentication this client cannot give.
    #[error("{url}: {why}")]
    Auth {
        /// What was asked.
        url: String,
        /// Why.
        why: String,
    },
}

impl FetchError {
    /// Whether trying again later may succeed: no answer, a 5xx, 429 or 408. A 404, a
    /// refusal of credentials, a digest that does not match or a size over the limit stay
    /// as they are until someone changes the registry or the reference.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Transport { .. } => true,
            FetchError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }
}

/// What a bounded read was reading when it passed its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// A manifest.
    Manifest,
    /// A blob: a module's layer, a config, a signature payload.
    Blob,
    /// A token realm's answer.
    Token,
}

impl std::fmt::Display for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Body::Manifest => "the manifest",
            Body::Blob => "the blob",
            Body::Token => "the token",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_worth_retrying() {
        let status = |status| FetchError::Status {
            url: "u".into(),
            status,
            code: None,
        };
        assert!(status(503).is_transient());
        assert!(status(429).is_transient());
        assert!(!status(404).is_transient());
        assert!(!status(403).is_transient());
        let big = FetchError::TooLarge {
            url: "u".into(),
            what: Body::Manifest,
            limit: 1,
        };
        assert!(!big.is_transient());
        assert_eq!(
            big.to_string(),
            "u: the manifest is longer than 1 bytes; stopped reading"
        );
    }
}
