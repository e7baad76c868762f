//! Desired children, in the spirit of Metacontroller's composite controllers: the plugin
//! states the children a parent should have (full manifests of one kind), and [`plan`]
//! compares them with what exists and returns the writes that close the gap:
//!
//! - **create** a desired child that does not exist (with the parent's controller owner
//!   reference and namespace filled in);
//! - **apply** (server-side apply with the plugin's field manager, forced; no last-applied
//!   annotation) a desired child that exists, is controlled by this parent, and differs from
//!   the manifest in some field the manifest sets — fields the manifest does not mention (the
//!   API server's defaults, other managers' fields, status) never count as a difference, so a
//!   converged parent produces no writes;
//! - **delete** an existing child this parent controls (owner uid, `controller: true`) that
//!   is not desired. Adopted (non-controller) and foreign objects are never deleted.
//!
//! A desired name held by an object this parent does not control is a **conflict**: it is
//! left alone and reported, for the plugin to say so (the sample-controller's
//! `ErrResourceExists`). Children already being deleted are left to finish.

use crate::owner::{controller_of, is_deleting, owner_reference};
use crate::{Action, Error, KindRef, ObjectRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde_json::{Value, json};
use std::collections::HashSet;

/// What it takes to bring a parent's children of one kind to the desired set.
#[derive(Debug, Default, Clone)]
pub struct ChildrenPlan {
    /// Manifests to create.
    pub create: Vec<Value>,
    /// Existing children to server-side apply, with the manifest.
    pub apply: Vec<(ObjectRef, Value)>,
    /// Children this parent controls that are not desired.
    pub delete: Vec<ObjectRef>,
    /// Desired names taken by objects this parent does not control (left alone).
    pub conflicts: Vec<ObjectRef>,
}

impl ChildrenPlan {
    /// Whether nothing needs to be written.
    pub fn is_converged(&self) -> bool {
        self.create.is_empty() && self.apply.is_empty() && self.delete.is_empty()
    }

    /// The create, apply and delete actions, in that order (conflicts are not actions).
    pub fn actions(&self) -> Vec<Action> {
        let creates = self.create.iter().map(Action::create);
        let applies = self.apply.iter().map(|(r, m)| Action::apply(r, m.clone()));
        let deletes = self.delete.iter().map(Action::delete);
        creates.chain(applies).chain(deletes).collect()
    }
}

/// Plans `owner`'s children of `kind`: `desired` are manifests (apiVersion and kind may be
/// left out: `kind` fills them; `metadata.name` is required), `existing` every object of
/// `kind` the plugin read that may matter — the owned ones (see
/// [`owned_children`](crate::owner::owned_children)) and any holding a desired name.
/// A desired manifest without a name, or two with one name, is a permanent error.
pub fn plan<K>(
    owner: &K,
    kind: &KindRef,
    desired: Vec<Value>,
    existing: &[Value],
) -> Result<ChildrenPlan, Error>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let owner_ref = serde_json::to_value(owner_reference(owner)?)?;
    let owner_uid = owner.metadata().uid.clone().unwrap_or_default();
    let namespace = owner.metadata().namespace.clone();
    let child_ref = |name: &str| ObjectRef {
        api_version: kind.api_version.clone(),
        kind: kind.kind.clone(),
        namespace: namespace.clone(),
        name: name.to_string(),
    };
    let existing: Vec<(String, ObjectMeta, &Value)> = existing
        .iter()
        .map(|o| {
            let meta: ObjectMeta = serde_json::from_value(o["metadata"].clone())?;
            Ok((meta.name.clone().unwrap_or_default(), meta, o))
        })
        .collect::<Result<_, Error>>()?;
    let ours = |m: &ObjectMeta| controller_of(m).is_some_and(|r| r.uid == owner_uid);
    let mut plan = ChildrenPlan::default();
    let mut wanted = HashSet::new();
    for mut manifest in desired {
        let Some(name) = manifest["metadata"]["name"].as_str().map(str::to_string) else {
            return Err(Error::permanent(format!(
                "a desired {} has no metadata.name",
                kind.kind
            )));
        };
        if !wanted.insert(name.clone()) {
            return Err(Error::permanent(format!(
                "{} {name} is desired twice",
                kind.kind
            )));
        }
        manifest["apiVersion"] = json!(kind.api_version);
        manifest["kind"] = json!(kind.kind);
        if let Some(ns) = &namespace {
            manifest["metadata"]["namespace"] = json!(ns);
        }
        manifest["metadata"]["ownerReferences"] = json!([owner_ref]);
        match existing.iter().find(|(n, _, _)| *n == name) {
            None => plan.create.push(manifest),
            Some((_, meta, _)) if !ours(meta) => plan.conflicts.push(child_ref(&name)),
            Some((_, meta, _)) if is_deleting(meta) => {}
            Some((_, _, current)) if holds(current, &manifest) => {}
            Some(_) => plan.apply.push((child_ref(&name), manifest)),
        }
    }
    for (name, meta, _) in &existing {
        if ours(meta) && !is_deleting(meta) && !wanted.contains(name) {
            plan.delete.push(child_ref(name));
        }
    }
    Ok(plan)
}

