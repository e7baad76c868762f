//! A pool of interchangeable children with generated names (Pods of a ReplicaSet-like
//! parent): keep `count` of the owned children that fit the current template, delete the
//! rest, create what is missing.
//!
//! Children already being deleted are neither kept nor deleted again: they are on their way
//! out and do not count, so their replacements are created at once.

use crate::owner::is_deleting;
use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What [`plan`] decided for a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPlan<C> {
    /// Children to keep (at most `count`, all fitting), oldest first.
    pub keep: Vec<C>,
    /// Children to delete: those that do not fit, and fitting ones beyond `count`.
    pub delete: Vec<C>,
    /// How many new children to create.
    pub create: usize,
}

/// Plans a pool of `count` children out of the `owned` ones (filter them by owner first):
/// children for which `fits` is false are deleted; of the fitting ones the oldest `count`
/// (by creation time, then name) are kept and the others deleted.
pub fn plan<C>(owned: Vec<C>, count: usize, fits: impl Fn(&C) -> bool) -> PoolPlan<C>
where
    C: Metadata<Ty = ObjectMeta>,
{
    let (mut fitting, mut delete): (Vec<C>, Vec<C>) = owned
        .into_iter()
        .filter(|c| !is_deleting(c.metadata()))
        .partition(|c| fits(c));
    fitting.sort_by(|a, b| {
        let key = |c: &C| {
            let m = c.metadata();
            (m.creation_timestamp.as_ref().map(|t| t.0), m.name.clone())
        };
        key(a).cmp(&key(b))
    });
    if fitting.len() > count {
        delete.extend(fitting.split_off(count));
    }
    PoolPlan {
        create: count - fitting.len(),
        keep: fitting,
        delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(name: &str, created: &str, msg: &str, deleting: bool) -> Pod {
        let mut p = json!({"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"containers": [{"name": "c", "env": [{"name": "MESSAGE", "value": msg}]}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:09Z");
        }
        serde_json::from_value(p).unwrap()
    }

    fn message(p: &Pod) -> &str {
        let env = p.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap();
        env[0].value.as_deref().unwrap()
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn creates_the_missing_and_keeps_the_fitting() {
        let owned = vec![pod("a", "2026-01-01T00:00:01Z", "hi", false)];
        let plan = plan(owned, 3, |p| message(p) == "hi");
        assert_eq!((names(&plan.keep), plan.create), (vec!["a"], 2));
        assert!(plan.delete.is_empty());
    }

    #[test]
    fn deletes_the_unfitting_and_the_newest_extras() {
        let owned = vec![
            pod("new", "2026-01-01T00:00:05Z", "hi", false),
            pod("old", "2026-01-01T00:00:01Z", "hi", false),
            pod("mid", "2026-01-01T00:00:03Z", "hi", false),
            pod("stale", "2026-01-01T00:00:00Z", "bye", false),
        ];
        let plan = plan(owned, 1, |p| message(p) == "hi");
        assert_eq!(names(&plan.keep), ["old"]);
        assert_eq!(names(&plan.delete), ["stale", "mid", "new"]);
        assert_eq!(plan.create, 0);
    }

    #[test]
    fn children_being_deleted_do_not_count_and_are_not_deleted_again() {
        let owned = vec![
            pod("going", "2026-01-01T00:00:01Z", "hi", true),
            pod("going-stale", "2026-01-01T00:00:01Z", "bye", true),
        ];
        let plan = plan(owned, 1, |p| message(p) == "hi");
        assert!(plan.keep.is_empty() && plan.delete.is_empty());
        assert_eq!(plan.create, 1);
    }
}
