//! Fenced writes: every patch and delete a call sends carries, as a precondition the API
//! server checks, the resourceVersion of the object the plugin decided on. A write decided on
//! state that has moved on since (another client's change, a status update, a write of
//! another replica that held the key before) is refused with 409 Conflict instead of
//! applying, whichever replica sends it; the worker then reconciles the key again once its
//! cache shows the newer version.
//!
//! Which version a write carries ([`Fence`], built by the worker for each call):
//! - the object being reconciled (the request's target, its `status` or other subresource
//!   included): the resourceVersion of the cache entry handed to the plugin;
//! - any other object (a child the plugin owns): the version the plugin read through the
//!   host's `get`/`list` imports during the call, the first one if it read it more than
//!   once;
//! - after a patch of an object succeeds, later writes to it in the same call carry the
//!   version that patch left it at (a create's too; a delete forgets it);
//! - otherwise (an object the plugin neither was handed nor read) the write is sent
//!   unfenced, as before: the host knows no version the decision was taken on.
//!
//! How each write carries it:
//! - merge and strategic merge patches, and server-side apply: `metadata.resourceVersion` in
//!   the body (the API server treats a resourceVersion in a patched or applied object as a
//!   precondition of the update: 409 Conflict when the stored object differs);
//! - JSON patches: an `add` of `/metadata/resourceVersion` appended after the plugin's
//!   operations. Not a `test` operation: a failed `test` is 422 Invalid on a real API server,
//!   which the host cannot tell from a patch that is wrong whatever the state, while a patch
//!   that *sets* the resourceVersion fails exactly like the merge-patch case, with 409
//!   Conflict. Appended last, so no operation of the plugin's (a `replace` of `/metadata`)
//!   can drop it;
//! - deletes: `preconditions.resourceVersion` in the `DeleteOptions`.
//!
//! A body that already carries `metadata.resourceVersion` (or a JSON patch with an operation
//! on `/metadata/resourceVersion`) is sent as the plugin wrote it: that is a precondition of
//! its own, and the policy's field check already decided whether the plugin may touch
//! `/metadata/resourceVersion` at all. The host's own precondition is added after the policy
//! check, is not subject to the plugin's field grants, and is not part of the body the audit
//! records (its digest is the plugin's body). A merge or strategic body whose `metadata` is
//! not an object (a `null` that deletes it, which only a `/metadata` grant allows) is sent as
//! it is, unfenced.
//!
//! Not fenced: creates (a version cannot name an object that does not exist; AlreadyExists
//! already makes a create idempotent, and it is treated as done), and Events (a new object
//! each, about the object rather than a change of it).

use crate::contract::{Action, ObjectRef, PatchType};
use kube::api::{DeleteParams, Preconditions};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// The resourceVersions a call's patches and deletes carry, per object; changed as the
/// call's writes succeed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    versions: HashMap<ObjectRef, String>,
}

impl Fence {
    /// A fence for one call: `target` (the key reconciled) at `handed`, the version of the
    /// object handed to the plugin (none when it is gone), and each other object a patch or
    /// delete of `actions` names at the version `read` says the call first read it at.
    pub fn decided_on(
        target: &ObjectRef,
        handed: Option<&str>,
        actions: &[Action],
        read: impl FnOnce(&[&ObjectRef]) -> HashMap<ObjectRef, String>,
    ) -> Fence {
        let mut seen = HashSet::new();
        let others: Vec<&ObjectRef> = actions
            .iter()
            .filter_map(fenced_object)
            .filter(|o| *o != target && seen.insert(*o))
            .collect();
        let mut versions = read(&others);
        if let Some(rv) = handed.filter(|rv| !rv.is_empty()) {
            versions.insert(target.clone(), rv.to_string());
        }
        Fence { versions }
    }

    /// The version writes to `object` carry now, if any.
    pub fn version_of(&self, object: &ObjectRef) -> Option<&str> {
        self.versions.get(object).map(String::as_str)
    }

    /// A write left `object` at `resource_version`: later writes to it carry that.
    pub fn advance(&mut self, object: &ObjectRef, resource_version: &str) {
        self.versions
            .insert(object.clone(), resource_version.to_string());
    }

    /// `object` is gone: later writes to it carry nothing.
    pub fn forget(&mut self, object: &ObjectRef) {
        self.versions.remove(object);
    }
}

/// The object a fenced write acts on: a patch's or a delete's target. Creates and Events are
/// not fenced (see the module's documentation). Every kind is named, so a new write action
/// does not compile until someone decides whether it is fenced.
pub(crate) fn fenced_object(action: &Action) -> Option<&ObjectRef> {
    match action {
        Action::Patch { target, .. } | Action::Delete { target } => Some(target),
        Action::Create { .. }
        | Action::Event { .. }
        | Action::Log { .. }
        | Action::RequeueAfter { .. } => None,
    }
}

