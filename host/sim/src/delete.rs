//! Deletion: finalizers and deletionTimestamp, namespace termination, and orphaning of
//! dependents (background collection itself is in `gc`).

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::objects::{RETRIES, meta_str};
use super::patch::fields::now;
use super::state::Shared;
use super::store::{Precondition, object_rv};
use serde_json::{Value, json};
use std::sync::Arc;

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Orphan` leaves dependents (their ownerReference to this object is removed);
    /// `Background` and `Foreground` both delete them in the background.
    pub propagation: Option<String>,
    /// Precondition on the resourceVersion.
    pub resource_version: Option<String>,
    /// Precondition on the uid.
    pub uid: Option<String>,
}

impl Shared {
    /// Deletes an object: with finalizers it only gets a deletionTimestamp; otherwise it is
    /// removed and its dependents are collected in the background (or orphaned).
    pub(crate) fn delete(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        for _ in 0..RETRIES {
            let old = self.get_object(kind, ns, name)?;
            check_preconditions(kind, name, &old, opts)?;
            let uid = meta_str(&old, "uid").unwrap_or_default().to_string();
            if opts.propagation.as_deref() == Some("Orphan") {
                self.orphan_dependents(&uid);
            }
            let has_finalizers = old["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            let is_namespace = kind.group.is_empty() && kind.kind == "Namespace";
            let result = if has_finalizers || is_namespace {
                if meta_str(&old, "deletionTimestamp").is_some() {
                    return Ok(old);
                }
                let mut next = (*old).clone();
                next["metadata"]["deletionTimestamp"] = Value::String(now());
                next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                if is_namespace {
                    next["status"] = json!({"phase": "Terminating"});
                }
                self.commit(
                    kind,
                    ns,
                    name,
                    Precondition::ResourceVersion(object_rv(&old)),
                    Some(next),
                )
            } else {
                self.commit(
                    kind,
                    ns,
                    name,
                    Precondition::ResourceVersion(object_rv(&old)),
                    None,
                )
                .inspect(|removed| self.after_removal(kind, removed))
            };
            match result {
                Err(e) if e.reason == "Conflict" => continue,
                Ok(o) if is_namespace => {
                    self.empty_namespace(name);
                    return Ok(o);
                }
                other => return other,
            }
        }
        Err(ApiError::conflict(&kind.resource_name(), name))
    }

    /// Hook after an object left the store: a terminating namespace that became empty goes.
    pub(super) fn after_removal(&self, kind: &ResourceKind, removed: &Value) {
        if kind.namespaced
            && let Some(ns) = meta_str(removed, "namespace")
        {
            self.finish_namespace(ns);
        }
    }

    /// Deletes everything in a terminating namespace.
    pub(super) fn empty_namespace(&self, namespace: &str) {
        for (resource, object) in self.store.all() {
            if meta_str(&object, "namespace") != Some(namespace) {
                continue;
            }
            let Some(kind) = self.registry().by_resource(&resource) else {
                continue;
            };
            let name = meta_str(&object, "name").unwrap_or_default().to_string();
            if let Err(err) = self.delete(&kind, namespace, &name, &DeleteOptions::default())
                && err.code != 404
            {
                tracing::warn!(namespace, name, %err, "namespace deletion: could not delete object");
            }
        }
        self.finish_namespace(namespace);
    }

    /// Removes a terminating namespace once nothing is left in it.
    pub(crate) fn finish_namespace(&self, namespace: &str) {
        let Some(ns) = self.store.get("namespaces", "", namespace) else {
            return;
        };
        if meta_str(&ns, "deletionTimestamp").is_none() {
            return;
        }
        if self.store.count_in_namespace(namespace) == 0 {
            let _ = self.store.commit(
                "namespaces",
                "",
                namespace,
                Precondition::ResourceVersion(object_rv(&ns)),
                None,
            );
        }
    }

    /// Removes ownerReferences to `uid` from every object (propagationPolicy=Orphan).
    pub(super) fn orphan_dependents(&self, uid: &str) {
        for (resource, object) in self.store.dependents(uid) {
            let Some(kind) = self.registry().by_resource(&resource) else {
                continue;
            };
            let (ns, name) = super::store::key_of(&object);
            let _ = self.modify(&kind, &ns, &name, "kube-controller-manager", |o| {
                remove_owner(o, uid);
                true
            });
        }
    }
}

/// A delete's preconditions against the stored object: a mismatch is a 409 Conflict worded
/// as the real server's storage layer words it.
fn check_preconditions(
    kind: &ResourceKind,
    name: &str,
    old: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let stored_rv = object_rv(old).to_string();
    let stored_uid = meta_str(old, "uid").unwrap_or_default();
    let failed = |what: &str, want: &str, have: &str| {
        Err(ApiError::conflict_because(
            &kind.resource_name(),
            name,
            &format!(
                "Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}"
            ),
        ))
    };
    if let Some(uid) = opts.uid.as_deref()
        && uid != stored_uid
    {
        return failed("UID", uid, stored_uid);
    }
    match opts.resource_version.as_deref() {
        Some(rv) if rv != stored_rv => failed("ResourceVersion", rv, &stored_rv),
        _ => Ok(()),
    }
}

/// Removes the ownerReference to `uid`.
pub(crate) fn remove_owner(object: &mut Value, uid: &str) {
    if let Some(refs) = object["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain(|r| r["uid"].as_str() != Some(uid));
        if refs.is_empty()
            && let Some(meta) = object["metadata"].as_object_mut()
        {
            meta.remove("ownerReferences");
        }
    }
}
