//! Audit records: one per action a plugin returned, with the decision taken on it. Each goes
//! to the log (structured tracing fields), to `kubeplug_actions_total{plugin,action,decision}`
//! and to an in-process broadcast channel (for the live stream).

use super::check::Denial;
use crate::contract::text::{shown, truncate_with_marker};
use crate::contract::{Action, PatchType};
use crate::metrics::{PluginFamily, SeriesLimit};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tokio::sync::broadcast;

/// What was decided about one action.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// Sent and accepted, or nothing to send (log, requeue-after).
    Executed,
    /// Nothing needed: the object was already gone, or already existed.
    AlreadyDone {
        /// Gone or exists.
        reason: String,
    },
    /// Refused by the policy; never sent.
    Denied(Denial),
    /// Allowed, but the plugin runs in dry-run: not sent.
    DryRun,
    /// Sent and failed.
    Failed {
        /// What the API server or the host said.
        error: String,
        /// Whether the key is retried with backoff (else it waits for a change).
        transient: bool,
    },
    /// Not attempted because an earlier action of the call failed.
    Skipped,
    /// Allowed, but not sent: at the moment it was due this replica no longer held the key
    /// (its lease lapsed or the key moved to another replica).
    NotHeld,
}

impl Decision {
    /// The name in metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::Executed => "executed",
            Decision::AlreadyDone { .. } => "already-done",
            Decision::Denied(_) => "denied",
            Decision::DryRun => "dry-run",
            Decision::Failed { .. } => "failed",
            Decision::Skipped => "skipped",
            Decision::NotHeld => "not-held",
        }
    }
}

/// The plugin an action came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginIdentity {
    /// Instance name (the operator's: the plugin file's name).
    pub name: String,
    /// The name the plugin declares in its metadata: informational only.
    pub declared: String,
    /// The version the plugin declares in its metadata.
    pub version: String,
    /// sha256 of the component.
    pub digest: String,
}

/// The most bytes of a target or subresource an audit record keeps (plugin-provided text).
pub const MAX_TARGET_BYTES: usize = 1024;

/// One action and its decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// When the decision was taken (wall clock).
    pub time: jiff::Timestamp,
    /// Shared by every record of the plugin version: never copied per record.
    #[serde(serialize_with = "serialize_identity")]
    pub plugin: Arc<PluginIdentity>,
    /// The key being reconciled.
    pub key: String,
    /// `patch`, `create`, `delete`, `event`, `log`, `requeue-after`.
    pub action: &'static str,
    /// The object acted on (`Deployment ns/name`).
    pub target: String,
    /// A patch's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<PatchType>,
    /// A patch's subresource (capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
    /// sha256 of the patch body or manifest, as compact JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_digest: Option<String>,
    /// The patch body or manifest, kept for dry-run records (what would have been sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// What was decided, and how it ended.
    #[serde(flatten)]
    pub decision: Decision,
}

impl AuditRecord {
    /// A record of `action` for `key`; the body is kept only for dry-run decisions. The
    /// plugin's identity is shared, and the plugin-provided target is capped.
    pub fn new(
        plugin: &Arc<PluginIdentity>,
        key: &str,
        action: &Action,
        decision: Decision,
    ) -> Self {
        let (target, patch_type, subresource, body) = match action {
            Action::Patch {
                target,
                patch_type,
                subresource,
                body,
            } => (
                target.to_string(),
                Some(*patch_type),
                subresource.as_deref().map(capped),
                Some(body),
            ),
            Action::Create { manifest } => (describe(manifest), None, None, Some(manifest)),
            Action::Delete { target } => (target.to_string(), None, None, None),
            Action::Event { regarding, .. } => (regarding.to_string(), None, None, None),
            Action::Log { .. } | Action::RequeueAfter { .. } => (key.to_string(), None, None, None),
        };
        AuditRecord {
            time: jiff::Timestamp::now(),
            plugin: plugin.clone(),
            key: key.to_string(),
            action: action.kind(),
            target: if target.len() > MAX_TARGET_BYTES {
                capped(&target)
            } else {
                target
            },
            patch_type,
            subresource,
            body_digest: body.map(digest),
            body: body.filter(|_| decision == Decision::DryRun).cloned(),
            decision,
        }
    }
}

fn capped(text: &str) -> String {
    truncate_with_marker(text, MAX_TARGET_BYTES, "…").into_owned()
}

fn serialize_identity<S: serde::Serializer>(
    identity: &Arc<PluginIdentity>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    identity.as_ref().serialize(serializer)
}

fn describe(m: &Value) -> String {
    let s = |p: &str| m.pointer(p).and_then(Value::as_str).unwrap_or_default();
    match m.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{} {ns}/{}", s("/kind"), s("/metadata/name")),
        None => format!("{} {}", s("/kind"), s("/metadata/name")),
    }
}

