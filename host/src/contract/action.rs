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

/// What an action does, named once for every kind: the policy, the fence, the executor,
/// the audit and the ledger read it, so a new kind of action is described here and the
/// compiler points at each match that must learn it (none of them has a wildcard arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A request that changes the cluster, by this verb: checked against the grant, audited,
    /// sent only while the key is held.
    Write(WriteVerb),
    /// A line in the host's log, attributed to the plugin.
    Log,
    /// The key queued again after a delay.
    Requeue,
}

/// How a write changes the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerb {
    /// Changes an existing object.
    Patch,
    /// Makes a new object from a manifest.
    Create,
    /// Removes an object.
    Delete,
    /// Posts a new Event about an object.
    Event,
}

impl WriteVerb {
    /// Whether the write carries, as a precondition, the resourceVersion the plugin decided
    /// on: patches and deletes do; a create names no existing version and an Event is a new
    /// object about its subject (see `actions::fence`).
    pub fn fenced(self) -> bool {
        match self {
            WriteVerb::Patch | WriteVerb::Delete => true,
            WriteVerb::Create | WriteVerb::Event => false,
        }
    }
}

/// Every action kind: its name in the JSON form (`action`), and in logs, metrics, the audit,
/// the stream and the ledger.
pub const ACTION_NAMES: [(&str, &str); 6] = [
    ("patch", "patch"),
    ("create", "create"),
    ("delete", "delete"),
    ("event", "event"),
    ("log", "log"),
    ("requeueAfter", "requeue-after"),
];

impl Action {
    /// What the action does.
    pub fn effect(&self) -> Effect {
        match self {
            Action::Patch { .. } => Effect::Write(WriteVerb::Patch),
            Action::Create { .. } => Effect::Write(WriteVerb::Create),
            Action::Delete { .. } => Effect::Write(WriteVerb::Delete),
            Action::Event { .. } => Effect::Write(WriteVerb::Event),
            Action::Log { .. } => Effect::Log,
            Action::RequeueAfter { .. } => Effect::Requeue,
        }
    }

    fn names(&self) -> (&'static str, &'static str) {
        let index = match self {
            Action::Patch { .. } => 0,
            Action::Create { .. } => 1,
            Action::Delete { .. } => 2,
            Action::Event { .. } => 3,
            Action::Log { .. } => 4,
            Action::RequeueAfter { .. } => 5,
        };
        ACTION_NAMES[index]
    }

    /// A short name for logs and metrics: `patch`, `create`, `delete`, `event`, `log`,
    /// `requeue-after`.
    pub fn kind(&self) -> &'static str {
        self.names().1
    }

    /// Its name in the JSON form (the `action` field): `requeueAfter` for a requeue.
    pub fn wire_name(&self) -> &'static str {
        self.names().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_name_is_what_serde_writes() {
        let t = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        };
        let all = [
            Action::Patch {
                target: t.clone(),
                patch_type: PatchType::Merge,
                subresource: None,
                body: serde_json::json!({}),
            },
            Action::Create {
                manifest: serde_json::json!({}),
            },
            Action::Delete { target: t.clone() },
            Action::Event {
                regarding: t,
                event_type: EventType::Normal,
                reason: "R".into(),
                message: "m".into(),
                event_action: "Reconcile".into(),
            },
            Action::Log {
                level: LogLevel::Info,
                message: "m".into(),
            },
            Action::RequeueAfter { after_ms: 1 },
        ];
        for (action, (wire, _)) in all.iter().zip(ACTION_NAMES) {
            assert_eq!(serde_json::to_value(action).unwrap()["action"], wire);
            assert_eq!(action.wire_name(), wire);
        }
    }
}
