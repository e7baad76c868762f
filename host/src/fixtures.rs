//! Objects from manifest files, readable by plugins through the `get`/`list` imports: what
//! `kubeplug eval --cache DIR` and `kubeplug test` give a plugin instead of the live cluster
//! cache. They are kept in the host's own [`KindCache`]s and read through its
//! [`CacheObjects`], so `eval` and `run` filter by kind, namespace and label selector with the
//! same code ([`FixtureObjects::access`] with the plugin's readable kinds and namespace grant).

use crate::cluster::{CacheObjects, CacheWriter, CachedObject, KindCache, NamespaceFilter};
use crate::contract::KindRef;
use crate::manifest::{self, ManifestError};
use crate::plugin::ObjectSource;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

type Key = (KindRef, Option<String>, String);

/// Objects keyed by kind, namespace and name, and the caches plugins read them from.
#[derive(Default)]
pub struct FixtureObjects {
    objects: BTreeMap<Key, Value>,
    caches: HashMap<KindRef, CacheWriter>,
}

impl std::fmt::Debug for FixtureObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureObjects")
            .field("objects", &self.objects.len())
            .finish()
    }
}

impl FixtureObjects {
    /// Loads every `.yaml`, `.yml` and `.json` file in `dir` (not recursive).
    pub fn from_dir(dir: &Path) -> Result<Self, ManifestError> {
        let read_err = |source| ManifestError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        paths.sort();
        let mut fixtures = FixtureObjects::default();
        for path in paths {
            for object in manifest::read_file(&path)? {
                fixtures.insert(object);
            }
        }
        Ok(fixtures)
    }

    /// Every object, in key order.
    pub fn objects(&self) -> impl Iterator<Item = &Value> {
        self.objects.values()
    }

    /// Adds one object (managedFields stripped), replacing one of the same key.
    pub fn insert(&mut self, mut object: Value) {
        crate::cluster::strip_managed_fields(&mut object);
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let kind = KindRef::new(
            &s("/apiVersion").unwrap_or_default(),
            &s("/kind").unwrap_or_default(),
        );
        let key = (
            kind.clone(),
            s("/metadata/namespace"),
            s("/metadata/name").unwrap_or_default(),
        );
        // An object whose metadata the API's types refuse is kept for `objects()` but not
        // readable, as the watch would not have delivered it.
        if let Ok(watched) = serde_json::from_value(object.clone()) {
            self.caches
                .entry(kind.clone())
                .or_insert_with(|| CacheWriter::new(kind))
                .upsert(CachedObject::from_watched(watched));
        }
        self.objects.insert(key, object);
    }

    /// The kinds the fixtures hold.
    pub fn kinds(&self) -> Vec<KindRef> {
        self.caches.keys().cloned().collect()
    }

    /// The caches of `kinds`, those without fixtures empty.
    fn caches(&self, kinds: &[KindRef]) -> Vec<Arc<KindCache>> {
        kinds
            .iter()
            .map(|kind| match self.caches.get(kind) {
                Some(writer) => writer.reader(),
                None => KindCache::empty(kind.clone()),
            })
            .collect()
    }

    /// What a plugin that may read `readable` in the namespaces `namespaces` allows is handed,
    /// through the same access `kubeplug run` gives it to its caches.
    pub fn access(&self, readable: &[KindRef], namespaces: NamespaceFilter) -> CacheObjects {
        CacheObjects::scoped(self.caches(readable), namespaces)
    }

    /// Every kind with fixtures, readable in every namespace; other kinds are empty.
    fn everything(&self, also: &KindRef) -> CacheObjects {
        let mut kinds: Vec<KindRef> = self.caches.keys().cloned().collect();
        if !kinds.contains(also) {
            kinds.push(also.clone());
        }
        CacheObjects::new(self.caches(&kinds))
    }
}

/// Without a plugin's grants (`kubeplug test`'s cases, the fault engine): every kind the
/// fixtures hold, in every namespace, by the host's filtering code.
impl ObjectSource for FixtureObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        self.everything(kind).get(kind, namespace, name)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String> {
        self.everything(kind).list(kind, namespace, label_selector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gets_and_lists_by_kind_namespace_and_labels() {
        let mut f = FixtureObjects::default();
        for (ns, name, app) in [("a", "x", "web"), ("a", "y", "db"), ("b", "z", "web")] {
            f.insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}}));
        }
        let pod = KindRef::new("v1", "Pod");
        assert!(f.get(&pod, Some("a"), "x").unwrap().is_some());
        assert!(f.get(&pod, Some("b"), "x").unwrap().is_none());
        assert_eq!(f.list(&pod, None, None).unwrap().len(), 3);
        assert_eq!(f.list(&pod, Some("a"), None).unwrap().len(), 2);
        assert_eq!(f.list(&pod, None, Some("app=web")).unwrap().len(), 2);
        assert!(
            f.list(&KindRef::deployment(), None, None)
                .unwrap()
                .is_empty()
        );
        assert!(f.list(&pod, None, Some("app in web")).is_err());
    }

    #[test]
    fn a_plugins_access_is_its_readable_kinds_in_its_granted_namespaces() {
        let mut f = FixtureObjects::default();
        for (ns, name) in [("a", "x"), ("b", "y")] {
            f.insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": ns, "name": name}}));
        }
        let pod = KindRef::new("v1", "Pod");
        let only_a: NamespaceFilter = Arc::new(|ns| ns == Some("a"));
        let access = f.access(&[pod.clone(), KindRef::deployment()], only_a);
        assert_eq!(access.list(&pod, None, None).unwrap().len(), 1);
        assert!(
            access.get(&pod, Some("b"), "y").is_err(),
            "b is not granted"
        );
        assert!(
            access
                .list(&KindRef::deployment(), None, None)
                .unwrap()
                .is_empty()
        );
        let secret = KindRef::new("v1", "Secret");
        assert!(access.get(&secret, Some("a"), "s").is_err(), "not readable");
    }
}
