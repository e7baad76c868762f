//! Field ownership for server-side apply, written here because no Rust crate implements
//! Kubernetes' structured-merge-diff. A field set is a set of paths in the `FieldsV1` element
//! syntax (`f:spec`, `k:{"name":"app"}`, `v:"finalizer"`); ownership is tracked at leaf
//! granularity: scalars, atomic lists and empty maps are leaves, keyed-list items are owned
//! themselves (`.`) and through their fields, scalar sets by value.

use super::keys::{ListKind, list_kind_for};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A path of `FieldsV1` elements.
pub type FieldPath = Vec<String>;
/// A set of owned paths.
pub type FieldSet = BTreeSet<FieldPath>;

/// Which part of an object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Everything except `status` (main resource of a kind with a status subresource).
    Main,
    /// Only `status` (the status subresource).
    Status,
    /// Everything (kinds without a status subresource).
    All,
}

const METADATA_FIELDS: [&str; 4] = ["labels", "annotations", "ownerReferences", "finalizers"];

/// The owned paths `object` sets, for the given part of a built-in or custom kind.
pub fn field_set(object: &Value, builtin: bool, part: Part) -> FieldSet {
    let mut set = FieldSet::new();
    let Some(map) = object.as_object() else {
        return set;
    };
    for (key, value) in map {
        let path = vec![format!("f:{key}")];
        match (key.as_str(), part) {
            ("apiVersion" | "kind", _) => {}
            ("status", Part::Main) => {}
            ("status", Part::Status) => collect(value, path, &mut set, builtin, false),
            (_, Part::Status) => {}
            ("metadata", _) => {
                if let Some(meta) = value.as_object() {
                    for field in METADATA_FIELDS {
                        if let Some(v) = meta.get(field) {
                            collect(
                                v,
                                vec![path[0].clone(), format!("f:{field}")],
                                &mut set,
                                builtin,
                                true,
                            );
                        }
                    }
                }
            }
            _ => collect(value, path, &mut set, builtin, false),
        }
    }
    set
}

fn collect(value: &Value, path: FieldPath, set: &mut FieldSet, builtin: bool, in_meta: bool) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let mut p = path.clone();
                p.push(format!("f:{k}"));
                collect(v, p, set, builtin, in_meta);
            }
        }
        Value::Array(items) => {
            let field = path.last().and_then(|l| l.strip_prefix("f:")).unwrap_or("");
            match list_kind_for(builtin, in_meta, field) {
                ListKind::Keyed(key) if items.iter().all(|i| i.get(key).is_some()) => {
                    for item in items {
                        let mut p = path.clone();
                        p.push(item_key(key, item));
                        set.insert(p.clone());
                        collect(item, p, set, builtin, in_meta);
                    }
                }
                ListKind::Set if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                    for item in items {
                        let mut p = path.clone();
                        p.push(format!("v:{item}"));
                        set.insert(p);
                    }
                }
                _ => {
                    set.insert(path);
                }
            }
        }
        _ => {
            set.insert(path);
        }
    }
}

fn item_key(key: &str, item: &Value) -> String {
    let mut m = Map::new();
    m.insert(
        key.to_string(),
        item.get(key).cloned().unwrap_or(Value::Null),
    );
    format!("k:{}", Value::Object(m))
}

/// The value at `path`, if present.
pub fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for element in path {
        current = step(current, element)?;
    }
    Some(current)
}

fn step<'a>(current: &'a Value, element: &str) -> Option<&'a Value> {
    if let Some(field) = element.strip_prefix("f:") {
        return current.get(field);
    }
    let items = current.as_array()?;
    if let Some(key) = element.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        return items
            .iter()
            .find(|i| key.iter().all(|(k, v)| i.get(k) == Some(v)));
    }
    if let Some(value) = element.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        return items.iter().find(|i| **i == value);
    }
    None
}

/// Removes the value at `path` (a map field, a keyed item or a set value).
pub fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut parent = object;
    for element in parent_path {
        let next = match element.strip_prefix("f:") {
            Some(field) => parent.get_mut(field),
            None => {
                let found = step(parent, element).cloned();
                parent
                    .as_array_mut()
                    .and_then(|items| items.iter_mut().find(|i| Some(&**i) == found.as_ref()))
            }
        };
        match next {
            Some(n) => parent = n,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(m) = parent.as_object_mut() {
            m.remove(field);
        }
        return;
    }
    let found = step(parent, last).cloned();
    if let (Some(found), Some(items)) = (found, parent.as_array_mut()) {
        items.retain(|i| *i != found);
    }
}

/// `.spec.template.spec.containers[name="app"].image`: a path as the real server prints it.
pub fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(f) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = element.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let inner: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", inner.join(",")));
        } else if let Some(v) = element.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

#[derive(Default)]
struct Node {
    owned: bool,
    children: BTreeMap<String, Node>,
}

/// Serializes a field set as `fieldsV1`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.owned = true;
    }
    fn render(node: &Node) -> Value {
        let mut m = Map::new();
        if node.owned && !node.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, child) in &node.children {
            m.insert(k.clone(), render(child));
        }
        Value::Object(m)
    }
    render(&root)
}

