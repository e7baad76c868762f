//! The plugin contract as the host sees it: requests, actions and plugin metadata as plain,
//! serialisable Rust types, independent of the WIT bindings of any one contract version.

mod action;
pub mod event_fields;
#[cfg(test)]
mod frozen;
mod metadata;
pub mod names;
mod object_ref;
mod objects;
mod request;
pub mod selector;
pub mod text;
pub(crate) mod validate;

pub use action::{ACTION_NAMES, Action, Effect, EventType, LogLevel, PatchType, WriteVerb};
pub use metadata::{
    MAX_API_VERSION_BYTES, MAX_KIND_BYTES, MAX_OWNED_KINDS, MAX_PLUGIN_NAME_BYTES,
    MAX_VERSION_BYTES, MetadataError, PluginMetadata,
};
pub use object_ref::{KindRef, ObjectRef, Scope};
pub use objects::{NoObjects, ObjectSource};
pub use request::{Reason, ReconcileRequest};
pub use validate::{ActionFault, OutputLimits, OutputViolation, validate_actions};

/// Every contract version this host can load, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0"];

/// The WIT package that carries the contract.
pub const PACKAGE: &str = "kubeplug:plugin";
