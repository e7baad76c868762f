//! Modules from OCI registries (issue 26): `oci://` references, push and pull of wasm
//! modules in both media-type conventions, registry flags and credentials, and the
//! content-addressed cache of pulled modules. The registry protocol is oci-client's.
//! Each operation fails with its own error type (`PullError`, `PushError`, `MirrorError`,
//! `SignatureError`, `VerifyError`, …), so callers branch on variants, never on words.

pub mod access;
pub mod cache;
pub mod error_chain;
pub mod fetch;
pub mod fetch_error;
pub mod keys;
pub mod pull_error;
pub mod push_error;
pub mod reference;
pub mod registry;
pub mod signature;
pub mod signature_error;
pub mod transfer;
pub mod verification;

pub use fetch_error::FetchError;
pub use pull_error::{LayoutError, PullError};
pub use push_error::{MirrorError, PushError};
pub use reference::{OciRef, RefError};
pub use registry::{CredentialsError, Registries, RegistryArgs, RegistryConfigError};
pub use signature_error::SignatureError;
pub use verification::{ResolveError, VerifiedPullError, VerifyError};
