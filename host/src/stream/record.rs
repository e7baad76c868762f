//! One stream record: a compact JSON object with `timestamp` (RFC 3339, UTC) and a
//! human-readable `message`, so a viewer printing raw frames shows something sensible, plus
//! the structured fields a filter or a dashboard needs.

use serde_json::{Map, Value};

/// What a record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordType {
    /// A plugin's log line (its `log` action, `log` import, stdout or stderr).
    Log,
    /// A Kubernetes Event a plugin emitted.
    Event,
    /// One decision on one action (executed, denied, dry-run, failed, ...).
    Audit,
    /// A plugin started, updated, restarted, stopped, or a file failed to load.
    Reload,
    /// A reconcile's outcome: an error, the object gone, or (on request) success.
    Reconcile,
    /// Records this client missed because it read too slowly.
    Lagged,
}

impl RecordType {
    /// The name in the `type` field and the `type=` filter.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::Log => "log",
            RecordType::Event => "event",
            RecordType::Audit => "audit",
            RecordType::Reload => "reload",
            RecordType::Reconcile => "reconcile",
            RecordType::Lagged => "lagged",
        }
    }

    /// The type named `name`, if any.
    pub fn parse(name: &str) -> Option<RecordType> {
        [
            RecordType::Log,
            RecordType::Event,
            RecordType::Audit,
            RecordType::Reload,
            RecordType::Reconcile,
            RecordType::Lagged,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }
}

/// Severity, ordered for the minimum-level filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Detail (per-reconcile success lines are debug).
    Debug,
    /// Normal operation.
    Info,
    /// Something a person should look at: denials, retries.
    Warn,
    /// Failures.
    Error,
}

impl Level {
    /// The name in the `level` field and the `level=` filter.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// The level named `name` (`warning` and `trace` accepted too).
    pub fn parse(name: &str) -> Option<Level> {
        match name.to_ascii_lowercase().as_str() {
            "trace" | "debug" => Some(Level::Debug),
            "info" => Some(Level::Info),
            "warn" | "warning" => Some(Level::Warn),
            "error" => Some(Level::Error),
            _ => None,
        }
    }
}

/// One record, with its JSON text rendered once for every client.
#[derive(Debug, Clone)]
pub struct Record {
    /// What it reports.
    pub kind: RecordType,
    /// Its severity.
    pub level: Level,
    /// The plugin instance it concerns, if any.
    pub plugin: Option<String>,
    /// The namespace of its key, if the key has one.
    pub namespace: Option<String>,
    /// A per-reconcile success line: sent only to clients that ask for `type=reconcile`.
    pub verbose: bool,
    /// The compact JSON object sent to clients.
    pub json: String,
}

impl Record {
    /// Builds a record from its message and fields (`plugin`, `key` and the rest), stamped now.
    pub fn new(
        kind: RecordType,
        level: Level,
        message: &str,
        mut fields: Map<String, Value>,
    ) -> Record {
        let plugin = fields
            .get("plugin")
            .and_then(Value::as_str)
            .map(str::to_string);
        let namespace = fields
            .get("key")
            .and_then(Value::as_str)
            .and_then(|k| k.split_once('/'))
            .map(|(ns, _)| ns.to_string());
        if let Some(ns) = &namespace {
            fields.insert("namespace".into(), Value::String(ns.clone()));
        }
        let verbose = kind == RecordType::Reconcile
            && fields.get("result").and_then(Value::as_str) == Some("success");
        let timestamp = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        fields.insert("timestamp".into(), Value::String(timestamp));
        fields.insert("message".into(), Value::String(message.to_string()));
        fields.insert("type".into(), Value::String(kind.as_str().into()));
        fields.insert("level".into(), Value::String(level.as_str().into()));
        Record {
            kind,
            level,
            plugin,
            namespace,
            verbose,
            json: Value::Object(fields).to_string(),
        }
    }

    /// The frame a client that fell behind gets instead of the `dropped` records it missed.
    pub fn lagged(dropped: u64) -> Record {
        let mut fields = Map::new();
        fields.insert("dropped".into(), Value::from(dropped));
        Record::new(
            RecordType::Lagged,
            Level::Warn,
            &format!("dropped {dropped} records"),
            fields,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_record_is_one_json_object_with_timestamp_message_and_fields() {
        let Value::Object(fields) = json!({"plugin": "change-logger", "key": "demo/web"}) else {
            unreachable!()
        };
        let record = Record::new(
            RecordType::Log,
            Level::Info,
            "Replicas changed: 1 -> 3",
            fields,
        );
        let v: Value = serde_json::from_str(&record.json).unwrap();
        assert_eq!(v["message"], "Replicas changed: 1 -> 3");
        assert_eq!(v["type"], "log");
        assert_eq!(v["level"], "info");
        assert_eq!(v["namespace"], "demo");
        assert!(
            v["timestamp"]
                .as_str()
                .unwrap()
                .parse::<jiff::Timestamp>()
                .is_ok()
        );
        assert_eq!(record.plugin.as_deref(), Some("change-logger"));
        assert!(!record.json.contains('\n'));
        let lagged: Value = serde_json::from_str(&Record::lagged(7).json).unwrap();
        assert_eq!(lagged["type"], "lagged");
        assert_eq!(lagged["message"], "dropped 7 records");
    }
}