/// Whether an existing child already holds a desired manifest. `apiVersion` and `kind` are
/// not compared: list items from a real API server do not carry them.
fn holds(current: &Value, manifest: &Value) -> bool {
    manifest.as_object().is_some_and(|m| {
        m.iter()
            .filter(|(k, _)| *k != "apiVersion" && *k != "kind")
            .all(|(k, v)| current.get(k).is_some_and(|c| contains(c, v)))
    })
}

/// Whether `current` already holds every field `desired` sets, with the same value: objects
/// compare the keys `desired` has (extra keys in `current` are fine), lists compare item by
/// item and must have the same length, anything else must be equal.
pub fn contains(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => d
            .iter()
            .all(|(k, v)| c.get(k).is_some_and(|cv| contains(cv, v))),
        (Value::Array(c), Value::Array(d)) => {
            c.len() == d.len() && c.iter().zip(d).all(|(cv, dv)| contains(cv, dv))
        }
        (c, d) => c == d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn parent() -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"}}))
            .unwrap()
    }

    fn kind() -> KindRef {
        KindRef::new("apps/v1", "Deployment")
    }

    fn want(name: &str, replicas: i32) -> Value {
        json!({"metadata": {"name": name}, "spec": {"replicas": replicas}})
    }

    fn have(name: &str, replicas: i32, owner_uid: Option<&str>) -> Value {
        let owners = owner_uid.map(|u| {
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": u, "controller": true}])
        });
        // As a real server lists it: no apiVersion or kind on the item.
        json!({
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners,
                         "resourceVersion": "7"},
            "spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate"}},
            "status": {"availableReplicas": replicas}})
    }

    #[test]
    fn missing_children_are_created_with_the_owner_reference() {
        let plan = plan(&parent(), &kind(), vec![want("a", 2)], &[]).unwrap();
        assert_eq!(plan.create.len(), 1);
        let m = &plan.create[0];
        assert_eq!(m["apiVersion"], "apps/v1");
        assert_eq!(m["kind"], "Deployment");
        assert_eq!(m["metadata"]["namespace"], "ns");
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "u-p");
        assert_eq!(m["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(matches!(plan.actions()[..], [Action::Create(_)]));
    }

    #[test]
    fn converged_children_need_nothing_and_changed_ones_are_applied() {
        let mut current = have("a", 2, Some("u-p"));
        let desired = |r| vec![want("a", r)];
        // The current object carries the owner reference the manifest will carry.
        current["metadata"]["ownerReferences"] =
            json!([serde_json::to_value(owner_reference(&parent()).unwrap()).unwrap()]);
        let same = plan(
            &parent(),
            &kind(),
            desired(2),
            std::slice::from_ref(&current),
        )
        .unwrap();
        assert!(same.is_converged(), "{same:?}");
        let changed = plan(&parent(), &kind(), desired(3), &[current]).unwrap();
        assert_eq!(changed.apply.len(), 1);
        assert_eq!(changed.apply[0].0.name, "a");
        assert_eq!(changed.apply[0].1["spec"]["replicas"], 3);
        match &changed.actions()[..] {
            [Action::Patch(p)] => {
                assert_eq!(p.patch_type, crate::PatchType::Apply);
                assert!(p.body.contains("\"apiVersion\":\"apps/v1\""));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_controlled_children_are_deleted_and_foreign_names_conflict() {
        let existing = [
            have("ours-extra", 1, Some("u-p")),
            have("adopted-or-foreign", 1, Some("u-other")),
            have("unowned", 1, None),
        ];
        let plan = plan(&parent(), &kind(), vec![want("unowned", 1)], &existing).unwrap();
        let deleted: Vec<_> = plan.delete.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(deleted, ["ours-extra"]);
        let conflicts: Vec<_> = plan.conflicts.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(conflicts, ["unowned"]);
        assert!(plan.create.is_empty() && plan.apply.is_empty());
    }

    #[test]
    fn children_being_deleted_are_left_to_finish() {
        let mut going = have("a", 1, Some("u-p"));
        going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let plan = plan(&parent(), &kind(), vec![], std::slice::from_ref(&going)).unwrap();
        assert!(plan.is_converged());
        let plan2 = super::plan(&parent(), &kind(), vec![want("a", 5)], &[going]).unwrap();
        assert!(plan2.is_converged());
    }

    #[test]
    fn bad_desired_manifests_are_permanent_errors() {
        let nameless = plan(&parent(), &kind(), vec![json!({"spec": {}})], &[]);
        assert!(matches!(nameless, Err(Error::Permanent(m)) if m.contains("no metadata.name")));
        let twice = plan(&parent(), &kind(), vec![want("a", 1), want("a", 2)], &[]);
        assert!(matches!(twice, Err(Error::Permanent(m)) if m.contains("desired twice")));
    }

    #[test]
    fn contains_ignores_extra_fields_but_not_list_lengths() {
        let current = json!({"a": 1, "b": {"c": [{"x": 1, "y": 2}], "d": true}});
        assert!(contains(&current, &json!({"b": {"c": [{"x": 1}]}})));
        assert!(!contains(&current, &json!({"b": {"c": [{"x": 2}]}})));
        assert!(!contains(
            &current,
            &json!({"b": {"c": [{"x": 1}, {"x": 1}]}})
        ));
        assert!(!contains(&current, &json!({"e": null})));
    }
}