/// `sha256:<hex>` of the compact JSON text of `body`.
pub fn digest(body: &Value) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body.to_string())))
}

/// The labels of `kubeplug_actions_total` beside the plugin's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
    decision: &'static str,
}

/// What one call decided to write, whatever became of it (sent, denied, dry-run): one line
/// per patch, create, delete or Event, in order. Two revisions that decide the same lines
/// for a key agree on it (a shadow rollout compares them).
#[derive(Debug, Clone, PartialEq)]
pub struct CallDecisions {
    /// The instance that decided.
    pub plugin: Arc<PluginIdentity>,
    /// The key reconciled.
    pub key: String,
    /// `patch Deployment ns/web sha256:…`, `event Deployment ns/web Normal ImagePinned`, …
    pub decided: Vec<String>,
}

/// The line of a write or Event `action` in a [`CallDecisions`]; `None` for logs and
/// requeues, which decide nothing about the cluster. Plugin text in it is capped.
pub fn decision_line(action: &Action) -> Option<String> {
    let line = match action {
        Action::Patch {
            target,
            subresource,
            body,
            ..
        } => format!(
            "patch {target}{} {}",
            subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            digest(body)
        ),
        Action::Create { manifest } => {
            format!("create {} {}", describe(manifest), digest(manifest))
        }
        Action::Delete { target } => format!("delete {target}"),
        Action::Event {
            regarding,
            event_type,
            reason,
            ..
        } => format!("event {regarding} {event_type:?} {reason}"),
        Action::Log { .. } | Action::RequeueAfter { .. } => return None,
    };
    Some(capped(&line))
}

/// Where audit records go: log, counters, broadcast channel. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditSink {
    sender: broadcast::Sender<Arc<AuditRecord>>,
    calls: broadcast::Sender<Arc<CallDecisions>>,
    actions: PluginFamily<ActionLabels, Counter>,
}

impl Default for AuditSink {
    /// A sink whose counters are not registered anywhere (tests, tools).
    fn default() -> Self {
        AuditSink {
            sender: broadcast::channel(1024).0,
            calls: broadcast::channel(1024).0,
            actions: PluginFamily::new("plugin", Counter::default),
        }
    }
}

impl AuditSink {
    /// A sink whose counter `kubeplug_actions_total` is registered in `registry`.
    pub fn new(registry: &mut Registry, limit: &SeriesLimit) -> Self {
        let sink = AuditSink::default();
        sink.register(registry, limit);
        sink
    }

    /// Registers the counter `kubeplug_actions_total` in `registry` (once per registry),
    /// summed per namespace past `limit`.
    pub fn register(&self, registry: &mut Registry, limit: &SeriesLimit) {
        self.actions.limit_by(limit);
        registry.register(
            "kubeplug_actions",
            "Plugin actions by plugin, action kind and policy decision",
            self.actions.clone(),
        );
    }

