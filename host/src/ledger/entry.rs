//! One ledger entry: one reconcile of one key by one plugin revision, as the host saw it
//! (why it ran, the object version the plugin saw, what it decided, the policy's verdict on
//! each action and what each write left its object at). Plugin text in it arrives capped by
//! the audit record; the entry bounds the rest.

use crate::policy::{AuditRecord, Decision};
use serde::{Deserialize, Serialize};

/// The most actions an entry keeps (a call may return more; the count says so).
pub const MAX_ACTIONS: usize = 64;
/// The most bytes of an error or detail text an entry keeps.
pub const MAX_DETAIL_BYTES: usize = 1024;

/// Which object a reconcile was about: its kind and key (namespace empty when
/// cluster-scoped), spelled as the index of the store keys it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectId {
    /// The object's kind (`Deployment`, `Foo`).
    pub kind: String,
    /// Its namespace, empty for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ObjectId {
    /// The index key: `kind/namespace/name`, the kind in lower case so `deployment` and
    /// `Deployment` find the same history.
    pub fn index_key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.kind.to_ascii_lowercase(),
            self.namespace,
            self.name
        )
    }
}

/// One action of the call and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `patch`, `create`, `delete`, `event`, `log`, `requeue-after`.
    pub action: String,
    /// The object acted on (`Deployment ns/web`).
    pub target: String,
    /// `executed`, `denied`, `dry-run`, `failed`, `skipped`, `already-done`, `not-held`.
    pub decision: String,
    /// The denial's rule, the error, or why nothing was needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// sha256 of the patch body or manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_digest: Option<String>,
}

impl Verdict {
    /// The verdict an audit record tells.
    pub fn of(record: &AuditRecord) -> Verdict {
        let detail = match &record.decision {
            Decision::Denied(denial) => Some(denial.to_string()),
            Decision::Failed { error, .. } => Some(error.clone()),
            Decision::AlreadyDone { reason } => Some(reason.clone()),
            _ => None,
        };
        Verdict {
            action: record.action.to_string(),
            target: record.target.clone(),
            decision: record.decision.as_str().to_string(),
            detail: detail.map(|d| capped(&d)),
            body_digest: record.body_digest.clone(),
        }
    }
}

/// What a write left its object at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// `patched`, `created`, `deleted`.
    pub change: String,
    /// The object written (`Deployment ns/web`).
    pub object: String,
    /// Its resourceVersion afterwards, when the API server answered with the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// One thing that queued the key: a watch event (with the versions before and after and the
/// fields it changed), a child's change, a resync, a retry or a requeue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRecord {
    /// `added`, `changed`, `deleted`, `resync`, `retry`, `requeue`.
    pub reason: String,
    /// The other object whose change it was (an owned child: `Pod ns/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Who made the change: the field manager (and subresource) managedFields name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The object's resourceVersion before the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rv_before: Option<String>,
    /// Its resourceVersion after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rv_after: Option<String>,
    /// The fields it changed (JSON pointers, a short scalar's values beside; bounded; see
    /// `diff.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// One reconcile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// When the call ended (wall clock).
    pub time: jiff::Timestamp,
    /// The object reconciled.
    pub object: ObjectId,
    /// The plugin instance.
    pub plugin: String,
    /// sha256 of the revision's component.
    pub digest: String,
    /// Why it ran: `added`, `changed`, `deleted`, `resync`, `retry`, `requeue`.
    pub reason: String,
    /// The attempt number (1 unless retried).
    pub attempt: u32,
    /// The object's resourceVersion the plugin saw (absent: it was gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// What queued the key since its last call, oldest first (the newest few).
    #[serde(default)]
    pub triggers: Vec<TriggerRecord>,
    /// How many triggers the queue merged into this call (kept or not).
    #[serde(default)]
    pub queued: u32,
    /// What the plugin read through host imports: `Kind ns/name@rv`, in the order first read
    /// (at most [`MAX_ACTIONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// How many distinct objects it read (more than `reads` holds when capped).
    #[serde(default)]
    pub read_count: usize,
    /// Each action and its verdict, in order (at most [`MAX_ACTIONS`]).
    #[serde(default)]
    pub actions: Vec<Verdict>,
    /// How many actions the call returned (more than `actions` holds when it was capped).
    pub action_count: usize,
    /// What the writes left their objects at.
    #[serde(default)]
    pub writes: Vec<Written>,
    /// Why the call failed, if it did (the plugin's error or the first failed action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Entry {
    /// A reconcile of Deployment `namespace/name` by `plugin` at `time` that decided nothing:
    /// the start of the tests' entries.
    #[cfg(test)]
    pub fn sample(namespace: &str, name: &str, plugin: &str, time: jiff::Timestamp) -> Entry {
        Entry {
            time,
            object: ObjectId {
                kind: "Deployment".into(),
                namespace: namespace.into(),
                name: name.into(),
            },
            plugin: plugin.into(),
            digest: "sha256:00".into(),
            reason: "changed".into(),
            attempt: 1,
            resource_version: Some("7".into()),
            reads: Vec::new(),
            read_count: 0,
            triggers: Vec::new(),
            queued: 1,
            actions: Vec::new(),
            action_count: 0,
            writes: Vec::new(),
            error: None,
        }
    }

    /// Bounds what the entry keeps: at most [`MAX_ACTIONS`] actions and writes, texts capped.
    pub fn bounded(mut self) -> Entry {
        self.actions.truncate(MAX_ACTIONS);
        self.writes.truncate(MAX_ACTIONS);
        self.error = self.error.map(|e| capped(&e));
        self
    }
}

/// `text`, cut at [`MAX_DETAIL_BYTES`] on a character boundary.
pub fn capped(text: &str) -> String {
    crate::contract::text::truncate_with_marker(text, MAX_DETAIL_BYTES, "…").into_owned()
}
