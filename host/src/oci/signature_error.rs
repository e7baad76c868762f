//! Why reading, writing or copying cosign signatures failed, as a type: the reference is not
//! pinned, the registry failed a read or refused a push (naming what was read or pushed), or
//! a signature manifest is not what cosign writes (naming it, never quoting the registry).

use super::fetch::FetchError;
use super::pull_error::LayoutError;
use super::push_error::PushError;

/// A signature operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Signatures are read for a `@sha256:` reference only.
    #[error("{reference}: signatures are read for a pinned reference")]
    NotPinned {
        /// The reference given.
        reference: String,
    },
    /// Signing needs a digest: a tag can move to another module.
    #[error(
        "{reference}: sign a digest (oci://…@sha256:…, as push prints it): a tag can move to another module"
    )]
    SignTag {
        /// The reference given.
        reference: String,
    },
    /// A read from the registry failed.
    #[error("{what}: {fault}")]
    Fetch {
        /// What was read: `the signature manifest`, `reading signature payload sha256:…`.
        what: String,
        /// The request's failure.
        fault: FetchError,
    },
    /// A signature manifest is not what cosign writes, or passes a bound.
    #[error("{manifest}: {why}")]
    Manifest {
        /// The signature manifest (`oci://…:sha256-<hex>.sig`).
        manifest: String,
        /// What is wrong (never the registry's text).
        why: String,
    },
    /// What is to be signed is not a wasm module.
    #[error("{reference}: not a wasm module: {fault}")]
    NotModule {
        /// The module.
        reference: String,
        /// What it is instead.
        fault: LayoutError,
    },
    /// The registry refused the signatures.
    #[error("{what}: {fault}")]
    Push {
        /// What was pushed: `oci://…: pushing the signature`.
        what: String,
        /// The push's failure (boxed: oci-client's errors are large).
        fault: Box<PushError>,
    },
    /// The copied signature manifest's digest is not the source's.
    #[error("{target}: pushed digest sha256:{pushed} differs from the source's sha256:{want}")]
    DigestDiffers {
        /// The destination's signature manifest.
        target: String,
        /// The digest it answered.
        pushed: String,
        /// The source's.
        want: String,
    },
}
