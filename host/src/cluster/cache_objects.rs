//! The host cache as plugins read it through the `get`/`list` imports: only the kinds the
//! plugin was given, and only objects in the namespaces its policy grants. The imports bound
//! the arguments (lengths; the selector's size is bounded by its parser) before they get
//! here; lists match on a snapshot of the cache, never under its lock; errors show the
//! plugin's text capped and escaped. [`CallObjects`] is the same access for one call,
//! remembering what the call read and at which resourceVersion: its writes to those objects
//! are fenced with the versions it saw.

use super::{CachedObject, KindCache, ObjKey};
use crate::contract::ObjectSource;
use crate::contract::selector::LabelSelector;
use crate::contract::text::shown_max;
use crate::contract::{KindRef, ObjectRef};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Which namespaces' objects may be read (`None`: cluster-scoped objects); the policy's
/// namespace grant, given by whoever scopes the access, so the caches need not know policies.
pub type NamespaceFilter = Arc<dyn Fn(Option<&str>) -> bool + Send + Sync>;

/// Read access to some kinds' caches.
pub struct CacheObjects {
    caches: HashMap<KindRef, Arc<KindCache>>,
    namespaces: NamespaceFilter,
}

impl CacheObjects {
    /// Access to exactly these caches, in every namespace.
    pub fn new(caches: impl IntoIterator<Item = Arc<KindCache>>) -> Self {
        Self::scoped(caches, Arc::new(|_| true))
    }

    /// Access to these caches, only to objects in the namespaces `namespaces` allows.
    pub fn scoped(
        caches: impl IntoIterator<Item = Arc<KindCache>>,
        namespaces: NamespaceFilter,
    ) -> Self {
        CacheObjects {
            caches: caches.into_iter().map(|c| (c.kind().clone(), c)).collect(),
            namespaces,
        }
    }

    fn allows(&self, namespace: Option<&str>) -> bool {
        (self.namespaces)(namespace)
    }

    fn check_namespace(&self, namespace: Option<&str>) -> Result<(), String> {
        match namespace {
            Some(ns) if !self.allows(Some(ns)) => Err(format!(
                "namespace {} is not granted to this plugin",
                shown_max(ns, 64)
            )),
            _ => Ok(()),
        }
    }

    fn cache(&self, kind: &KindRef) -> Result<&KindCache, String> {
        self.caches.get(kind).map(Arc::as_ref).ok_or_else(|| {
            format!(
                "reading {} is not granted to this plugin",
                shown_max(&kind.to_string(), 128)
            )
        })
    }

    /// One cached object a `get` may return.
    fn get_cached(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<CachedObject>>, String> {
        let cache = self.cache(kind)?;
        self.check_namespace(namespace)?;
        if !self.allows(namespace) {
            return Ok(None);
        }
        Ok(cache.get(&ObjKey::new(namespace, name)))
    }

    /// The cached objects a `list` may return.
    fn list_cached(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<CachedObject>>, String> {
        let selector =
            LabelSelector::parse(label_selector.unwrap_or("")).map_err(|e| e.to_string())?;
        let cache = self.cache(kind)?;
        self.check_namespace(namespace)?;
        let mut items = cache.list(namespace, &selector);
        items.retain(|o| self.allows(o.key.namespace.as_deref()));
        Ok(items)
    }
}

impl ObjectSource for CacheObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        Ok(self
            .get_cached(kind, namespace, name)?
            .map(|o| o.json.clone()))
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String> {
        let items = self.list_cached(kind, namespace, label_selector)?;
        Ok(items.iter().map(|o| o.json.clone()).collect())
    }
}

/// One call's read access to the caches: what [`CacheObjects`] allows, and a record of every
/// object the call was handed, in order (shared entries of the cache: recording costs a
/// reference count per object).
pub struct CallObjects {
    objects: Arc<CacheObjects>,
    reads: Mutex<Vec<(KindRef, Vec<Arc<CachedObject>>)>>,
}

impl CallObjects {
    /// A fresh record of one call's reads through `objects`.
    pub fn new(objects: Arc<CacheObjects>) -> Self {
        CallObjects {
            objects,
            reads: Mutex::default(),
        }
    }

    fn record(&self, kind: &KindRef, objects: Vec<Arc<CachedObject>>) {
        if !objects.is_empty() {
            self.reads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((kind.clone(), objects));
        }
    }

