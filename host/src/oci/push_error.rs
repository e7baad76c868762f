//! Why a push or a mirror failed, as types: the module or the target refused before any
//! request, the registry refusing a step (naming the reference and the step), or, for a
//! mirror, the pull of the source or what its manifest lacks.

use super::error_chain::chain_text;
use super::fetch::FetchError;
use super::pull_error::PullError;

/// A push that failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The target is pinned: a push goes to a tag.
    #[error("{reference}: push to a tag, not a digest (the digest is what push prints)")]
    ToDigest {
        /// The target.
        reference: String,
    },
    /// The bytes are not a WebAssembly module.
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    /// The module is larger than `--max-module-mib`.
    #[error("the module is {size} bytes, more than the {limit_mib} MiB limit (--max-module-mib)")]
    TooLarge {
        /// The module's size.
        size: u64,
        /// The limit.
        limit_mib: u64,
    },
    /// The manifest's media type cannot be sent as a header.
    #[error("{reference}: the manifest's media type is no header value")]
    MediaType {
        /// The target.
        reference: String,
    },
    /// The registry refused or failed a step of the push.
    #[error("{reference}: {step}: {}", chain_text(fault))]
    Registry {
        /// The target.
        reference: String,
        /// The step: `authenticating to push`, `pushing blob sha256:…`, `pushing the manifest`.
        step: String,
        /// oci-client's error.
        fault: oci_client::errors::OciDistributionError,
    },
}

/// A mirror that failed.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The destination is pinned: a mirror goes to a repository or tag.
    #[error(
        "{destination}: mirror to a repository or tag, not a digest (the digest stays the source's)"
    )]
    ToDigest {
        /// The destination.
        destination: String,
    },
    /// The source module could not be pulled.
    #[error(transparent)]
    Pull(#[from] PullError),
    /// A read of the source (its manifest, its config) failed.
    #[error("{what}: {fault}")]
    Fetch {
        /// What was read: `pulling the manifest of oci://…`, `oci://…: pulling the config`.
        what: String,
        /// The request's failure.
        fault: FetchError,
    },
    /// The source's manifest lacks what a copy needs (a config, its size, a sha256 digest).
    #[error("{image}: {why}")]
    Manifest {
        /// The source, pinned.
        image: String,
        /// What is missing or wrong (never the registry's text).
        why: String,
    },
    /// The destination refused the copy.
    #[error(transparent)]
    Push(#[from] PushError),
    /// The destination's digest is not the source's (it rewrote the manifest).
    #[error("{target}: pushed digest sha256:{digest} differs from the source's")]
    DigestDiffers {
        /// The destination.
        target: String,
        /// The digest it answered.
        digest: String,
    },
}
