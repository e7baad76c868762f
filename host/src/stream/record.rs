//! One stream record: a compact JSON object whose first two keys are `timestamp` (RFC 3339,
//! UTC) and a human-readable `message`, so a viewer printing raw frames shows something
//! sensible at the start of each line, then `type` and `level`, then the structured fields a
//! filter or a dashboard needs (in name order). Its `[timestamp] message` text line, for
//! terminals (`format=text`), is rendered once too.

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
    /// The object name of its key, if it has a key.
    pub name: Option<String>,
    /// Detail that repeats what another record says (a per-reconcile success line, the
    /// audit of a log or event action carried out, an Event mirroring a log line): sent only
    /// to clients that ask for its type or for `level=debug`.
    pub verbose: bool,
    /// The compact JSON object sent to clients.
    pub json: String,
    /// The `[timestamp] message` line sent to clients asking for `format=text`.
    pub text: String,
}

/// Actions whose audit record, when they were simply carried out, repeats the record of
/// the action itself (the log line, the Event) or says nothing a viewer needs.
const QUIET_ACTIONS: &[&str] = &["log", "event", "requeue-after"];

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
        let key = fields.get("key").and_then(Value::as_str);
        let (namespace, name) = match key.map(|k| k.split_once('/')) {
            Some(Some((ns, name))) => (Some(ns.to_string()), Some(name.to_string())),
            Some(None) => (None, key.map(str::to_string)),
            None => (None, None),
        };
        if let Some(ns) = &namespace {
            fields.insert("namespace".into(), Value::String(ns.clone()));
        }
        let field = |name: &str| fields.get(name).and_then(Value::as_str);
        let verbose = match kind {
            RecordType::Reconcile => field("result") == Some("success"),
            RecordType::Audit => {
                field("action").is_some_and(|a| QUIET_ACTIONS.contains(&a))
                    && matches!(field("decision"), Some("executed" | "already-done"))
            }
            _ => false,
        };
        let timestamp = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        // timestamp, message, type and level first, in that order; then the rest by name.
        for first in ["timestamp", "message", "type", "level"] {
            fields.remove(first);
        }
        let mut json = String::with_capacity(128 + message.len());
        json.push('{');
        let mut put = |name: &str, value: &Value| {
            if json.len() > 1 {
                json.push(',');
            }
            json.push_str(&Value::String(name.to_string()).to_string());
            json.push(':');
            json.push_str(&value.to_string());
        };
        put("timestamp", &Value::String(timestamp.clone()));
        put("message", &Value::String(message.to_string()));
        put("type", &Value::String(kind.as_str().into()));
        put("level", &Value::String(level.as_str().into()));
        for (name, value) in &fields {
            put(name, value);
        }
        json.push('}');
        let text = format!("[{timestamp}] {}", terminal_safe(message));
        Record {
            kind,
            level,
            plugin,
            namespace,
            name,
            verbose,
            json,
            text,
        }
    }

    /// This record, marked verbose: it repeats another.
    pub fn repeating(mut self) -> Record {
        self.verbose = true;
        self
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

/// `text` with control characters (escape sequences a terminal would act on, line breaks
/// that would forge lines) replaced by `?`.
fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    match text.contains(char::is_control) {
        false => std::borrow::Cow::Borrowed(text),
        true => text
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect::<String>()
            .into(),
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
        assert!(
            record.json.starts_with(r#"{"timestamp":""#),
            "{}",
            record.json
        );
        let message_at = record.json.find(r#","message":"#).unwrap();
        assert!(message_at < record.json.find(r#""key""#).unwrap());
        assert!(message_at < 40, "{}", record.json);
        assert_eq!(record.name.as_deref(), Some("web"));
        assert_eq!(
            record.text,
            format!(
                "[{}] Replicas changed: 1 -> 3",
                v["timestamp"].as_str().unwrap()
            )
        );
        let hostile = Record::new(
            RecordType::Log,
            Level::Info,
            "a\u{1b}[2Jb\nforged",
            Map::new(),
        );
        assert!(
            hostile.text.ends_with("] a?[2Jb?forged"),
            "{}",
            hostile.text
        );
        assert!(!hostile.json.contains('\u{1b}'));
        let lagged: Value = serde_json::from_str(&Record::lagged(7).json).unwrap();
        assert_eq!(lagged["type"], "lagged");
        assert_eq!(lagged["message"], "dropped 7 records");
    }
}
