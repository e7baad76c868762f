//! Finalizers, for plugins whose cleanup goes beyond garbage collection (something outside
//! the cluster, or objects that cannot carry an owner reference): add the finalizer on first
//! sight; once the object is being deleted, clean up, then remove it so the deletion
//! completes.
//!
//! Both writes are JSON patches guarded by a `test` of the `resourceVersion` the plugin saw,
//! so a concurrent change of the list by another controller is never overwritten (the patch
//! fails, the object's change re-queues it, and the next call sees the new list).

use crate::owner::is_deleting;
use crate::{Action, ObjectRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde_json::json;

/// Whether `object` carries `finalizer`.
pub fn has_finalizer<K: Metadata<Ty = ObjectMeta>>(object: &K, finalizer: &str) -> bool {
    object
        .metadata()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// The patch adding `finalizer`, or `None` when it is there already or the object is being
/// deleted (finalizers cannot be added then).
pub fn add_finalizer<K>(object: &K, finalizer: &str) -> Option<Action>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    if has_finalizer(object, finalizer) || is_deleting(object.metadata()) {
        return None;
    }
    let mut list = object.metadata().finalizers.clone().unwrap_or_default();
    list.push(finalizer.to_string());
    Some(write_list(object, list))
}

/// The patch removing `finalizer` (call it once cleanup is done), or `None` when absent.
pub fn remove_finalizer<K>(object: &K, finalizer: &str) -> Option<Action>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    if !has_finalizer(object, finalizer) {
        return None;
    }
    let list: Vec<String> = object
        .metadata()
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    Some(write_list(object, list))
}

fn write_list<K>(object: &K, list: Vec<String>) -> Action
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let version = object
        .metadata()
        .resource_version
        .clone()
        .unwrap_or_default();
    Action::json_patch(
        &ObjectRef::to(object),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/finalizers", "value": list},
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::Value;

    const F: &str = "example.com/cleanup";

    fn cm(finalizers: Value, deleting: bool) -> ConfigMap {
        let mut o = json!({"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "42",
            "finalizers": finalizers}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(o).unwrap()
    }

    fn body(a: Option<Action>) -> Value {
        match a {
            Some(Action::Patch(p)) => {
                assert_eq!(p.patch_type, crate::PatchType::Json);
                serde_json::from_str(&p.body).unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn added_once_on_first_sight_guarded_by_the_resource_version() {
        let b = body(add_finalizer(&cm(json!(["other"]), false), F));
        assert_eq!(
            b[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(b[1]["value"], json!(["other", F]));
        assert!(add_finalizer(&cm(json!([F]), false), F).is_none());
        assert!(
            add_finalizer(&cm(json!(null), true), F).is_none(),
            "not while deleting"
        );
        assert_eq!(
            body(add_finalizer(&cm(json!(null), false), F))[1]["value"],
            json!([F])
        );
    }

    #[test]
    fn removed_keeping_the_others() {
        let obj = cm(json!(["other", F]), true);
        assert!(has_finalizer(&obj, F));
        assert_eq!(
            body(remove_finalizer(&obj, F))[1]["value"],
            json!(["other"])
        );
        assert!(remove_finalizer(&cm(json!(["other"]), true), F).is_none());
    }
}
