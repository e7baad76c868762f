//! Modules from OCI registries (issue 26): `oci://` references, push and pull of wasm
//! modules in both media-type conventions, registry flags and credentials, and the
//! content-addressed cache of pulled modules. The registry protocol is oci-client's.

pub mod access;
pub mod cache;
pub mod fetch;
pub mod keys;
pub mod pull_error;
pub mod reference;
pub mod registry;
pub mod signature;
pub mod transfer;
pub mod verification;

pub use pull_error::{LayoutError, PullError};
pub use reference::OciRef;
pub use registry::{Registries, RegistryArgs};