    /// Receives every record from now on (a slow receiver loses the oldest: `Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<AuditRecord>> {
        self.sender.subscribe()
    }

    /// Receives what every call decides from now on (calls with no action too).
    pub fn calls(&self) -> broadcast::Receiver<Arc<CallDecisions>> {
        self.calls.subscribe()
    }

    /// Announces what a call of `plugin` on `key` decided; costs nothing while nobody
    /// listens (only a rollout in shadow does).
    pub fn record_call(&self, plugin: &Arc<PluginIdentity>, key: &str, actions: &[Action]) {
        if self.calls.receiver_count() == 0 {
            return;
        }
        let _ = self.calls.send(Arc::new(CallDecisions {
            plugin: plugin.clone(),
            key: key.to_string(),
            decided: actions.iter().filter_map(decision_line).collect(),
        }));
    }

    /// Removes the action counters of `plugin`, which stopped (their counts stay in its
    /// namespace's sum while that namespace runs plugins).
    pub fn remove_plugin(&self, plugin: &str) {
        self.actions.remove(plugin);
    }

    /// Records one decision: log line (denied and failed at warn, dry-run at info, the rest
    /// at debug), counter, broadcast.
    pub fn record(&self, record: AuditRecord) {
        self.actions
            .get_or_create(
                &record.plugin.name,
                &ActionLabels {
                    action: record.action,
                    decision: record.decision.as_str(),
                },
            )
            .inc();
        let (plugin, key, action, decision) = (
            &*record.plugin.name,
            record.key.as_str(),
            record.action,
            record.decision.as_str(),
        );
        // Targets, reasons and errors carry plugin-provided text (names, paths, bodies
        // echoed by the API server): shown capped and escaped.
        let (target, digest) = (shown(&record.target), record.body_digest.as_deref());
        match &record.decision {
            Decision::Denied(d) => {
                tracing::warn!(plugin, key, action, decision, %target, grant = d.grant.as_str(), digest, "action denied: {}", shown(&d.reason))
            }
            Decision::Failed { error, transient } => {
                tracing::warn!(plugin, key, action, decision, %target, transient, digest, "action failed: {}", shown(error))
            }
            Decision::NotHeld => {
                tracing::warn!(plugin, key, action, decision, %target, digest, "not sent: this replica no longer holds the key")
            }
            Decision::DryRun => {
                let body = record
                    .body
                    .as_ref()
                    .map(|b| crate::contract::text::shown_max(&b.to_string(), 4096).to_string());
                tracing::info!(plugin, key, action, decision, %target, digest, body, "dry-run: not sent")
            }
            // The busy path: at debug, beside the executor's own line.
            _ => {
                tracing::debug!(plugin, key, action, decision, %target, digest, "{action} {target}: {decision}")
            }
        }
        let _ = self.sender.send(Arc::new(record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ObjectRef;
    use serde_json::json;

    fn identity() -> Arc<PluginIdentity> {
        Arc::new(PluginIdentity {
            name: "p".into(),
            declared: "p".into(),
            version: "1.0.0".into(),
            digest: "sha256:abc".into(),
        })
    }

    fn patch() -> Action {
        Action::Patch {
            target: ObjectRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("a".into()),
                name: "web".into(),
            },
            patch_type: PatchType::Merge,
            subresource: None,
            body: json!({"spec": {"replicas": 1}}),
        }
    }

    #[test]
    fn records_count_broadcast_and_keep_dry_run_bodies() {
        let mut registry = Registry::default();
        let sink = AuditSink::new(&mut registry, &SeriesLimit::default());
        let mut rx = sink.subscribe();
        sink.record(AuditRecord::new(
            &identity(),
            "a/web",
            &patch(),
            Decision::DryRun,
        ));
        sink.record(AuditRecord::new(
            &identity(),
            "a/web",
            &patch(),
            Decision::Executed,
        ));
        let dry = rx.try_recv().unwrap();
        assert_eq!(dry.body, Some(json!({"spec": {"replicas": 1}})));
        assert_eq!(
            dry.body_digest,
            Some(digest(&json!({"spec": {"replicas": 1}})))
        );
        assert!(dry.body_digest.as_ref().unwrap().starts_with("sha256:"));
        let done = rx.try_recv().unwrap();
        assert_eq!(done.body, None);
        let json = serde_json::to_value(&*done).unwrap();
        assert_eq!(json["decision"], "executed");
        assert_eq!(json["patchType"], "merge");
        let denial = Denial {
            grant: super::super::check::Grant::Fields,
            reason: "field /spec/replicas of apps/v1/Deployment is not granted".into(),
        };
        let denied = AuditRecord::new(&identity(), "a/web", &patch(), Decision::Denied(denial));
        let json = serde_json::to_value(&denied).unwrap();
        assert_eq!(
            (
                &json["decision"],
                &json["grant"],
                &json["plugin"]["version"]
            ),
            (&json!("denied"), &json!("fields"), &json!("1.0.0"))
        );
        assert!(json["reason"].as_str().unwrap().contains("/spec/replicas"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"kubeplug_actions_total{plugin="p",action="patch",decision="dry-run"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_removed_plugins_action_counters_go() {
        let mut registry = Registry::default();
        let sink = AuditSink::new(&mut registry, &SeriesLimit::default());
        sink.record(AuditRecord::new(
            &identity(),
            "a/web",
            &patch(),
            Decision::Executed,
        ));
        let text = |r: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, r).unwrap();
            text
        };
        assert!(text(&registry).contains(r#"plugin="p""#));
        sink.remove_plugin("p");
        assert!(!text(&registry).contains(r#"plugin="p""#));
    }

    #[test]
    fn records_share_the_identity_and_cap_plugin_text() {
        let id = Arc::new(PluginIdentity {
            name: "p".into(),
            declared: "p".into(),
            version: "9".repeat(128),
            digest: "sha256:abc".into(),
        });
        let mut huge = patch();
        if let Action::Patch {
            target,
            subresource,
            ..
        } = &mut huge
        {
            target.name = "n".repeat(1 << 20);
            *subresource = Some("s".repeat(1 << 20));
        }
        let records: Vec<_> = (0..100)
            .map(|_| AuditRecord::new(&id, "a/web", &huge, Decision::Executed))
            .collect();
        assert!(records.iter().all(|r| Arc::ptr_eq(&r.plugin, &id)));
        assert_eq!(Arc::strong_count(&id), 101);
        assert!(records[0].target.len() <= MAX_TARGET_BYTES);
        assert!(records[0].subresource.as_ref().unwrap().len() <= MAX_TARGET_BYTES);
        let json = serde_json::to_value(&records[0]).unwrap();
        assert_eq!(json["plugin"]["name"], "p");
    }
}
