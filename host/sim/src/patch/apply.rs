//! Server-side apply (`application/apply-patch+yaml`), written here because no Rust crate
//! implements structured-merge-diff. Ownership granularity and conflict rules are those of
//! [`super::fields`]; see `host/sim/README.md` for where this differs from a real server.

use super::fields::{
    FieldSet, Managed, Part, display_path, field_set, now, read_managed, remove_at, value_at,
    write_managed,
};
use super::keys::{ListKind, list_kind_for};
use serde_json::{Map, Value};

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// The apiVersion of the other manager's `Update` entry; `None` for an `Apply` entry.
    pub using: Option<String>,
    /// The field, as `.spec.replicas`.
    pub field: String,
}

impl Conflict {
    /// `"alice"` or `"kubectl" using apps/v1`, as the real server names managers.
    pub fn who(&self) -> String {
        match &self.using {
            Some(version) => format!("\"{}\" using {version}", self.manager),
            None => format!("\"{}\"", self.manager),
        }
    }
}

/// What an apply request needs besides the objects.
#[derive(Debug, Clone, Copy)]
pub struct ApplyRequest<'a> {
    /// The `fieldManager`.
    pub manager: &'a str,
    /// `force=true`: take conflicting fields over.
    pub force: bool,
    /// Built-in kind (list keys known).
    pub builtin: bool,
    /// Which part of the object this request may touch.
    pub part: Part,
    /// apiVersion recorded in managedFields.
    pub api_version: &'a str,
    /// `status` or empty.
    pub subresource: &'a str,
}

/// Applies the configuration `applied` to `live` (or to an empty object when creating);
/// returns the new object with its managedFields, or the conflicts.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    req: ApplyRequest<'_>,
) -> Result<Value, Vec<Conflict>> {
    let applied = restrict(applied, req.part);
    let mut entries = live.map(read_managed).unwrap_or_default();
    let applied_set = field_set(&applied, req.builtin, req.part);
    let is_self = |e: &Managed| e.manager == req.manager && e.operation == "Apply";
    let mut conflicts = Vec::new();
    let mut conflicting = FieldSet::new();
    if let Some(live) = live {
        for e in entries
            .iter()
            .filter(|e| !is_self(e) && e.subresource == req.subresource)
        {
            for path in e.fields.intersection(&applied_set) {
                let (old, new) = (value_at(live, path), value_at(&applied, path));
                let leaf = !path.last().is_some_and(|l| l.starts_with("k:"));
                if leaf && old != new {
                    conflicts.push(Conflict {
                        manager: e.manager.clone(),
                        using: (e.operation != "Apply").then(|| e.api_version.clone()),
                        field: display_path(path),
                    });
                    conflicting.insert(path.clone());
                }
            }
        }
    }
    if !conflicts.is_empty() && !req.force {
        return Err(conflicts);
    }
    for e in entries
        .iter_mut()
        .filter(|e| !is_self(e) && e.subresource == req.subresource)
    {
        e.fields.retain(|p| !conflicting.contains(p));
    }
    let mut result = live.cloned().unwrap_or_else(|| {
        let mut base = Map::new();
        for k in ["apiVersion", "kind"] {
            if let Some(v) = applied.get(k) {
                base.insert(k.into(), v.clone());
            }
        }
        base.insert(
            "metadata".into(),
            applied.get("metadata").cloned().unwrap_or_default(),
        );
        Value::Object(base)
    });
    merge_applied(&mut result, &applied, req.builtin, true);
    let previous: FieldSet = entries
        .iter()
        .filter(|e| is_self(e) && e.subresource == req.subresource)
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut removed: Vec<_> = previous
        .difference(&applied_set)
        .filter(|p| !entries.iter().any(|e| !is_self(e) && e.fields.contains(*p)))
        .cloned()
        .collect();
    removed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in &removed {
        remove_at(&mut result, path);
    }
    entries.retain(|e| !(is_self(e) && e.subresource == req.subresource));
    entries.push(Managed {
        manager: req.manager.into(),
        operation: "Apply".into(),
        api_version: req.api_version.into(),
        time: now(),
        subresource: req.subresource.into(),
        fields: applied_set,
    });
    write_managed(&mut result, &entries);
    Ok(result)
}