/// Parses `fieldsV1` into a field set.
pub fn from_fields_v1(fields: &Value) -> FieldSet {
    fn walk(value: &Value, path: &mut FieldPath, set: &mut FieldSet) {
        let Some(m) = value.as_object() else { return };
        if (m.is_empty() || m.contains_key(".")) && !path.is_empty() {
            set.insert(path.clone());
        }
        for (k, v) in m {
            if k != "." {
                path.push(k.clone());
                walk(v, path, set);
                path.pop();
            }
        }
    }
    let mut set = FieldSet::new();
    walk(fields, &mut Vec::new(), &mut set);
    set
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Managed {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the fields refer to.
    pub api_version: String,
    /// RFC 3339 time of the last change.
    pub time: String,
    /// `status` for the status subresource, empty for the main resource.
    pub subresource: String,
    /// Owned paths.
    pub fields: FieldSet,
}

/// Reads `metadata.managedFields`.
pub fn read_managed(object: &Value) -> Vec<Managed> {
    let Some(entries) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    entries
        .iter()
        .map(|e| Managed {
            manager: s(e, "manager"),
            operation: s(e, "operation"),
            api_version: s(e, "apiVersion"),
            time: s(e, "time"),
            subresource: s(e, "subresource"),
            fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        })
        .collect()
}

/// Writes `metadata.managedFields`, dropping entries that own nothing.
pub fn write_managed(object: &mut Value, entries: &[Managed]) {
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = Value::String(e.subresource.clone());
            }
            v
        })
        .collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if rendered.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(rendered));
        }
    }
}

/// Now, as the RFC 3339 seconds the real server writes.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Records a non-apply write (create, update, patch) by `manager`: it takes ownership of every
/// field whose value it changed or added (removing it from other managers, as updates never
/// conflict), and removed fields leave every manager.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    builtin: bool,
    part: Part,
    api_version: &str,
    subresource: &str,
) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let old_set = old.map(|o| field_set(o, builtin, part)).unwrap_or_default();
    let new_set = field_set(new, builtin, part);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| match old {
            None => true,
            Some(o) => value_at(o, p) != value_at(new, p),
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        write_managed(new, &entries);
        return;
    }
    for e in entries.iter_mut().filter(|e| e.subresource == subresource) {
        let own = e.manager == manager && e.operation == "Update";
        e.fields
            .retain(|p| !removed.contains(p) && (own || !changed.contains(p)));
    }
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == subresource)
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = now();
            e.api_version = api_version.into();
        }
        None if !changed.is_empty() => entries.push(Managed {
            manager: manager.into(),
            operation: "Update".into(),
            api_version: api_version.into(),
            time: now(),
            subresource: subresource.into(),
            fields: changed,
        }),
        None => {}
    }
    write_managed(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str, replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "d"}, "uid": "u"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
            "status": {"replicas": 1}})
    }

    #[test]
    fn field_set_paths() {
        let set = field_set(&deployment("a", 1), true, Part::Main);
        let paths: Vec<String> = set.iter().map(|p| display_path(p)).collect();
        assert!(paths.contains(&".spec.replicas".to_string()));
        assert!(paths.contains(&".metadata.labels.app".to_string()));
        assert!(paths.contains(&".spec.template.spec.containers[name=\"app\"]".to_string()));
        assert!(paths.contains(&".spec.template.spec.containers[name=\"app\"].image".to_string()));
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with(".status") || p.contains("uid"))
        );
        let status = field_set(&deployment("a", 1), true, Part::Status);
        assert_eq!(status.len(), 1);
    }

    #[test]
    fn fields_v1_round_trip() {
        let set = field_set(&deployment("a", 1), true, Part::Main);
        let v1 = to_fields_v1(&set);
        assert!(
            v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["."]
                .is_object()
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn value_at_and_remove_at() {
        let mut d = deployment("a", 1);
        let path: FieldPath = vec![
            "f:spec".into(),
            "f:template".into(),
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"app\"}".into(),
            "f:image".into(),
        ];
        assert_eq!(value_at(&d, &path), Some(&json!("a")));
        remove_at(&mut d, &path);
        assert_eq!(value_at(&d, &path), None);
        remove_at(&mut d, &path[..5]);
        assert_eq!(d["spec"]["template"]["spec"]["containers"], json!([]));
    }

    #[test]
    fn updates_move_ownership() {
        let mut first = deployment("a", 1);
        track_update(None, &mut first, "alice", true, Part::Main, "apps/v1", "");
        let mut second = deployment("b", 1);
        track_update(
            Some(&first),
            &mut second,
            "bob",
            true,
            Part::Main,
            "apps/v1",
            "",
        );
        let entries = read_managed(&second);
        let image: FieldPath = vec![
            "f:spec".into(),
            "f:template".into(),
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"app\"}".into(),
            "f:image".into(),
        ];
        let alice = entries.iter().find(|e| e.manager == "alice").unwrap();
        let bob = entries.iter().find(|e| e.manager == "bob").unwrap();
        assert!(!alice.fields.contains(&image));
        assert!(bob.fields.contains(&image));
        assert!(
            alice
                .fields
                .contains(&vec!["f:spec".to_string(), "f:replicas".to_string()])
        );
    }
}
