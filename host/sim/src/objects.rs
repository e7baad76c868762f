//! The write pipeline shared by HTTP handlers, the library API and the simulated controllers:
//! create, update, patch, apply and delete with the metadata rules of a real API server
//! (uid, creationTimestamp, generation, finalizers, managedFields, status separation).
//! Each operation computes the new object on a copy and commits it with a precondition;
//! writes without a client resourceVersion retry on a concurrent change, like the real
//! server's guaranteed update.

use super::errors::ApiError;
use super::kinds::{ResourceKind, Storage};
use super::patch::fields::{Part, now, track_update};
use super::patch::{self, PatchType};
use super::state::Shared;
use super::store::{CommitError, Precondition, object_rv};
use super::validation::{check_type, set_defaults, valid_name, validate};
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub(super) const RETRIES: usize = 16;

/// Which part of the object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The main resource.
    Main,
    /// The `status` subresource.
    Status,
}

pub(super) fn part(kind: &ResourceKind, sub: Sub) -> Part {
    match (sub, kind.status_subresource) {
        (Sub::Status, _) => Part::Status,
        (Sub::Main, true) => Part::Main,
        (Sub::Main, false) => Part::All,
    }
}

pub(super) fn sub_name(sub: Sub) -> &'static str {
    match sub {
        Sub::Main => "",
        Sub::Status => "status",
    }
}

fn commit_error(kind: &ResourceKind, name: &str, err: CommitError) -> ApiError {
    match err {
        CommitError::AlreadyExists => ApiError::already_exists(&kind.resource_name(), name),
        CommitError::NotFound => ApiError::not_found(&kind.resource_name(), name),
        CommitError::Conflict => ApiError::conflict(&kind.resource_name(), name),
    }
}

pub(super) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Whether the content that drives `metadata.generation` is equal in two versions:
/// everything but metadata (and status when it is a subresource), compared in place.
fn same_spec_content(kind: &ResourceKind, a: &Value, b: &Value) -> bool {
    let counted = |k: &str| k != "metadata" && !(kind.status_subresource && k == "status");
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.keys().filter(|k| counted(k)).count() == b.keys().filter(|k| counted(k)).count()
        && a.iter()
            .filter(|(k, _)| counted(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether two versions of an object are equal but for `managedFields` and
/// `resourceVersion`, compared in place (cloning both 6 KB objects per write to compare them
/// was a measurable part of a patch).
fn same_but_managed(a: &Value, b: &Value) -> bool {
    const IGNORED: [&str; 2] = ["managedFields", "resourceVersion"];
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let meta_equal = |x: Option<&Value>, y: Option<&Value>| match (x, y) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let kept = |m: &'_ Map<String, Value>| {
                m.keys().filter(|k| !IGNORED.contains(&k.as_str())).count()
            };
            kept(x) == kept(y)
                && x.iter()
                    .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
                    .all(|(k, v)| y.get(k) == Some(v))
        }
        (x, y) => x == y,
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| match k.as_str() {
            "metadata" => meta_equal(Some(v), b.get(k)),
            _ => b.get(k) == Some(v),
        })
}

impl Shared {
    /// The storage key of a kind.
    fn key(kind: &ResourceKind) -> String {
        kind.storage_name()
    }

    /// The kind whose store holds `kind`'s objects, when that is another kind (the core
    /// Events for `events.k8s.io/v1`): writes convert to it and run as its writes.
    fn stored_as(&self, kind: &ResourceKind) -> Option<Arc<ResourceKind>> {
        match kind.storage {
            Storage::Own => None,
            Storage::CoreEvents => self.registry().by_resource(&kind.storage_name()),
        }
    }

