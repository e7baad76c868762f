//! The object type the watches decode. Objects arrive with managedFields, often half their
//! JSON, which the cache never keeps: decoding them as `DynamicObject` built every entry as
//! typed values, copied the whole object into a `serde_json::Value` and only then dropped
//! them. Here managedFields are skipped while parsing (never built), the rest of the
//! metadata is kept as it came and read once into the typed [`ObjectMeta`] kube's watcher
//! needs, and the cache entry is written from the parsed fields without copying them. Of
//! managedFields only who wrote last is kept ([`WatchedObject::manager`], for the decision
//! ledger's "changed by").

use kube::api::{ApiResource, ObjectMeta};
use kube::core::{DynamicResourceScope, Resource};
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

/// A watched object of any kind, without its managedFields.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedObject {
    /// The typed metadata (what the watcher and the cache's indexes read).
    pub metadata: ObjectMeta,
    /// The metadata as the API server sent it, less managedFields (what the cache keeps).
    pub raw_metadata: Map<String, Value>,
    /// Every other top-level field (apiVersion, kind, spec, status, ...).
    pub rest: Map<String, Value>,
    /// Who wrote this version: the field manager (and subresource) of the newest
    /// managedFields entry, as `kubectl (scale)`.
    pub manager: Option<Arc<str>>,
}

impl WatchedObject {
    /// The object as JSON, managedFields left out: the cache's text.
    pub fn into_json(self) -> Value {
        let mut rest = self.rest;
        rest.insert("metadata".into(), Value::Object(self.raw_metadata));
        Value::Object(rest)
    }
}

impl<'de> Deserialize<'de> for WatchedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = WatchedObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchedObject, A::Error> {
                let mut raw_metadata = Map::new();
                let mut manager = None;
                let mut rest = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" {
                        let parsed = map.next_value::<Metadata>()?;
                        raw_metadata = parsed.fields;
                        manager = parsed.manager;
                    } else {
                        rest.insert(key, map.next_value()?);
                    }
                }
                // Read in place: the raw fields are not copied for the typed view.
                let raw = Value::Object(raw_metadata);
                let metadata = ObjectMeta::deserialize(&raw).map_err(serde::de::Error::custom)?;
                let Value::Object(raw_metadata) = raw else {
                    unreachable!("built as an object above")
                };
                Ok(WatchedObject {
                    metadata,
                    raw_metadata,
                    rest,
                    manager,
                })
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// An object's metadata as JSON, with managedFields skipped but for who wrote last.
struct Metadata {
    fields: Map<String, Value>,
    manager: Option<Arc<str>>,
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Metadata;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object's metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
                let mut fields = Map::new();
                let mut manager = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "managedFields" {
                        manager = map.next_value::<Option<Newest>>()?.and_then(|n| n.0);
                    } else {
                        fields.insert(key, map.next_value()?);
                    }
                }
                Ok(Metadata { fields, manager })
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// The longest manager name kept (the API server allows 128 bytes).
const MAX_MANAGER: usize = 128;
/// The most distinct manager names shared; past it each object holds its own.
const MAX_INTERNED: usize = 4096;

/// The newest of managedFields' entries, as `manager (subresource)`; their fields unparsed.
struct Newest(Option<Arc<str>>);

/// One managedFields entry, but for its fields (skipped).
#[derive(Deserialize)]
struct ManagedEntry {
    #[serde(default)]
    manager: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    time: String,
}

impl<'de> Deserialize<'de> for Newest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Newest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("managedFields entries")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Newest, A::Error> {
                let mut newest: Option<ManagedEntry> = None;
                while let Some(entry) = seq.next_element::<ManagedEntry>()? {
                    if newest.as_ref().is_none_or(|n| entry.time >= n.time) {
                        newest = Some(entry);
                    }
                }
                Ok(Newest(
                    newest
                        .filter(|e| !e.manager.is_empty())
                        .map(|e| intern(manager_text(&e.manager, &e.subresource))),
                ))
            }
        }
        deserializer.deserialize_seq(Entries)
    }
}

/// `manager (subresource)`, each bounded.
fn manager_text(manager: &str, subresource: &str) -> String {
    let manager: String = manager.chars().take(MAX_MANAGER).collect();
    match subresource {
        "" => manager,
        sub => format!("{manager} ({})", sub.chars().take(32).collect::<String>()),
    }
}

/// One shared copy of each manager name (a few per cluster), so a cached object pays a
/// pointer for it.
fn intern(text: String) -> Arc<str> {
    static NAMES: Mutex<Option<HashSet<Arc<str>>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(known) = names.get(text.as_str()) {
        return known.clone();
    }
    let name: Arc<str> = text.into();
    if names.len() < MAX_INTERNED {
        names.insert(name.clone());
    }
    name
}

impl Resource for WatchedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "resourceVersion": "7",
                         "creationTimestamp": "2026-11-26T10:00:00.123456Z",
                         "labels": {"app": "web"}, "x-unknown": [1, 2],
                         "managedFields": [{"manager": "kubectl", "operation": "Update",
                                            "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 2, "template": {"metadata": {"managedFields": "kept"}}},
            "status": {"readyReplicas": 1},
        })
    }

    #[test]
    fn managed_fields_are_skipped_and_everything_else_kept_as_sent() {
        let object: WatchedObject = serde_json::from_value(deployment()).unwrap();
        let mut expected = deployment();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(object.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(object.manager.as_deref(), Some("kubectl"));
        // Unknown metadata fields and timestamps as sent; a nested `managedFields` is data.
        assert_eq!(object.into_json(), expected);
    }

    #[test]
    fn the_newest_managed_fields_entry_names_who_wrote_last() {
        let mut object = deployment();
        object["metadata"]["managedFields"] = json!([
            {"manager": "kubectl-create", "operation": "Update", "time": "2026-11-28T10:00:00Z"},
            {"manager": "kubectl", "operation": "Update", "subresource": "scale",
             "time": "2026-11-28T10:00:02Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "time": "2026-11-28T10:00:01Z"},
        ]);
        let parsed: WatchedObject = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(parsed.manager.as_deref(), Some("kubectl (scale)"));
        object["metadata"]["managedFields"][1]["manager"] = json!("x".repeat(500));
        let parsed: WatchedObject = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(
            parsed.manager.unwrap().len(),
            MAX_MANAGER + " (scale)".len()
        );
        object["metadata"]["managedFields"] = json!(null);
        let parsed: WatchedObject = serde_json::from_value(object).unwrap();
        assert_eq!(parsed.manager, None);
    }

    #[test]
    fn metadata_the_typed_view_refuses_is_an_error_not_a_guess() {
        let mut bad = deployment();
        bad["metadata"]["labels"] = json!("not a map");
        let err = serde_json::from_value::<WatchedObject>(bad).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        assert!(serde_json::from_value::<WatchedObject>(json!([1])).is_err());
    }

    #[test]
    fn an_object_without_metadata_has_empty_metadata() {
        let object: WatchedObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Foo"})).unwrap();
        assert_eq!(object.metadata, ObjectMeta::default());
        assert_eq!(
            object.into_json(),
            json!({"apiVersion": "v1", "kind": "Foo", "metadata": {}})
        );
    }
}