    /// The distinct objects the call was handed, in the order first read, as
    /// `Kind namespace/name@resourceVersion` (at most `max` of them), and how many there were.
    pub fn summary(&self, max: usize) -> (Vec<String>, usize) {
        let reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashSet::new();
        let mut shown = Vec::new();
        for (kind, objects) in reads.iter() {
            for o in objects {
                if seen.insert((kind.kind.as_str(), &o.key)) && shown.len() < max {
                    shown.push(format!("{} {}@{}", kind.kind, o.key, o.resource_version));
                }
            }
        }
        (shown, seen.len())
    }

    /// The resourceVersion at which the call first read each of `wanted` (objects it never
    /// read are absent). The first read counts: a decision taken on it is stale once the
    /// object moved past it, whatever the call read later. One pass over the reads.
    pub fn first_versions(&self, wanted: &[&ObjectRef]) -> HashMap<ObjectRef, String> {
        let mut out = HashMap::new();
        if wanted.is_empty() {
            return out;
        }
        let mut left: HashSet<(&str, &str, Option<&str>, &str)> = wanted
            .iter()
            .map(|o| {
                (
                    o.api_version.as_str(),
                    o.kind.as_str(),
                    o.namespace.as_deref(),
                    o.name.as_str(),
                )
            })
            .collect();
        let reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        for (kind, objects) in reads.iter() {
            for o in objects {
                let at = (
                    kind.api_version.as_str(),
                    kind.kind.as_str(),
                    o.key.namespace.as_deref(),
                    o.key.name.as_str(),
                );
                if left.remove(&at) {
                    let object = ObjectRef {
                        api_version: kind.api_version.clone(),
                        kind: kind.kind.clone(),
                        namespace: o.key.namespace.clone(),
                        name: o.key.name.clone(),
                    };
                    out.insert(object, o.resource_version.clone());
                    if left.is_empty() {
                        return out;
                    }
                }
            }
        }
        out
    }
}

impl ObjectSource for CallObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        let found = self.objects.get_cached(kind, namespace, name)?;
        let json = found.as_ref().map(|o| o.json.clone());
        self.record(kind, found.into_iter().collect());
        Ok(json)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String> {
        let items = self.objects.list_cached(kind, namespace, label_selector)?;
        let json = items.iter().map(|o| o.json.clone()).collect();
        self.record(kind, items);
        Ok(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::CacheWriter;

    fn pod(name: &str, rv: &str) -> CachedObject {
        CachedObject {
            key: ObjKey::new(Some("ns"), name),
            json: format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#).into(),
            resource_version: rv.into(),
            labels: [("app".to_string(), "web".to_string())].into(),
            controller: None,
            manager: None,
        }
    }

    fn reference(name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[test]
    fn a_call_remembers_the_version_it_first_read_of_each_object() {
        let kind = KindRef::new("v1", "Pod");
        let mut writer = CacheWriter::new(kind.clone());
        writer.replace_all(vec![pod("a", "1"), pod("b", "2")]);
        let objects = Arc::new(CacheObjects::new([writer.reader()]));
        let call = CallObjects::new(objects);
        assert!(call.get(&kind, Some("ns"), "a").unwrap().is_some());
        // The cache moves on during the call; the call read `a` at 1 first.
        writer.upsert(pod("a", "5"));
        assert_eq!(call.list(&kind, None, Some("app=web")).unwrap().len(), 2);
        assert!(call.get(&kind, Some("ns"), "missing").unwrap().is_none());
        let (a, b, c) = (reference("a"), reference("b"), reference("c"));
        let seen = call.first_versions(&[&a, &b, &c]);
        assert_eq!(seen.get(&a).map(String::as_str), Some("1"));
        assert_eq!(seen.get(&b).map(String::as_str), Some("2"));
        assert!(!seen.contains_key(&c), "never read");
        let other_kind = ObjectRef {
            kind: "ConfigMap".into(),
            ..reference("a")
        };
        assert!(call.first_versions(&[&other_kind]).is_empty());
        // A fresh call has read nothing.
        let fresh = CallObjects::new(Arc::new(CacheObjects::new([writer.reader()])));
        assert!(fresh.first_versions(&[&a]).is_empty());
    }
}