    /// Checks the namespace of a namespaced write exists (creating it when configured).
    fn ensure_namespace(&self, namespace: &str) -> Result<(), ApiError> {
        match self.store.get("namespaces", "", namespace) {
            Some(ns) if meta_str(&ns, "deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
            None if self.config.auto_create_namespaces => {
                let kind = self.kind("namespaces")?;
                let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
                match self.create(&kind, None, body, "kubeplug-sim", false) {
                    Ok(_) => Ok(()),
                    Err(e) if e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            None => Err(ApiError::not_found("namespaces", namespace)),
        }
    }

    /// The registered kind with this plural (`deployments`) or resource name.
    pub(crate) fn kind(&self, name: &str) -> Result<Arc<ResourceKind>, ApiError> {
        self.registry()
            .by_name(name)
            .ok_or_else(|| ApiError::no_route(name))
    }

    /// Validates and fills the namespace of a body against the request path.
    fn place(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        body: &mut Value,
    ) -> Result<String, ApiError> {
        let meta = body["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        if !kind.namespaced {
            meta.remove("namespace");
            return Ok(String::new());
        }
        let in_body = meta
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let ns = match (namespace, in_body) {
            (Some(path), Some(b)) if path != b => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(path), _) => path.to_string(),
            (None, Some(b)) => b,
            (None, None) => {
                return Err(ApiError::bad_request(
                    "a namespace is required for a namespaced resource",
                ));
            }
        };
        meta.insert("namespace".into(), Value::String(ns.clone()));
        Ok(ns)
    }

    /// Creates an object (POST). `tracked` false when managedFields were already computed
    /// (server-side apply).
    pub(crate) fn create(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        mut body: Value,
        manager: &str,
        applied: bool,
    ) -> Result<Arc<Value>, ApiError> {
        check_type(kind, &mut body)?;
        if let Some(stored) = self.stored_as(kind) {
            return self.create(&stored, namespace, kind.to_stored(body), manager, applied);
        }
        let ns = self.place(kind, namespace, &mut body)?;
        let meta = body["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        let name = match (
            meta.get("name").and_then(Value::as_str),
            meta.get("generateName").and_then(Value::as_str),
        ) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
            _ => {
                return Err(ApiError::invalid(format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                    kind.kind
                )));
            }
        };
        // RBAC objects are named by path segment (`system:discovery`), as the real server's
        // ValidateRBACName allows; everything else by RFC 1123 subdomain.
        let rbac_name = kind.group == "rbac.authorization.k8s.io"
            && !name.contains(['/', '%'])
            && name != "."
            && name != ".."
            && name.len() <= 253;
        if !rbac_name && !valid_name(&name) {
            return Err(ApiError::invalid(format!(
                "{} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                kind.kind
            )));
        }
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        meta.insert("creationTimestamp".into(), Value::String(now()));
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(f);
        }
        if kind.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if !applied {
            meta.remove("managedFields");
        }
        if kind.status_subresource
            && let Some(m) = body.as_object_mut()
        {
            m.remove("status");
        }
        if kind.namespaced {
            self.ensure_namespace(&ns)?;
        }
        if !applied {
            track_update(
                None,
                &mut body,
                manager,
                kind.builtin,
                part(kind, Sub::Main),
                &kind.api_version(),
                "",
            );
        }
        super::schema::normalize(kind, &mut body)?;
        validate(kind, &body)?;
        set_defaults(kind, &mut body);
        let created = self.commit(kind, &ns, &name, Precondition::Absent, Some(body))?;
        if self.config.rbac && kind.group.is_empty() && kind.plural == "namespaces" {
            self.create_default_service_account(&name);
        }
        Ok(created)
    }

    /// The `default` ServiceAccount of a new namespace, as the real controller manager's
    /// ServiceAccount controller creates it (with authorization on only, so that a sim
    /// without it stores exactly what it is sent).
    fn create_default_service_account(&self, namespace: &str) {
        let Ok(kind) = self.kind("serviceaccounts") else {
            return;
        };
        let account =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        match self.create(
            &kind,
            Some(namespace),
            account,
            "kube-controller-manager",
            false,
        ) {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(err) => {
                tracing::warn!(%err, namespace, "could not create the default ServiceAccount")
            }
        }
    }

    pub(super) fn commit(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        pre: Precondition,
        new: Option<Value>,
    ) -> Result<Arc<Value>, ApiError> {
        self.store
            .commit(&Self::key(kind), ns, name, pre, new)
            .map_err(|e| commit_error(kind, name, e))
    }

    /// The current object, or 404.
    pub(crate) fn get_object(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.store
            .get(&Self::key(kind), ns, name)
            .ok_or_else(|| ApiError::not_found(&kind.resource_name(), name))
    }

    /// Turns a proposed new state of an existing object into what is stored: status/spec
    /// separation, immutable metadata, generation, managedFields. `None`: the object is to be
    /// removed (its last finalizer went while it was being deleted).
    fn prepare_update(
        &self,
        kind: &ResourceKind,
        old: &Value,
        mut new: Value,
        sub: Sub,
        manager: &str,
        applied: bool,
    ) -> Result<Option<Value>, ApiError> {
        check_type(kind, &mut new)?;
        let name = meta_str(old, "name").unwrap_or_default().to_string();
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if kind.namespaced
            && let Some(n) = meta_str(&new, "namespace")
            && !n.is_empty()
            && Some(n) != meta_str(old, "namespace")
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut next = match sub {
            Sub::Status => {
                let mut next = old.clone();
                match new.get("status") {
                    Some(s) => next["status"] = s.clone(),
                    None => {
                        if let Some(m) = next.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                if applied {
                    next["metadata"]["managedFields"] = new["metadata"]["managedFields"].clone();
                }
                next
            }
            Sub::Main => {
                if kind.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                new
            }
        };
        super::schema::normalize(kind, &mut next)?;
        let meta = next["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        meta.insert("name".into(), Value::String(name.clone()));
        for field in [
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
        ] {
            match old["metadata"].get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        if kind.generation {
            let old_gen = old["metadata"]["generation"].as_i64().unwrap_or(1);
            let changed = !same_spec_content(kind, old, &next);
            next["metadata"]["generation"] = json!(if changed { old_gen + 1 } else { old_gen });
        }
        if !applied {
            track_update(
                Some(old),
                &mut next,
                manager,
                kind.builtin,
                part(kind, sub),
                &kind.api_version(),
                sub_name(sub),
            );
        }
        validate(kind, &next)?;
        let deleting = meta_str(&next, "deletionTimestamp").is_some();
        let finalizers_left = next["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if deleting && !finalizers_left {
            return Ok(None);
        }
        if deleting
            && let (Some(new_f), old_f) = (
                next["metadata"]["finalizers"].as_array(),
                old["metadata"]["finalizers"].as_array(),
            )
            && new_f.iter().any(|f| !old_f.is_some_and(|o| o.contains(f)))
        {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{name}\" is forbidden: no new finalizers can be added if the object is being deleted",
                    kind.resource_name()
                ),
            ));
        }
        Ok(Some(next))
    }

    /// Stores a prepared update (or the removal it implies); a no-op update returns the old
    /// object without a new resourceVersion, like the real server.
    fn store_update(
        &self,
        kind: &ResourceKind,
        old: &Arc<Value>,
        next: Option<Value>,
        pre: Precondition,
    ) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = super::store::key_of(old);
        match next {
            Some(next) if same_but_managed(&next, old) && !self.managed_changed(old, &next) => {
                Ok(old.clone())
            }
            Some(next) => self.commit(kind, &ns, &name, pre, Some(next)),
            None => {
                let removed = self.commit(kind, &ns, &name, pre, None)?;
                self.after_removal(kind, &removed);
                Ok(removed)
            }
        }
    }

    fn managed_changed(&self, old: &Value, new: &Value) -> bool {
        let owners = |o: &Value| -> Vec<(Value, Value, Value)> {
            o["metadata"]["managedFields"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            (
                                e["manager"].clone(),
                                e["operation"].clone(),
                                e["fieldsV1"].clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        owners(old) != owners(new)
    }

    /// Replaces an object (PUT); a body resourceVersion is an optimistic-concurrency
    /// precondition (409 Conflict when stale).
    pub(crate) fn update(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        body: Value,
        sub: Sub,
        manager: &str,
    ) -> Result<Arc<Value>, ApiError> {
        if let Some(stored) = self.stored_as(kind) {
            let mut body = body;
            check_type(kind, &mut body)?;
            return self.update(&stored, ns, name, kind.to_stored(body), sub, manager);
        }
        let client_rv = meta_str(&body, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let client_rv = match client_rv {
            Some(s) => Some(
                s.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?,
            ),
            None => None,
        };
        for _ in 0..RETRIES {
            let old = self.get_object(kind, ns, name)?;
            if client_rv.is_some_and(|rv| rv != object_rv(&old)) {
                return Err(ApiError::conflict(&kind.resource_name(), name));
            }
            let next = self.prepare_update(kind, &old, body.clone(), sub, manager, false)?;
            match self.store_update(
                kind,
                &old,
                next,
                Precondition::ResourceVersion(object_rv(&old)),
            ) {
                Err(e) if e.reason == "Conflict" && client_rv.is_none() => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(&kind.resource_name(), name))
    }

    /// Applies a PATCH of any type; server-side apply creates a missing object.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        body: &[u8],
        patch_type: PatchType,
        sub: Sub,
        manager: &str,
        force: bool,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let applied_config = match patch_type {
            PatchType::Apply => Some(patch::parse_apply_body(body)?),
            _ => None,
        };
        let stored_as = self.stored_as(kind);
        let storage = stored_as.as_deref().unwrap_or(kind);
        for _ in 0..RETRIES {
            let old = match (self.store.get(&Self::key(kind), ns, name), &applied_config) {
                (Some(o), _) => o,
                (None, Some(config)) if sub == Sub::Main => {
                    let created = self.apply_create(kind, ns, name, config, manager)?;
                    return Ok((created, true));
                }
                (None, _) => return Err(ApiError::not_found(&kind.resource_name(), name)),
            };
            let served = match kind.from_stored(&old) {
                Some(converted) => Arc::new(converted),
                None => old.clone(),
            };
            let (patched, applied) = match &applied_config {
                Some(config) => (
                    self.apply_to(kind, Some(&served), config, sub, manager, force)?,
                    true,
                ),
                None => (
                    patch::patch(&served, body, patch_type, kind.builtin)?,
                    false,
                ),
            };
            let patched = kind.to_stored(patched);
            // A resourceVersion the client put in the body (a merge or strategic patch's
            // `metadata`, a JSON patch op setting it, an apply configuration's) is a
            // precondition, as in the real server's update: a different stored version is a
            // 409 Conflict. An empty or removed one makes the write unconditional.
            let client_rv = match &applied_config {
                Some(config) => meta_str(config, "resourceVersion"),
                None => meta_str(&patched, "resourceVersion"),
            };
            if client_rv.is_some_and(|rv| !rv.is_empty() && rv != object_rv(&old).to_string()) {
                return Err(ApiError::conflict(&kind.resource_name(), name));
            }
            let next = self.prepare_update(storage, &old, patched, sub, manager, applied)?;
            match self.store_update(
                storage,
                &old,
                next,
                Precondition::ResourceVersion(object_rv(&old)),
            ) {
                Err(e) if e.reason == "Conflict" => continue,
                Ok(o) => return Ok((o, false)),
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::conflict(&kind.resource_name(), name))
    }

    /// Internal read-modify-write of the main resource by a simulated controller: `f` edits
    /// a copy and returns whether to store it.
    pub(crate) fn modify(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        manager: &str,
        f: impl Fn(&mut Value) -> bool,
    ) -> Result<Arc<Value>, ApiError> {
        self.modify_part(kind, ns, name, manager, Sub::Main, f)
    }

    /// Like [`Self::modify`] for a given subresource.
    pub(crate) fn modify_part(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        manager: &str,
        sub: Sub,
        f: impl Fn(&mut Value) -> bool,
    ) -> Result<Arc<Value>, ApiError> {
        for _ in 0..RETRIES {
            let old = self.get_object(kind, ns, name)?;
            let mut new = (*old).clone();
            if !f(&mut new) {
                return Ok(old);
            }
            let next = self.prepare_update(kind, &old, new, sub, manager, false)?;
            match self.store_update(
                kind,
                &old,
                next,
                Precondition::ResourceVersion(object_rv(&old)),
            ) {
                Err(e) if e.reason == "Conflict" => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(&kind.resource_name(), name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_but_managed_ignores_only_managed_fields_and_resource_version() {
        let a = json!({"kind": "K", "metadata": {"name": "a", "resourceVersion": "1",
            "managedFields": [{"manager": "x"}]}, "spec": {"n": 1}});
        let mut b = a.clone();
        b["metadata"]["resourceVersion"] = json!("2");
        b["metadata"]["managedFields"] = json!([]);
        assert!(same_but_managed(&a, &b));
        b["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert!(same_but_managed(&a, &b));
        let mut c = b.clone();
        c["metadata"]["labels"] = json!({"l": "v"});
        assert!(!same_but_managed(&a, &c));
        let mut d = b.clone();
        d["spec"]["n"] = json!(2);
        assert!(!same_but_managed(&a, &d));
        let mut e = b.clone();
        e["status"] = json!({});
        assert!(!same_but_managed(&a, &e));
        let mut f = a.clone();
        f["metadata"].as_object_mut().unwrap().remove("name");
        assert!(!same_but_managed(&a, &f));
    }
}
