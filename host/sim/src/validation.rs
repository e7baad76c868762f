//! Structural validation, type checks and defaults applied to every stored object, standing
//! in for the real server's per-kind validation and defaulting (much smaller: see README).

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::objects::meta_str;
use serde_json::{Map, Value, json};

/// Checks `apiVersion`/`kind` of a body and fills them in when absent.
pub(super) fn check_type(kind: &ResourceKind, body: &mut Value) -> Result<(), ApiError> {
    let Some(map) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    let api_version = kind.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        _ => {}
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(k) if k != kind.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
        _ => {}
    }
    map.insert("apiVersion".into(), Value::String(api_version));
    map.insert("kind".into(), Value::String(kind.kind.clone()));
    if !map.get("metadata").is_some_and(Value::is_object) {
        map.insert("metadata".into(), Value::Object(Map::new()));
    }
    Ok(())
}

/// The structural checks a real server's validation would fail: metadata field types,
/// object-valued `spec`/`status` for built-in kinds, non-negative Deployment replicas.
pub(super) fn validate(kind: &ResourceKind, object: &Value) -> Result<(), ApiError> {
    let name = meta_str(object, "name").unwrap_or_default();
    let invalid = |field: &str, why: &str| {
        ApiError::invalid(format!(
            "{}.{} \"{name}\" is invalid: {field}: Invalid value: {why}",
            kind.kind,
            if kind.group.is_empty() {
                "core"
            } else {
                &kind.group
            }
        ))
    };
    let meta = &object["metadata"];
    for field in ["labels", "annotations"] {
        match &meta[field] {
            Value::Null => {}
            Value::Object(m) if m.values().all(Value::is_string) => {}
            _ => {
                return Err(invalid(
                    &format!("metadata.{field}"),
                    "must be a map of strings",
                ));
            }
        }
    }
    match &meta["finalizers"] {
        Value::Null => {}
        Value::Array(a) if a.iter().all(Value::is_string) => {}
        _ => return Err(invalid("metadata.finalizers", "must be a list of strings")),
    }
    match &meta["ownerReferences"] {
        Value::Null => {}
        Value::Array(refs)
            if refs.iter().all(|r| {
                ["apiVersion", "kind", "name", "uid"]
                    .iter()
                    .all(|f| r[*f].is_string())
            }) => {}
        _ => {
            return Err(invalid(
                "metadata.ownerReferences",
                "each needs apiVersion, kind, name and uid strings",
            ));
        }
    }
    if kind.builtin {
        for field in ["spec", "status"] {
            if !matches!(object.get(field), None | Some(Value::Object(_))) {
                return Err(invalid(field, "must be an object"));
            }
        }
    }
    if kind.builtin && kind.kind == "Deployment" {
        match &object["spec"]["replicas"] {
            Value::Null => {}
            v if v
                .as_i64()
                .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r)) => {}
            _ => return Err(invalid("spec.replicas", "must be a non-negative integer")),
        }
    }
    super::schema::validate(kind, object)
}

pub(super) fn set_defaults(kind: &ResourceKind, object: &mut Value) {
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("apps", "Deployment") => {
            let spec = object
                .as_object_mut()
                .and_then(|m| m.entry("spec").or_insert_with(|| json!({})).as_object_mut());
            if let Some(spec) = spec {
                spec.entry("replicas").or_insert(json!(1));
                spec.entry("revisionHistoryLimit").or_insert(json!(10));
                spec.entry("progressDeadlineSeconds").or_insert(json!(600));
                spec.entry("strategy")
                    .or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}));
            }
        }
        ("", "Namespace") => {
            object["status"] = json!({"phase": "Active"});
        }
        ("", "Pod") if object.get("status").is_none() => {
            object["status"] = json!({"phase": "Pending"});
        }
        _ => {}
    }
}

/// RFC 1123 subdomain check of object names, the host's own rule.
pub(super) fn valid_name(name: &str) -> bool {
    kubeplug_vocab::names::is_dns_subdomain(name)
}
