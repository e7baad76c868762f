//! What a real API server does to an object's content before it stores it, for the kinds
//! where kubeplug depends on it:
//! - custom kinds with a CRD `openAPIV3Schema`: pruning of unknown fields, defaulting
//!   (`default`), and validation of the basics (`type`, `nullable`, `required`, `enum`,
//!   `pattern`, `minLength`/`maxLength`, `minimum`/`maximum` with their `exclusive` forms,
//!   `minItems`/`maxItems`, `format: date-time`, `x-kubernetes-int-or-string`), answered as
//!   the real server answers them (422 Invalid, the field path in each message and cause);
//! - ConfigMaps and Secrets: keys, base64 `binaryData`/`data`, Secret `stringData` folded
//!   into `data`, and the 1 MiB limit.
//!
//! Not done (README): CEL rules (`x-kubernetes-validations`), `oneOf`/`anyOf`/`allOf`/`not`,
//! `uniqueItems`, `multipleOf`, `minProperties`/`maxProperties`, formats other than
//! date-time, list-type uniqueness (`x-kubernetes-list-type: set|map`), and the metadata
//! rules a schema may put on `metadata.name`.

use super::errors::ApiError;
use super::kinds::ResourceKind;
use base64::Engine;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The most a ConfigMap or Secret may hold, in bytes (keys and values).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// Brings a body to the form the real server stores: prunes and defaults custom kinds
/// against their schema, folds a Secret's `stringData` into `data`. Errors a decoder would
/// raise (bad base64) are 400s, as the real server's.
pub(super) fn normalize(kind: &ResourceKind, object: &mut Value) -> Result<(), ApiError> {
    match (kind.builtin, kind.group.as_str(), kind.kind.as_str()) {
        (true, "", "Secret") => normalize_secret(object),
        (true, "", "ConfigMap") => check_base64(kind, object, "binaryData"),
        (false, _, _) => {
            if let Some(schema) = &kind.schema {
                prune_and_default(schema, object, true);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Checks what the real server's validation checks for these kinds (422 Invalid).
pub(super) fn validate(kind: &ResourceKind, object: &Value) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    match (kind.builtin, kind.group.as_str(), kind.kind.as_str()) {
        (true, "", "ConfigMap") => data_errors(
            object,
            &[("data", false), ("binaryData", true)],
            "[]",
            &mut errors,
        ),
        (true, "", "Secret") => data_errors(object, &[("data", true)], "data", &mut errors),
        (false, _, _) => {
            if let Some(schema) = &kind.schema {
                check(schema, object, "", &mut errors);
            }
        }
        _ => {}
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(invalid(kind, object, errors))
}

/// One validation error: the field path, its cause type and the message after the path.
struct FieldError {
    field: String,
    reason: &'static str,
    message: String,
}

fn invalid(kind: &ResourceKind, object: &Value, errors: Vec<FieldError>) -> ApiError {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let qualified = if kind.group.is_empty() {
        kind.kind.clone()
    } else {
        format!("{}.{}", kind.kind, kind.group)
    };
    let shown: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect();
    let list = match shown.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
        .collect();
    ApiError::invalid(format!("{qualified} \"{name}\" is invalid: {list}")).with_details(
        json!({"name": name, "group": kind.group, "kind": kind.kind, "causes": causes}),
    )
}

fn normalize_secret(object: &mut Value) -> Result<(), ApiError> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    if let Some(string_data) = map.remove("stringData") {
        let Value::Object(string_data) = string_data else {
            return Err(decode_error(
                "Secret",
                "stringData must be a map of strings",
            ));
        };
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        for (key, value) in string_data {
            let Value::String(text) = value else {
                return Err(decode_error(
                    "Secret",
                    "stringData must be a map of strings",
                ));
            };
            data[key.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    map.entry("type").or_insert_with(|| json!("Opaque"));
    check_base64_in(map, "Secret", "data")
}

fn check_base64(kind: &ResourceKind, object: &Value, field: &str) -> Result<(), ApiError> {
    match object.as_object() {
        Some(map) => check_base64_in(map, &kind.kind, field),
        None => Ok(()),
    }
}

fn check_base64_in(map: &Map<String, Value>, kind: &str, field: &str) -> Result<(), ApiError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(entries)) => {
            for value in entries.values() {
                let Value::String(text) = value else {
                    return Err(decode_error(
                        kind,
                        &format!("{field} must be a map of strings"),
                    ));
                };
                if let Err(e) = base64::engine::general_purpose::STANDARD.decode(text) {
                    return Err(decode_error(kind, &format!("illegal base64 data: {e}")));
                }
            }
            Ok(())
        }
        Some(_) => Err(decode_error(kind, &format!("{field} must be a map"))),
    }
}

fn decode_error(kind: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
    ))
}

/// Keys and total size of a ConfigMap's or Secret's maps (`fields`: each map, and whether
/// its values are base64); `size_field` names the size error's field, as the real server.
fn data_errors(
    object: &Value,
    fields: &[(&'static str, bool)],
    size_field: &str,
    errors: &mut Vec<FieldError>,
) {
    let mut total = 0usize;
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for &(field, binary) in fields {
        let Some(entries) = object[field].as_object() else {
            continue;
        };
        for (key, value) in entries {
            let path = format!("{field}[{key}]");
            if key.is_empty()
                || key.len() > 253
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                || key == "."
                || key == ".."
                || key.starts_with("..")
            {
                errors.push(FieldError {
                    field: path.clone(),
                    reason: "FieldValueInvalid",
                    message: format!(
                        "Invalid value: {key:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
                    ),
                });
            }
            if let Some(other) = seen.insert(key, field) {
                errors.push(FieldError {
                    field: path,
                    reason: "FieldValueInvalid",
                    message: format!("Invalid value: {key:?}: duplicate of key present in {other}"),
                });
            }
            let text = value.as_str().unwrap_or_default();
            let size = if binary {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_or(text.len(), |b| b.len())
            } else {
                text.len()
            };
            total += key.len() + size;
        }
    }
    if total > MAX_DATA_BYTES {
        errors.push(FieldError {
            field: size_field.into(),
            reason: "FieldValueTooLong",
            message: format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        });
    }
}

/// The fields of a body (a whole object, or a merge or apply patch of one) that a custom
/// kind's schema does not declare, as the real server's strict decoding names them
/// (`spec.modul`): what `fieldValidation=Strict` refuses and `Warn` reports.
pub(super) fn unknown_fields(kind: &ResourceKind, body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let (false, Some(schema)) = (kind.builtin, &kind.schema) {
        collect_unknown(schema, body, "", &mut out);
    }
    out
}

fn collect_unknown(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match properties.and_then(|p| p.get(k)).or(additional) {
                    Some(sub) => collect_unknown(sub, v, &child(path, k), out),
                    None if !preserves(schema) => out.push(child(path, k)),
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    collect_unknown(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Removes fields the schema does not know (unless it preserves unknown fields), drops
/// `null`s of non-nullable fields, and fills in `default`s of absent properties. `root`: the
/// object itself, whose `apiVersion`, `kind` and `metadata` are never pruned.
fn prune_and_default(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = preserves(schema);
            let keep = |k: &str| {
                (root && matches!(k, "apiVersion" | "kind" | "metadata"))
                    || preserve
                    || additional.is_some()
                    || properties.is_some_and(|p| p.contains_key(k))
            };
            map.retain(|k, v| {
                let nullable = properties
                    .and_then(|p| p.get(k))
                    .or(additional)
                    .is_some_and(|s| s.get("nullable") == Some(&Value::Bool(true)));
                keep(k) && (!v.is_null() || nullable || (preserve && properties.is_none()))
            });
            if let Some(properties) = properties {
                for (k, s) in properties {
                    if !map.contains_key(k)
                        && let Some(default) = s.get("default")
                    {
                        map.insert(k.clone(), default.clone());
                    }
                }
            }
            for (k, v) in map.iter_mut() {
                if root && k == "metadata" {
                    continue;
                }
                let sub = properties.and_then(|p| p.get(k)).or(additional);
                if let Some(sub) = sub {
                    prune_and_default(sub, v, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    prune_and_default(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

fn preserves(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The shown form of a value in a message: strings quoted, numbers and the rest as JSON.
fn shown(value: &Value) -> String {
    value.to_string()
}

fn regex(pattern: &str) -> Option<regex::Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .clone()
}

/// Validates `value` at `path` (`""` for the object itself) against `schema`.
fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let mut error = |reason: &'static str, message: String| {
        errors.push(FieldError {
            field: at.to_string(),
            reason,
            message,
        })
    };
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) && schema.get("type").is_some() {
            let expected = schema["type"].as_str().unwrap_or_default();
            error(
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: \"null\": {at} in body must be of type {expected}: \"null\""
                ),
            );
        }
        return;
    }
    let actual = type_name(value);
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !matches!(actual, "integer" | "string") {
            error(
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: {}: {at} in body must be of type integer,string: {actual:?}",
                    shown(value)
                ),
            );
            return;
        }
    } else if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let ok = actual == expected || (expected == "number" && actual == "integer");
        if !ok {
            error(
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: {actual:?}: {at} in body must be of type {expected}: {actual:?}"
                ),
            );
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        error(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
        );
    }
    match value {
        Value::String(s) => {
            let chars = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                error(
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {max} bytes"),
                );
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                error(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {at} in body should be at least {min} chars long",
                        shown(value)
                    ),
                );
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && regex(pattern).is_some_and(|r| !r.is_match(s))
            {
                error(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {at} in body should match '{pattern}'",
                        shown(value)
                    ),
                );
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time")
                && s.parse::<jiff::Timestamp>().is_err()
            {
                error(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {at} in body must be of type date-time: {}",
                        shown(value),
                        shown(value)
                    ),
                );
            }
        }
        Value::Number(n) => {
            let v = n.as_f64().unwrap_or_default();
            let flag = |f: &str| schema.get(f) == Some(&Value::Bool(true));
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let exclusive = flag("exclusiveMinimum");
                if (exclusive && v <= min) || (!exclusive && v < min) {
                    let relation = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    error(
                        "FieldValueInvalid",
                        format!(
                            "Invalid value: {n}: {at} in body should be {relation} {}",
                            schema["minimum"]
                        ),
                    );
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let exclusive = flag("exclusiveMaximum");
                if (exclusive && v >= max) || (!exclusive && v > max) {
                    let relation = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    error(
                        "FieldValueInvalid",
                        format!(
                            "Invalid value: {n}: {at} in body should be {relation} {}",
                            schema["maximum"]
                        ),
                    );
                }
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                error(
                    "FieldValueTooMany",
                    format!("Too many: {len}: must have at most {max} items"),
                );
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                error(
                    "FieldValueInvalid",
                    format!("Invalid value: {len}: {at} in body should have at least {min} items"),
                );
            }
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for field in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(field) {
                        errors.push(FieldError {
                            field: child(path, field),
                            reason: "FieldValueRequired",
                            message: "Required value".into(),
                        });
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                if path.is_empty() && k == "metadata" {
                    continue;
                }
                if let Some(sub) = properties.and_then(|p| p.get(k)).or(additional) {
                    check(sub, v, &child(path, k), errors);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin_kind() -> ResourceKind {
        let crd: Value =
            serde_saphyr::from_str(include_str!("../../deploy/crds/plugins.yaml")).unwrap();
        super::super::kinds::kinds_from_crd(&crd).unwrap().remove(0)
    }

    fn plugin(spec: Value) -> Value {
        json!({"apiVersion": "kubeplug.dev/v1alpha1", "kind": "Plugin",
            "metadata": {"name": "p", "namespace": "team-a", "labels": {"a": "b"}}, "spec": spec})
    }

    #[test]
    fn prunes_unknown_fields_and_fills_defaults() {
        let kind = plugin_kind();
        let mut p = plugin(
            json!({"module": {"configMap": {"name": "pinner"}, "bogus": 1},
            "config": {"anything": {"goes": [1, 2]}}, "extra": true,
            "permissions": {"limits": {"memoryMib": 64, "nope": 1}}}),
        );
        p["status"] = json!({"rollout": {"free": {"form": 1}}, "unknown": 1});
        normalize(&kind, &mut p).unwrap();
        assert_eq!(
            p["spec"]["module"],
            json!({"configMap": {"name": "pinner", "key": "plugin.wasm"}})
        );
        assert_eq!(p["spec"]["mode"], "enforce", "defaulted");
        assert_eq!(
            p["spec"]["config"],
            json!({"anything": {"goes": [1, 2]}}),
            "preserved"
        );
        assert!(p["spec"].get("extra").is_none(), "pruned: {p}");
        assert_eq!(p["spec"]["permissions"]["limits"], json!({"memoryMib": 64}));
        assert_eq!(p["status"], json!({"rollout": {"free": {"form": 1}}}));
        assert_eq!(
            p["metadata"]["labels"],
            json!({"a": "b"}),
            "metadata is not pruned"
        );
        validate(&kind, &p).unwrap();
    }

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let kind = plugin_kind();
        let p = plugin(
            json!({"modul": 1, "module": {"configMap": {"name": "x", "kee": "y"}},
            "config": {"free": 1}, "permissions": {"rules": [{"kind": "K", "verb": []}]}}),
        );
        assert_eq!(
            unknown_fields(&kind, &p),
            [
                "spec.modul",
                "spec.module.configMap.kee",
                "spec.permissions.rules[0].verb"
            ]
        );
        let builtin = super::super::kinds::Registry::builtin();
        let cm = builtin.by_name("cm").unwrap();
        assert!(unknown_fields(&cm, &json!({"whatever": 1})).is_empty());
    }

    #[test]
    fn refuses_what_the_schema_refuses_naming_the_field() {
        let kind = plugin_kind();
        let cases = [
            (json!({}), "spec.module: Required value"),
            (
                json!({"module": {"configMap": {"name": "x"}}, "mode": "loud"}),
                "spec.mode: Unsupported value: \"loud\": supported values: \"enforce\", \"dry-run\"",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}, "sha256": "abc"}}),
                "spec.module.sha256: Invalid value: \"abc\": spec.module.sha256 in body should match '^[0-9a-fA-F]{64}$'",
            ),
            (
                json!({"module": {"configMap": {"name": 3}}}),
                "spec.module.configMap.name: Invalid value: \"integer\": spec.module.configMap.name in body must be of type string: \"integer\"",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}}, "permissions": {"limits": {"memoryMib": 0}}}),
                "spec.permissions.limits.memoryMib: Invalid value: 0: spec.permissions.limits.memoryMib in body should be greater than or equal to 1",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}}, "permissions": {"limits": {"timeoutMs": 600001}}}),
                "in body should be less than or equal to 600000",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}}, "permissions": {"limits": {"writesPerSecond": 0}}}),
                "spec.permissions.limits.writesPerSecond in body should be greater than 0",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}}, "permissions": {"rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch", "scale"]}]}}),
                "spec.permissions.rules[0].verbs[1]: Unsupported value: \"scale\"",
            ),
            (
                json!({"module": {"configMap": {"name": "x"}}, "rollout": {"shadow": {"duration": "5 minutes"}}}),
                "spec.rollout.shadow.duration: Invalid value",
            ),
            (
                json!({"module": {"configMap": {"name": "x".repeat(254)}}}),
                "spec.module.configMap.name: Too long: may not be more than 253 bytes",
            ),
        ];
        for (spec, expected) in cases {
            let mut p = plugin(spec);
            normalize(&kind, &mut p).unwrap();
            let err = validate(&kind, &p).unwrap_err();
            assert_eq!(err.code, 422);
            assert!(
                err.message
                    .starts_with("Plugin.kubeplug.dev \"p\" is invalid: "),
                "{}",
                err.message
            );
            assert!(
                err.message.contains(expected),
                "{expected}\n{}",
                err.message
            );
            let causes = &err.details.as_ref().unwrap()["causes"];
            assert!(
                causes[0]["field"].as_str().unwrap().starts_with("spec"),
                "{causes}"
            );
        }
        let mut ok = plugin(json!({"module": {"configMap": {"name": "x"},
            "sha256": "a".repeat(64)}, "mode": "dry-run",
            "rollout": {"shadow": {"reconciles": 5, "duration": "1h30m"}, "maxDiffering": 0},
            "permissions": {"limits": {"writesPerSecond": 0.5}}}));
        ok["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        normalize(&kind, &mut ok).unwrap();
        validate(&kind, &ok).unwrap();
        ok["status"]["conditions"][0]["status"] = json!("Yes");
        ok["status"]["conditions"][0]["lastTransitionTime"] = json!("yesterday");
        let err = validate(&kind, &ok).unwrap_err();
        assert!(
            err.message.contains("is invalid: [status.conditions[0]."),
            "{}",
            err.message
        );
        assert!(
            err.message
                .contains("status.conditions[0].status: Unsupported value"),
            "{}",
            err.message
        );
        assert!(
            err.message
                .contains("status.conditions[0].lastTransitionTime: Invalid value"),
            "{}",
            err.message
        );
    }

    #[test]
    fn config_maps_and_secrets() {
        let registry = super::super::kinds::Registry::builtin();
        let cm = registry.by_name("cm").unwrap();
        let mut ok = json!({"metadata": {"name": "c"}, "data": {"a.txt": "x"},
            "binaryData": {"b.bin": base64::engine::general_purpose::STANDARD.encode([0u8, 255])}});
        normalize(&cm, &mut ok).unwrap();
        validate(&cm, &ok).unwrap();
        let big = "x".repeat(MAX_DATA_BYTES);
        let err =
            validate(&cm, &json!({"metadata": {"name": "c"}, "data": {"a": big}})).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "ConfigMap \"c\" is invalid: []: Too long: must have at most 1048576 bytes"
        );
        let err = validate(
            &cm,
            &json!({"metadata": {"name": "c"},
            "data": {"k": "1"}, "binaryData": {"k": "AA=="}}),
        )
        .unwrap_err();
        assert!(
            err.message
                .contains("binaryData[k]: Invalid value: \"k\": duplicate of key present in data"),
            "{}",
            err.message
        );
        let err = validate(
            &cm,
            &json!({"metadata": {"name": "c"}, "data": {"a b": "1"}}),
        )
        .unwrap_err();
        assert!(
            err.message.contains("a valid config key"),
            "{}",
            err.message
        );
        let mut bad = json!({"metadata": {"name": "c"}, "binaryData": {"k": "not base64!"}});
        assert_eq!(normalize(&cm, &mut bad).unwrap_err().code, 400);

        let secret = registry.by_name("secrets").unwrap();
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"},
            "data": {"user": "YWRtaW4="}});
        normalize(&secret, &mut s).unwrap();
        assert_eq!(
            s["data"],
            json!({"user": "YWRtaW4=", "password": "aHVudGVyMg=="})
        );
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
        validate(&secret, &s).unwrap();
    }
}
