//! The actions a plugin returns, in the form the host checks, executes and prints.

use super::ObjectRef;
/// How a patch body is interpreted: the Kubernetes API's patch types, defined with the
/// embedded API server (which parses them from requests) and named here by patch actions.
pub use kubeplug_vocab::PatchType;
use serde::Serialize;
use serde_json::Value;

/// Severity of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something an operator should look at.
    Warning,
}

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something the plugin could not handle.
    Error,
}

/// One action, validated: patch bodies and manifests are parsed JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Patch an object (or its `status`/`scale` subresource).
    #[serde(rename_all = "camelCase")]
    Patch {
        /// The object patched.
        target: ObjectRef,
        /// How `body` is applied.
        patch_type: PatchType,
        /// `status` or `scale`, when the patch goes to a subresource.
        #[serde(skip_serializing_if = "Option::is_none")]
        subresource: Option<String>,
        /// The patch.
        body: Value,
    },
    /// Create an object from a full manifest.
    Create {
        /// The object to create (`apiVersion`, `kind`, `metadata`, ...).
        manifest: Value,
    },
    /// Delete an object.
    Delete {
        /// The object deleted.
        target: ObjectRef,
    },
    /// Report a Kubernetes Event about an object.
    #[serde(rename_all = "camelCase")]
    Event {
        /// The object the Event is about.
        regarding: ObjectRef,
        /// Normal or Warning.
        event_type: EventType,
        /// Why, in CamelCase (`ImagePinned`).
        reason: String,
        /// What happened, for humans (`note` in events.k8s.io/v1).
        message: String,
        /// What was done; `Reconcile` when the plugin left it empty.
        event_action: String,
    },
    /// Write a line to the host's log, attributed to the plugin.
    Log {
        /// Its severity.
        level: LogLevel,
        /// The line.
        message: String,
    },
    /// Reconcile the same key again after a delay (the shortest of a call wins).
    #[serde(rename_all = "camelCase")]
    RequeueAfter {
        /// The delay, in milliseconds.
        after_ms: u64,
    },
}

impl Action {
    /// A short name for logs and metrics: `patch`, `create`, `delete`, `event`, `log`,
    /// `requeue-after`.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Patch { .. } => "patch",
            Action::Create { .. } => "create",
            Action::Delete { .. } => "delete",
            Action::Event { .. } => "event",
            Action::Log { .. } => "log",
            Action::RequeueAfter { .. } => "requeue-after",
        }
    }
}
