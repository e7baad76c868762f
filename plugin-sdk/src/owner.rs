//! Owner references: the one a parent puts on its children, and which objects a parent
//! controls (the `ownerReferences` entry with `controller: true` naming its uid).
//!
//! The host routes a change of an owned child to its controller owner's key, and the API
//! server's garbage collector deletes the children of a deleted owner; both go by these
//! references.

use crate::{Error, ObjectRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{Metadata, Resource};
use serde::de::DeserializeOwned;

/// The controller owner reference a child of `owner` carries (`controller: true`,
/// `blockOwnerDeletion: true`). The owner must have been read from the cluster (it needs its
/// uid); an owner without one is a permanent error.
pub fn owner_reference<K>(owner: &K) -> Result<OwnerReference, Error>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = owner.metadata();
    let (Some(name), Some(uid)) = (&meta.name, &meta.uid) else {
        return Err(Error::permanent(format!(
            "a {} without a name and uid cannot own objects",
            K::KIND
        )));
    };
    Ok(OwnerReference {
        api_version: K::API_VERSION.to_string(),
        kind: K::KIND.to_string(),
        name: name.clone(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The controller owner reference of an object, if it has one.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether `child` is controlled by the object whose metadata is `owner` (same uid).
pub fn is_controlled_by(child: &ObjectMeta, owner: &ObjectMeta) -> bool {
    match (controller_of(child), &owner.uid) {
        (Some(r), Some(uid)) => &r.uid == uid,
        _ => false,
    }
}

/// Whether an object is being deleted (it has a `deletionTimestamp`).
pub fn is_deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// Keeps the objects `owner` controls.
pub fn filter_owned<C, K>(owner: &K, objects: Vec<C>) -> Vec<C>
where
    C: Metadata<Ty = ObjectMeta>,
    K: Metadata<Ty = ObjectMeta>,
{
    objects
        .into_iter()
        .filter(|c| is_controlled_by(c.metadata(), owner.metadata()))
        .collect()
}

/// The children of kind `C` that `owner` controls, from the host's cache: listed in the
/// owner's namespace (optionally narrowed by a label selector), then filtered by owner uid.
/// Reading `C` must be granted by the plugin's policy.
pub fn owned_children<C, K>(owner: &K, label_selector: Option<&str>) -> Result<Vec<C>, Error>
where
    C: Resource + Metadata<Ty = ObjectMeta> + DeserializeOwned,
    K: Metadata<Ty = ObjectMeta>,
{
    let namespace = owner.metadata().namespace.as_deref();
    let all = crate::host::list::<C>(&crate::KindRef::of::<C>(), namespace, label_selector)?;
    Ok(filter_owned(owner, all))
}

impl ObjectRef {
    /// A reference to a typed object (its kind, namespace and name).
    pub fn to<K>(object: &K) -> Self
    where
        K: Resource + Metadata<Ty = ObjectMeta>,
    {
        let meta = object.metadata();
        ObjectRef {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn parent() -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"}}))
            .unwrap()
    }

    fn child(name: &str, owners: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
            "ownerReferences": owners}}))
        .unwrap()
    }

    #[test]
    fn owner_reference_names_the_parent_as_controller() {
        let r = owner_reference(&parent()).unwrap();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert_eq!((r.name.as_str(), r.uid.as_str()), ("p", "u-p"));
        assert_eq!(
            (r.controller, r.block_owner_deletion),
            (Some(true), Some(true))
        );
        let unsaved = ConfigMap::default();
        assert!(matches!(
            owner_reference(&unsaved),
            Err(Error::Permanent(_))
        ));
    }

    #[test]
    fn only_children_controlled_by_the_parent_are_owned() {
        let ours = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "u-p", "controller": true}]);
        let adopted = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "u-p"}]);
        let foreign = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "q", "uid": "u-q", "controller": true}]);
        let kids = vec![
            child("a", ours),
            child("b", adopted),
            child("c", foreign),
            child("d", json!(null)),
        ];
        let owned = filter_owned(&parent(), kids);
        let names: Vec<_> = owned
            .iter()
            .map(|d| d.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a"]);
        assert!(!is_controlled_by(
            &owned[0].metadata,
            &ObjectMeta::default()
        ));
    }
}