/// Keeps only what an apply to this part may set: no status on the main resource of a kind
/// with a status subresource, only status on the status subresource; metadata limited to
/// labels, annotations, ownerReferences and finalizers (plus name and namespace).
fn restrict(applied: &Value, part: Part) -> Value {
    let Some(map) = applied.as_object() else {
        return applied.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let keep = match (k.as_str(), part) {
            ("apiVersion" | "kind", _) => true,
            ("metadata", _) => {
                let meta: Map<String, Value> = v
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter(|(k, _)| {
                                matches!(
                                    k.as_str(),
                                    "name"
                                        | "namespace"
                                        | "labels"
                                        | "annotations"
                                        | "ownerReferences"
                                        | "finalizers"
                                )
                            })
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Object(meta));
                continue;
            }
            ("status", Part::Main) => false,
            ("status", _) => true,
            (_, Part::Status) => false,
            _ => true,
        };
        if keep {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn merge_applied(target: &mut Value, applied: &Value, builtin: bool, top: bool) {
    let (Some(t), Some(a)) = (target.as_object_mut(), applied.as_object()) else {
        *target = applied.clone();
        return;
    };
    for (k, v) in a {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let in_meta = !top || k == "metadata";
        match (t.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                merge_applied(existing, v, builtin, false)
            }
            (Some(Value::Array(existing)), Value::Array(items)) => {
                let meta_list = matches!(k.as_str(), "finalizers" | "ownerReferences");
                match list_kind_for(builtin, in_meta && meta_list, k) {
                    ListKind::Keyed(key) => {
                        for item in items {
                            match existing
                                .iter_mut()
                                .find(|e| e.get(key).is_some() && e.get(key) == item.get(key))
                            {
                                Some(e) => merge_applied(e, item, builtin, false),
                                None => existing.push(item.clone()),
                            }
                        }
                    }
                    ListKind::Set => {
                        for item in items {
                            if !existing.contains(item) {
                                existing.push(item.clone());
                            }
                        }
                    }
                    ListKind::Atomic => *existing = items.clone(),
                }
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(manager: &str, force: bool) -> ApplyRequest<'_> {
        ApplyRequest {
            manager,
            force,
            builtin: true,
            part: Part::Main,
            api_version: "apps/v1",
            subresource: "",
        }
    }

    fn config(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
    }

    #[test]
    fn conflicts_then_force() {
        let live = apply(None, &config(1, "a"), req("alice", false)).unwrap();
        let same = apply(Some(&live), &config(1, "a"), req("bob", false)).unwrap();
        let conflicts = apply(Some(&same), &config(3, "a"), req("bob", false)).unwrap_err();
        assert_eq!(
            conflicts,
            vec![Conflict {
                manager: "alice".into(),
                using: None,
                field: ".spec.replicas".into()
            }]
        );
        let forced = apply(Some(&same), &config(3, "a"), req("bob", true)).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let entries = read_managed(&forced);
        let alice = entries.iter().find(|e| e.manager == "alice").unwrap();
        assert!(
            !alice
                .fields
                .contains(&vec!["f:spec".to_string(), "f:replicas".to_string()])
        );
    }

    #[test]
    fn dropping_a_field_removes_it_unless_shared() {
        let live = apply(None, &config(1, "a"), req("alice", false)).unwrap();
        let mut smaller = config(1, "a");
        smaller["spec"].as_object_mut().unwrap().remove("replicas");
        let out = apply(Some(&live), &smaller, req("alice", false)).unwrap();
        assert!(out["spec"].get("replicas").is_none());
        let shared = apply(Some(&live), &config(1, "a"), req("bob", false)).unwrap();
        let out = apply(Some(&shared), &smaller, req("alice", false)).unwrap();
        assert_eq!(out["spec"]["replicas"], 1);
    }

    #[test]
    fn keyed_lists_merge_across_managers() {
        let live = apply(None, &config(1, "a"), req("alice", false)).unwrap();
        let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}]}}}});
        let out = apply(Some(&live), &sidecar, req("bob", false)).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn status_is_ignored_on_main_resource() {
        let mut c = config(1, "a");
        c["status"] = json!({"replicas": 9});
        let out = apply(None, &c, req("alice", false)).unwrap();
        assert!(out.get("status").is_none());
    }

    #[test]
    fn own_update_entries_conflict_like_other_managers() {
        let mut live = apply(None, &config(1, "a"), req("kubectl", false)).unwrap();
        live["spec"]["replicas"] = serde_json::json!(5);
        let old = apply(None, &config(1, "a"), req("kubectl", false)).unwrap();
        super::super::fields::track_update(
            Some(&old),
            &mut live,
            "kubectl",
            true,
            Part::Main,
            "apps/v1",
            "",
        );
        let conflicts = apply(Some(&live), &config(1, "a"), req("kubectl", false)).unwrap_err();
        assert_eq!(conflicts[0].who(), "\"kubectl\" using apps/v1");
    }
}
