//! Strategic merge patch (`application/strategic-merge-patch+json`), written here because no
//! maintained Rust crate implements it. It follows the semantics of
//! `k8s.io/apimachinery/pkg/util/strategicpatch` for the list keys in [`super::keys`]:
//! maps merge recursively, `null` deletes, keyed lists merge item by item, scalar-set lists
//! (`finalizers`) union, other lists are replaced; directives `$patch: replace|delete|merge`,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>` are applied and `$setElementOrder/<field>`
//! is accepted and ignored (item order is: existing items, then new ones).

use super::keys::{ListKind, list_kind_for};
use serde_json::{Map, Value};

/// Errors a strategic merge patch can raise (mapped to 400/422 by the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicError {
    /// The patch is not a JSON object.
    #[error("strategic merge patch must be a JSON object")]
    NotAnObject,
    /// An unknown `$patch` value.
    #[error("unknown patch type {0:?} in $patch directive")]
    UnknownDirective(String),
    /// A keyed list item lacks its merge key.
    #[error("map in list {field} does not contain the merge key {key:?}")]
    MissingMergeKey {
        /// The list's field.
        field: String,
        /// The merge key it lacks.
        key: String,
    },
    /// A directive's argument has the wrong shape.
    #[error("invalid {0} directive")]
    BadDirective(String),
}

/// Applies `patch` to `original` for a built-in (`builtin = true`) or custom kind.
pub fn merge(original: &Value, patch: &Value, builtin: bool) -> Result<Value, StrategicError> {
    let Value::Object(p) = patch else {
        return Err(StrategicError::NotAnObject);
    };
    let base = original.as_object().cloned().unwrap_or_default();
    match merge_map(base, p, builtin, true)? {
        Some(m) => Ok(Value::Object(m)),
        None => Ok(Value::Object(Map::new())),
    }
}

