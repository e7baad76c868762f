//! The plugin's world offline: the reconciled object and the objects it reads, as a map the
//! plugin's writes are applied to as the API server would apply them (patches through the
//! embedded API server's own patch code, creates with generated names, deletes).

use crate::contract::{Action, ObjectRef, PatchType};
use serde_json::Value;
use std::collections::BTreeMap;

/// An object's identity: apiVersion, kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl Key {
    /// The key of an object or manifest (name empty for a `generateName` manifest).
    pub fn of(object: &Value) -> Self {
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Key {
            api_version: s("/apiVersion").unwrap_or_default(),
            kind: s("/kind").unwrap_or_default(),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name").unwrap_or_default(),
        }
    }

    /// The key an action's target names.
    pub fn of_ref(r: &ObjectRef) -> Self {
        Key {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

impl std::fmt::Display for Key {
    /// `Kind namespace/name`, as a plugin author reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Why a write could not be applied: the API server would have refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The patch body does not apply to the object.
    #[error("its patch of {target} was refused: {why}")]
    Patch {
        /// The object patched.
        target: Key,
        /// The API server's reason.
        why: String,
    },
    /// A manifest without a name or generateName.
    #[error("it created a {kind} with neither metadata.name nor metadata.generateName")]
    Unnamed {
        /// The manifest's kind.
        kind: String,
    },
    /// This build has no patch code to apply patches with.
    #[cfg_attr(feature = "embedded", allow(dead_code))]
    #[error("applying patches offline needs the embedded API server (cargo feature `embedded`)")]
    NoPatchCode,
}

/// What one write did to the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The object changed (patched or deleted).
    Changed(Key),
    /// The write changed nothing: a patch to the same content, a patch or delete of an
    /// object that is gone (the host treats NotFound as done).
    Unchanged(Key),
    /// A new object; `generate_name` is the prefix when the name was generated.
    Created {
        /// The object made.
        key: Key,
        /// The `generateName` prefix it was made from, if any.
        generate_name: Option<String>,
    },
    /// A create of a name that exists (AlreadyExists, which the host treats as done).
    AlreadyExists(Key),
}

impl Effect {
    /// Whether the world changed.
    pub fn changed(&self) -> bool {
        matches!(self, Effect::Changed(_) | Effect::Created { .. })
    }
}

/// Characters the API server appends to a `generateName` prefix.
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The objects, with the counters that make resourceVersions and generated names.
#[derive(Debug, Clone, Default)]
pub struct World {
    objects: BTreeMap<Key, Value>,
    next_version: u64,
    /// How many names each (kind, namespace, prefix) has generated: the n-th name of a
    /// prefix is the same in every run, so a duplicate shows as an extra object.
    generated: BTreeMap<(String, Option<String>, String), u64>,
}

impl World {
    /// A world of these objects (a later one of the same key replaces an earlier one).
    pub fn new(objects: impl IntoIterator<Item = Value>) -> Self {
        let mut world = World::default();
        for object in objects {
            world.put(object);
        }
        world
    }

    /// The object of `key`, if it exists.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Every object, by key.
    pub fn objects(&self) -> &BTreeMap<Key, Value> {
        &self.objects
    }

    /// Stores `object` with a new resourceVersion.
    fn put(&mut self, mut object: Value) -> Key {
        self.next_version += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                self.next_version.to_string().into(),
            );
        }
        let key = Key::of(&object);
        self.objects.insert(key.clone(), object);
        key
    }

    /// Applies one action: `None` for actions that write nothing (events, logs, requeues).
    /// `default_namespace` is given to a namespaced create without one.
    pub fn apply(
        &mut self,
        action: &Action,
        default_namespace: Option<&str>,
    ) -> Option<Result<Effect, WriteError>> {
        Some(match action {
            Action::Patch {
                target,
                patch_type,
                subresource,
                body,
            } => self.patch(target, *patch_type, subresource.as_deref(), body),
            Action::Create { manifest } => self.create(manifest, default_namespace),
            Action::Delete { target } => {
                let key = Key::of_ref(target);
                Ok(match self.objects.remove(&key) {
                    Some(_) => Effect::Changed(key),
                    None => Effect::Unchanged(key),
                })
            }
            Action::Event { .. } | Action::Log { .. } | Action::RequeueAfter { .. } => {
                return None;
            }
        })
    }

    fn patch(
        &mut self,
        target: &ObjectRef,
        patch_type: PatchType,
        subresource: Option<&str>,
        body: &Value,
    ) -> Result<Effect, WriteError> {
        let key = Key::of_ref(target);
        let Some(current) = self.objects.get(&key) else {
            return Ok(Effect::Unchanged(key));
        };
        let patched = apply_patch(current, body, patch_type, &key)?;
        let next = match subresource {
            // A status patch changes the status only; a scale patch, the replicas.
            Some("status") => {
                let mut next = current.clone();
                next["status"] = patched.get("status").cloned().unwrap_or(Value::Null);
                next
            }
            Some(_) => {
                let mut next = current.clone();
                if let Some(replicas) = patched.pointer("/spec/replicas") {
                    next["spec"]["replicas"] = replicas.clone();
                }
                next
            }
            None => patched,
        };
        if comparable(&next) == comparable(current) {
            return Ok(Effect::Unchanged(key));
        }
        self.put(next);
        Ok(Effect::Changed(key))
    }

    fn create(
        &mut self,
        manifest: &Value,
        default_namespace: Option<&str>,
    ) -> Result<Effect, WriteError> {
        let mut object = manifest.clone();
        let mut key = Key::of(&object);
        if key.namespace.is_none()
            && let Some(ns) = default_namespace
            && !super::super::eval::CLUSTER_SCOPED.contains(&key.kind.as_str())
        {
            object["metadata"]["namespace"] = ns.into();
            key.namespace = Some(ns.to_string());
        }
        let prefix = object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .map(str::to_string);
        let generate_name = match (key.name.is_empty(), prefix) {
            (false, _) => None,
            (true, Some(prefix)) => {
                let counter = self
                    .generated
                    .entry((key.kind.clone(), key.namespace.clone(), prefix.clone()))
                    .or_default();
                key.name = format!("{prefix}{}", suffix(*counter));
                *counter += 1;
                object["metadata"]["name"] = key.name.clone().into();
                Some(prefix)
            }
            (true, None) => return Err(WriteError::Unnamed { kind: key.kind }),
        };
        if self.objects.contains_key(&key) {
            return Ok(Effect::AlreadyExists(key));
        }
        let key = self.put(object);
        Ok(Effect::Created { key, generate_name })
    }

    /// The objects as compared between runs: without resourceVersions.
    pub fn comparable(&self) -> BTreeMap<Key, Value> {
        self.objects
            .iter()
            .map(|(k, v)| (k.clone(), comparable(v)))
            .collect()
    }
}

