//! The `tracing` layer that turns the host's structured log events about plugins into stream
//! records: plugin log lines (target `kubeplug::plugin`), audit decisions (target
//! `kubeplug::policy::audit`) and every event carrying a `record` field naming its type
//! (`event`, `reload`, `reconcile`). The host log and the stream so say the same things.
//! An Event whose note repeats a log line the same plugin just wrote for the same key (a
//! change logger logs a change and reports it as an Event) is marked as repeating it, so
//! that by default a viewer sees one line per change.

use super::hub::StreamHub;
use super::record::{Level, Record, RecordType};
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// Plugin log lines are emitted with this target.
const PLUGIN_TARGET: &str = "kubeplug::plugin";
/// Audit decisions are logged from this module.
const AUDIT_TARGET: &str = "kubeplug::policy::audit";
/// The most bytes of one field value (or message) a record keeps.
const MAX_FIELD_BYTES: usize = 8192;
/// Recent log lines an Event is compared with (as hashes of plugin, key and text).
const RECENT_LOGS: usize = 256;

/// Publishes the events it sees to a [`StreamHub`].
#[derive(Debug, Clone)]
pub struct StreamLayer {
    hub: StreamHub,
    recent_logs: Arc<Mutex<VecDeque<u64>>>,
}

impl StreamLayer {
    /// A layer publishing to `hub`.
    pub fn new(hub: StreamHub) -> StreamLayer {
        StreamLayer {
            hub,
            recent_logs: Arc::default(),
        }
    }

    /// Whether a record of `kind` repeats a recent log line; remembers log lines.
    fn repeats_a_log(&self, kind: RecordType, fields: &Fields) -> bool {
        if !matches!(kind, RecordType::Log | RecordType::Event) {
            return false;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for name in ["plugin", "key"] {
            fields
                .values
                .get(name)
                .and_then(Value::as_str)
                .hash(&mut hasher);
        }
        fields.message.hash(&mut hasher);
        let hash = hasher.finish();
        let mut recent = self.recent_logs.lock().unwrap_or_else(|p| p.into_inner());
        if kind == RecordType::Event {
            return recent.contains(&hash);
        }
        if recent.len() == RECENT_LOGS {
            recent.pop_front();
        }
        recent.push_back(hash);
        false
    }

    /// Whether an event of this target with these fields becomes a record (cheap: the
    /// field names only), and of which type when the fields do not say.
    fn kind_of(meta: &tracing::Metadata<'_>) -> Option<Option<RecordType>> {
        if meta.fields().field("record").is_some() {
            return Some(None);
        }
        match meta.target() {
            PLUGIN_TARGET => Some(Some(RecordType::Log)),
            AUDIT_TARGET => Some(Some(RecordType::Audit)),
            _ => None,
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StreamLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let Some(kind) = Self::kind_of(meta) else {
            return;
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(kind) = kind.or_else(|| fields.record.as_deref().and_then(RecordType::parse))
        else {
            return;
        };
        let level = match *meta.level() {
            tracing::Level::ERROR => Level::Error,
            tracing::Level::WARN => Level::Warn,
            tracing::Level::INFO => Level::Info,
            _ => Level::Debug,
        };
        let repeats = self.repeats_a_log(kind, &fields);
        let record = Record::new(kind, level, &fields.message, fields.values);
        self.hub.publish(match repeats {
            true => record.repeating(),
            false => record,
        });
    }
}

/// An event's fields as JSON values, its message apart.
#[derive(Default)]
struct Fields {
    message: String,
    record: Option<String>,
    values: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                if let Value::String(s) = value {
                    self.message = s;
                }
            }
            "record" => {
                if let Value::String(s) = value {
                    self.record = Some(s);
                }
            }
            name => {
                self.values.insert(name.to_string(), value);
            }
        }
    }
}

fn capped(text: &str) -> String {
    crate::contract::text::truncate_with_marker(text, MAX_FIELD_BYTES, "…(truncated)").into_owned()
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(capped(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::String(capped(&format!("{value:?}"))));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[tokio::test]
    async fn plugin_lines_audits_and_typed_events_become_records_others_do_not() {
        let hub = StreamHub::new(64);
        let mut sub = hub.subscribe();
        let subscriber = tracing_subscriber::registry().with(StreamLayer::new(hub.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "kubeplug::plugin", plugin = "p", key = "demo/web", "Replicas changed: 1 -> 3");
            tracing::warn!(target: "kubeplug::policy::audit", plugin = "p", key = "demo/web", decision = "denied", grant = "namespaces", "action denied: no");
            tracing::info!(
                record = "reload",
                plugin = "p",
                version = "1.0.0",
                "plugin started"
            );
            tracing::info!(plugin = "p", "an ordinary host line");
            tracing::info!(
                record = "event",
                plugin = "p",
                key = "demo/web",
                "Replicas changed: 1 -> 3"
            );
            tracing::info!(
                record = "event",
                plugin = "p",
                key = "demo/api",
                "Replicas changed: 1 -> 3"
            );
        });
        let mut got = Vec::new();
        let mut verbose = Vec::new();
        for _ in 0..5 {
            let r = sub.next().await.unwrap();
            verbose.push(r.verbose);
            got.push(serde_json::from_str::<Value>(&r.json).unwrap());
        }
        // The Event repeating the log line of the same key is verbose; another key's is not.
        assert_eq!(verbose, [false, false, false, true, false]);
        assert_eq!(got[3]["type"], "event");
        assert_eq!(got[0]["type"], "log");
        assert_eq!(got[0]["message"], "Replicas changed: 1 -> 3");
        assert_eq!(got[0]["namespace"], "demo");
        assert_eq!(got[1]["type"], "audit");
        assert_eq!(got[1]["level"], "warn");
        assert_eq!(got[1]["grant"], "namespaces");
        assert_eq!(got[2]["type"], "reload");
        assert_eq!(got[2]["version"], "1.0.0");
        assert!(sub.replay.is_empty());
        hub.publish(Record::lagged(0));
        assert_eq!(sub.next().await.unwrap().kind, RecordType::Lagged);
    }
}