/// The body a patch of `patch_type` is sent with when fenced at `resource_version`: the
/// plugin's body, plus the precondition unless it carries its own.
pub(crate) fn patch_body<'a>(
    patch_type: PatchType,
    body: &'a Value,
    resource_version: &str,
) -> Cow<'a, Value> {
    match patch_type {
        PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
            let Some(object) = body.as_object() else {
                return Cow::Borrowed(body);
            };
            match object.get("metadata") {
                None => {
                    let mut fenced = object.clone();
                    fenced.insert(
                        "metadata".into(),
                        json!({"resourceVersion": resource_version}),
                    );
                    Cow::Owned(Value::Object(fenced))
                }
                Some(Value::Object(meta)) if !meta.contains_key("resourceVersion") => {
                    let mut meta: Map<String, Value> = meta.clone();
                    meta.insert("resourceVersion".into(), json!(resource_version));
                    let mut fenced = object.clone();
                    fenced.insert("metadata".into(), Value::Object(meta));
                    Cow::Owned(Value::Object(fenced))
                }
                // The plugin's own precondition, or a `metadata` that is not an object.
                Some(_) => Cow::Borrowed(body),
            }
        }
        PatchType::Json => {
            let Some(ops) = body.as_array() else {
                return Cow::Borrowed(body);
            };
            let own = ops.iter().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
            });
            if own {
                return Cow::Borrowed(body);
            }
            let mut fenced = ops.clone();
            fenced.push(json!({
                "op": "add",
                "path": "/metadata/resourceVersion",
                "value": resource_version,
            }));
            Cow::Owned(Value::Array(fenced))
        }
    }
}

/// A background-propagation delete, with `resource_version` as its precondition if given.
pub(crate) fn delete_params(resource_version: Option<&str>) -> DeleteParams {
    let params = DeleteParams::background();
    match resource_version {
        Some(rv) => params.preconditions(Preconditions {
            resource_version: Some(rv.to_string()),
            uid: None,
        }),
        None => params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            namespace: Some("team-a".into()),
            name: name.into(),
        }
    }

    #[test]
    fn merge_strategic_and_apply_bodies_carry_the_version_unless_they_have_their_own() {
        for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
            let body = json!({"spec": {"replicas": 2}});
            assert_eq!(
                patch_body(patch_type, &body, "7").into_owned(),
                json!({"spec": {"replicas": 2}, "metadata": {"resourceVersion": "7"}})
            );
            let body = json!({"metadata": {"labels": {"a": "b"}}});
            assert_eq!(
                patch_body(patch_type, &body, "7").into_owned(),
                json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "7"}})
            );
            for own in [
                json!({"metadata": {"resourceVersion": "3"}}),
                json!({"metadata": {"resourceVersion": null}}),
                json!({"metadata": null}),
            ] {
                assert!(
                    matches!(patch_body(patch_type, &own, "7"), Cow::Borrowed(b) if *b == own),
                    "{own}"
                );
            }
        }
    }

    #[test]
    fn json_patches_end_with_an_add_of_the_version() {
        let ops = json!([{"op": "replace", "path": "/metadata", "value": {"labels": {}}}]);
        assert_eq!(
            patch_body(PatchType::Json, &ops, "7").into_owned(),
            json!([
                {"op": "replace", "path": "/metadata", "value": {"labels": {}}},
                {"op": "add", "path": "/metadata/resourceVersion", "value": "7"}
            ])
        );
        let own = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "3"}]);
        assert_eq!(patch_body(PatchType::Json, &own, "7").into_owned(), own);
    }

    #[test]
    fn deletes_carry_a_precondition_when_fenced() {
        let params = delete_params(Some("7"));
        assert_eq!(
            params.preconditions.and_then(|p| p.resource_version),
            Some("7".to_string())
        );
        assert!(delete_params(None).preconditions.is_none());
    }

    #[test]
    fn the_target_is_fenced_as_handed_and_other_objects_as_read() {
        let target = web("Deployment", "web");
        let child = web("ReplicaSet", "web-1");
        let unread = web("ReplicaSet", "web-2");
        let actions = [
            Action::Patch {
                target: child.clone(),
                patch_type: PatchType::Merge,
                subresource: None,
                body: json!({}),
            },
            Action::Delete {
                target: unread.clone(),
            },
            Action::Delete {
                target: child.clone(),
            },
            Action::Create {
                manifest: json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            },
        ];
        let mut asked = Vec::new();
        let fence = Fence::decided_on(&target, Some("5"), &actions, |wanted| {
            asked = wanted.iter().map(|o| (*o).clone()).collect();
            [(child.clone(), "9".to_string())].into()
        });
        assert_eq!(asked, [child.clone(), unread.clone()], "asked once each");
        assert_eq!(fence.version_of(&target), Some("5"));
        assert_eq!(fence.version_of(&child), Some("9"));
        assert_eq!(fence.version_of(&unread), None);
        // Nothing handed (the object is gone): its writes go unfenced.
        let fence = Fence::decided_on(&target, None, &[], |_| HashMap::new());
        assert_eq!(fence, Fence::default());
    }
}