/// The five characters generated for the `n`-th name of a prefix.
fn suffix(mut n: u64) -> String {
    let base = NAME_CHARS.len() as u64;
    let mut out = [NAME_CHARS[0]; 5];
    for slot in out.iter_mut().rev() {
        *slot = NAME_CHARS[(n % base) as usize];
        n /= base;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An object without the fields the API server sets on every write.
pub fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    object
}

#[cfg(feature = "embedded")]
fn apply_patch(
    current: &Value,
    body: &Value,
    patch_type: PatchType,
    key: &Key,
) -> Result<Value, WriteError> {
    let builtin = kubeplug_sim::Registry::builtin()
        .by_type(&key.api_version, &key.kind)
        .is_some_and(|kind| kind.builtin);
    let refused = |why: String| WriteError::Patch {
        target: key.clone(),
        why,
    };
    let bytes = serde_json::to_vec(body).map_err(|e| refused(e.to_string()))?;
    if patch_type == PatchType::Apply {
        // Server-side apply of a plugin's own fields: a merge of the applied configuration.
        let mut doc = current.clone();
        merge(&mut doc, body);
        return Ok(doc);
    }
    kubeplug_sim::patch::patch(current, &bytes, patch_type, builtin)
        .map_err(|e| refused(e.message.clone()))
}

#[cfg(not(feature = "embedded"))]
fn apply_patch(
    _current: &Value,
    _body: &Value,
    _patch_type: PatchType,
    _key: &Key,
) -> Result<Value, WriteError> {
    Err(WriteError::NoPatchCode)
}

/// An RFC 7386 merge of `patch` into `doc`.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
fn merge(doc: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Default::default());
    }
    let Value::Object(target) = doc else {
        return;
    };
    for (name, value) in fields {
        if value.is_null() {
            target.remove(name);
        } else {
            merge(target.entry(name.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "nginx"}]}}}})
    }

    fn target() -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    fn patch(patch_type: PatchType, subresource: Option<&str>, body: Value) -> Action {
        Action::Patch {
            target: target(),
            patch_type,
            subresource: subresource.map(str::to_string),
            body,
        }
    }

    #[test]
    fn patches_apply_as_the_api_server_applies_them_and_a_repeat_changes_nothing() {
        let mut world = World::new([deployment()]);
        let key = Key::of(&deployment());
        let label = patch(
            PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"a": "b"}}}),
        );
        assert_eq!(
            world.apply(&label, None),
            Some(Ok(Effect::Changed(key.clone())))
        );
        assert_eq!(
            world.apply(&label, None),
            Some(Ok(Effect::Unchanged(key.clone())))
        );
        let image = patch(
            PatchType::Strategic,
            None,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}}}),
        );
        world.apply(&image, None).unwrap().unwrap();
        let now = world.get(&key).unwrap();
        assert_eq!(
            now.pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("nginx:1.25"))
        );
        assert_eq!(now.pointer("/metadata/labels/a"), Some(&json!("b")));
        // A JSON patch that appends grows the list on every application.
        let append = patch(
            PatchType::Json,
            None,
            json!([{"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "x"}}]),
        );
        assert!(world.apply(&append, None).unwrap().unwrap().changed());
        assert!(world.apply(&append, None).unwrap().unwrap().changed());
        // A status patch changes the status and nothing else.
        let status = patch(
            PatchType::Merge,
            Some("status"),
            json!({"status": {"ready": 1}, "spec": {"replicas": 9}}),
        );
        world.apply(&status, None).unwrap().unwrap();
        let now = world.get(&key).unwrap();
        assert_eq!(now.pointer("/status/ready"), Some(&json!(1)));
        assert_eq!(now.pointer("/spec/replicas"), Some(&json!(1)));
        // A bad JSON patch is refused, naming the object.
        let bad = patch(
            PatchType::Json,
            None,
            json!([{"op": "remove", "path": "/spec/nothing"}]),
        );
        let err = world.apply(&bad, None).unwrap().unwrap_err();
        assert!(err.to_string().contains("Deployment shop/web"), "{err}");
    }

    #[test]
    fn creates_generate_the_same_names_in_every_run_and_deletes_of_the_gone_are_done() {
        let child =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"}});
        let create = Action::Create {
            manifest: child.clone(),
        };
        let mut one = World::new([deployment()]);
        let mut two = World::new([deployment()]);
        let first = one.apply(&create, Some("shop")).unwrap().unwrap();
        assert_eq!(first, two.apply(&create, Some("shop")).unwrap().unwrap());
        let Effect::Created { key, generate_name } = first else {
            panic!("{first:?}")
        };
        assert_eq!(generate_name.as_deref(), Some("web-"));
        assert_eq!(key.namespace.as_deref(), Some("shop"));
        assert_eq!(key.name, "web-bbbbb");
        let second = one.apply(&create, Some("shop")).unwrap().unwrap();
        assert!(matches!(second, Effect::Created { ref key, .. } if key.name == "web-bbbbc"));
        assert_eq!(one.objects().len(), 3);
        let named = Action::Create {
            manifest: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-bbbbb", "namespace": "shop"}}),
        };
        assert!(matches!(
            one.apply(&named, None),
            Some(Ok(Effect::AlreadyExists(_)))
        ));
        let delete = Action::Delete {
            target: ObjectRef {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("shop".into()),
                name: "web-bbbbb".into(),
            },
        };
        assert!(one.apply(&delete, None).unwrap().unwrap().changed());
        assert!(!one.apply(&delete, None).unwrap().unwrap().changed());
        let log = Action::Log {
            level: crate::contract::LogLevel::Info,
            message: "x".into(),
        };
        assert_eq!(one.apply(&log, None), None);
    }

    #[test]
    fn resource_versions_are_not_compared() {
        let mut world = World::new([deployment()]);
        let before = world.comparable();
        world.put(deployment());
        assert_eq!(world.comparable(), before);
        assert_ne!(
            world.get(&Key::of(&deployment())).unwrap()["metadata"]["resourceVersion"],
            json!("1")
        );
    }
}
