//! One store for Events, two served forms: like a real API server, `events.k8s.io/v1` Events
//! are the core `v1` Events under other field names. They are stored in the core form and
//! converted on the way in and out, so `kubectl get events` and `kubectl describe` see the
//! Events a controller sent through either API.

use serde_json::{Map, Value};

/// Field renames between the two forms: (`events.k8s.io/v1` name, core `v1` name). Every other
/// field (`metadata`, `reason`, `type`, `action`, `eventTime`, `series`, `related`,
/// `reportingInstance`) has the same name in both.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The `apiVersion` of the stored (core) form.
const CORE_API_VERSION: &str = "v1";

/// The `apiVersion` of the other served form.
const EVENTS_API_VERSION: &str = "events.k8s.io/v1";

fn renamed(
    object: &Value,
    api_version: &str,
    rename: impl Fn(&str) -> Option<&'static str>,
) -> Value {
    let Some(fields) = object.as_object() else {
        return object.clone();
    };
    let mut out = Map::with_capacity(fields.len());
    for (name, value) in fields {
        let name = rename(name).map_or_else(|| name.clone(), str::to_string);
        out.insert(name, value.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event in the stored core form.
pub fn to_core(event: &Value) -> Value {
    renamed(event, CORE_API_VERSION, |name| {
        RENAMES
            .iter()
            .find(|(v1, _)| *v1 == name)
            .map(|(_, core)| *core)
    })
}

/// A stored core Event in the `events.k8s.io/v1` form.
pub fn from_core(event: &Value) -> Value {
    renamed(event, EVENTS_API_VERSION, |name| {
        RENAMES
            .iter()
            .find(|(_, core)| *core == name)
            .map(|(v1, _)| *v1)
    })
}

/// A field selector's field named in the `events.k8s.io/v1` form, in the stored form
/// (`regarding.name` → `involvedObject.name`).
pub fn core_field(field: &str) -> String {
    let (head, rest) = field
        .split_once('.')
        .map_or((field, None), |(h, r)| (h, Some(r)));
    let head = RENAMES
        .iter()
        .find(|(v1, _)| *v1 == head)
        .map_or(head, |(_, core)| core);
    match rest {
        Some(rest) => format!("{head}.{rest}"),
        None => head.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_two_forms_convert_both_ways() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "team-a"},
            "regarding": {"kind": "Deployment", "name": "web"},
            "note": "Replicas changed", "reason": "Scaled", "type": "Normal",
            "reportingController": "kubeplug", "reportingInstance": "kubeplug-0",
            "eventTime": "2026-01-01T00:00:00.000000Z", "deprecatedCount": 2
        });
        let core = to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "Replicas changed");
        assert_eq!(core["reportingComponent"], "kubeplug");
        assert_eq!(core["count"], 2);
        assert_eq!(core["reason"], "Scaled");
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        assert_eq!(from_core(&core), v1);
    }

    #[test]
    fn selector_fields_map_to_the_stored_form() {
        assert_eq!(core_field("regarding.name"), "involvedObject.name");
        assert_eq!(core_field("reportingController"), "reportingComponent");
        assert_eq!(core_field("involvedObject.kind"), "involvedObject.kind");
        assert_eq!(core_field("metadata.name"), "metadata.name");
    }
}