/// Merges a map; `None` means the map itself was deleted by `$patch: delete`.
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    builtin: bool,
    top: bool,
) -> Result<Option<Map<String, Value>>, StrategicError> {
    match patch.get("$patch") {
        None => {}
        Some(Value::String(d)) if d == "merge" => {}
        Some(Value::String(d)) if d == "replace" => {
            let mut replaced = Map::new();
            for (k, v) in patch {
                if k != "$patch" {
                    replaced.insert(k.clone(), strip_directives(v));
                }
            }
            return Ok(Some(replaced));
        }
        Some(Value::String(d)) if d == "delete" => return Ok(None),
        Some(other) => return Err(StrategicError::UnknownDirective(other.to_string())),
    }
    let retain = match patch.get("$retainKeys") {
        None => None,
        Some(Value::Array(keys)) => Some(
            keys.iter()
                .map(|k| {
                    k.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| StrategicError::BadDirective("$retainKeys".into()))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(StrategicError::BadDirective("$retainKeys".into())),
    };
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = value else {
                return Err(StrategicError::BadDirective(key.clone()));
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let in_metadata = top && key == "metadata";
        let merged = match (original.remove(key), value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                merge_map(o, p, builtin, false)?.map(Value::Object)
            }
            (None, Value::Object(p)) => {
                merge_map(Map::new(), p, builtin, false)?.map(Value::Object)
            }
            (old, Value::Array(p)) => {
                let kind =
                    list_kind_for(builtin, in_metadata || (!top && is_metadata_list(key)), key);
                Some(merge_list(key, old, p, kind, builtin)?)
            }
            (_, scalar) => Some(scalar.clone()),
        };
        if let Some(v) = merged {
            original.insert(key.clone(), v);
        }
    }
    if let Some(keep) = retain {
        original.retain(|k, _| keep.iter().any(|r| r == k));
    }
    Ok(Some(original))
}

fn is_metadata_list(key: &str) -> bool {
    key == "finalizers" || key == "ownerReferences"
}

fn merge_list(
    field: &str,
    original: Option<Value>,
    patch: &[Value],
    kind: ListKind,
    builtin: bool,
) -> Result<Value, StrategicError> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let items = patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return Ok(Value::Array(items));
    }
    let mut items = match original {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    match kind {
        ListKind::Atomic => Ok(Value::Array(patch.iter().map(strip_directives).collect())),
        ListKind::Set => {
            for item in patch {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
            Ok(Value::Array(items))
        }
        ListKind::Keyed(merge_key) => {
            for item in patch {
                let Value::Object(p) = item else {
                    return Err(StrategicError::MissingMergeKey {
                        field: field.into(),
                        key: merge_key.into(),
                    });
                };
                let key_value =
                    p.get(merge_key)
                        .ok_or_else(|| StrategicError::MissingMergeKey {
                            field: field.into(),
                            key: merge_key.into(),
                        })?;
                let position = items
                    .iter()
                    .position(|i| i.get(merge_key) == Some(key_value));
                match position {
                    Some(idx) => {
                        let existing = match items.remove(idx) {
                            Value::Object(o) => o,
                            _ => Map::new(),
                        };
                        if let Some(m) = merge_map(existing, p, builtin, false)? {
                            items.insert(idx, Value::Object(m));
                        }
                    }
                    None => {
                        if let Some(m) = merge_map(Map::new(), p, builtin, false)? {
                            items.push(Value::Object(m));
                        }
                    }
                }
            }
            Ok(Value::Array(items))
        }
    }
}

/// Removes directive keys from a value that is inserted as-is.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 80}]},
                {"name": "sidecar", "image": "side:1"}],
            "tolerations": [{"key": "a"}]}}},
          "metadata": {"finalizers": ["x"], "labels": {"a": "1"}}})
    }

    #[test]
    fn containers_merge_by_name() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}, {"name": "new", "image": "n"}]}}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 3);
        assert_eq!(c[0]["image"], "app:2");
        assert_eq!(c[0]["env"][1]["value"], "2");
        assert_eq!(c[1]["name"], "sidecar");
        assert_eq!(c[2]["name"], "new");
    }

    #[test]
    fn env_by_name_and_ports_by_container_port() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
            "env": [{"name": "B", "value": "3"}], "ports": [{"containerPort": 443}]}]}}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        let c = &out["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}])
        );
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80}, {"containerPort": 443}])
        );
    }

    #[test]
    fn delete_directive_on_container() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        let c = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["name"], "app");
    }

    #[test]
    fn replace_directives() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "o"}])
        );
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "b": "2"}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
    }

    #[test]
    fn tolerations_are_atomic_and_null_deletes() {
        let patch = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "b"}]}}}, "metadata": {"labels": {"a": null}}});
        let out = merge(&deployment(), &patch, true).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "b"}])
        );
        assert_eq!(out["metadata"]["labels"], json!({}));
    }

    #[test]
    fn primitive_list_directives() {
        let patch = json!({"metadata": {"finalizers": ["y"]}});
        let out = merge(&deployment(), &patch, true).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y"]));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "$setElementOrder/finalizers": []}});
        let out = merge(&deployment(), &patch, true).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn retain_keys() {
        let original = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = merge(&original, &patch, true).unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn errors() {
        assert_eq!(
            merge(&deployment(), &json!([1]), true),
            Err(StrategicError::NotAnObject)
        );
        assert!(matches!(
            merge(&deployment(), &json!({"spec": {"$patch": "explode"}}), true),
            Err(StrategicError::UnknownDirective(_))
        ));
        assert!(matches!(
            merge(
                &deployment(),
                &json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
                true
            ),
            Err(StrategicError::MissingMergeKey { .. })
        ));
    }

    #[test]
    fn custom_kinds_replace_lists() {
        let original = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let out = merge(
            &original,
            &json!({"spec": {"containers": [{"name": "c"}]}}),
            false,
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "c"}]));
    }
}
