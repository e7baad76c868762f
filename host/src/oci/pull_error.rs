//! Why a pull failed, as a type: the registry could not be asked or answered an error, what
//! it holds is not a module kubeplug takes, the module is over the size limit, or the local
//! module cache failed. A Plugin's status reason is chosen from the variant, never from the
//! message's words.

use super::fetch::FetchError;

/// A pull that failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The registry was not reached, answered an error status, or pointed somewhere refused.
    #[error("{what}: {fault}")]
    Fetch {
        /// What was being read (`pulling the manifest of oci://…`).
        what: String,
        /// The request's failure (in the message, not a `source()`: a caller that prints only
        /// this error, not its chain, still says what failed).
        fault: FetchError,
    },
    /// What the registry holds is not one wasm module of a known layout.
    #[error("{image}: {fault}")]
    Layout {
        /// The image, pinned when its manifest was read.
        image: String,
        /// What is wrong with it.
        fault: LayoutError,
    },
    /// The wasm layer is larger than `--max-module-mib`.
    #[error(
        "{image}: the wasm layer is {size} bytes, more than the {limit_mib} MiB limit (--max-module-mib)"
    )]
    TooLarge {
        /// The image, pinned.
        image: String,
        /// The layer's size as the manifest gives it.
        size: u64,
        /// The limit.
        limit_mib: u64,
    },
    /// The local module cache could not be written.
    #[error("{what} the module cache: {fault}")]
    Cache {
        /// `writing to`, `recording the manifest in`.
        what: &'static str,
        /// The file system's error.
        fault: std::io::Error,
    },
}

impl PullError {
    /// The registry's failure, when it was one.
    pub fn fetch(&self) -> Option<&FetchError> {
        match self {
            PullError::Fetch { fault, .. } => Some(fault),
            _ => None,
        }
    }
}

/// What makes a manifest not a wasm module kubeplug takes (an index, a container image, no
/// or several wasm layers, a layer without a digest or size); the text names what was found,
/// never the registry's free text.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub(super) String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_reads_as_one_line_and_the_fetch_error_is_reachable() {
        let err = anyhow::Error::new(PullError::Fetch {
            what: "pulling the manifest of oci://r/x:v1".into(),
            fault: FetchError::Status {
                url: "u".into(),
                status: 503,
                code: None,
            },
        });
        assert_eq!(
            format!("{err:#}"),
            "pulling the manifest of oci://r/x:v1: u: HTTP 503"
        );
        // Printed alone, not through a chain, it still says what failed.
        let alone = err.downcast_ref::<PullError>().unwrap().to_string();
        assert_eq!(alone, "pulling the manifest of oci://r/x:v1: u: HTTP 503");
        let pull = err.downcast_ref::<PullError>().unwrap();
        assert!(matches!(
            pull.fetch(),
            Some(FetchError::Status { status: 503, .. })
        ));
        let big = PullError::TooLarge {
            image: "oci://r/x@sha256:00".into(),
            size: 9,
            limit_mib: 1,
        };
        assert!(big.to_string().ends_with("(--max-module-mib)"));
    }
}
