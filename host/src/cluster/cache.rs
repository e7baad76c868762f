//! The local cache of one kind: objects as JSON text with managedFields stripped, serialised
//! once when the watch delivers them, and handed to every plugin call as shared bytes.
//!
//! One writer, many readers (as kube-runtime's reflector store): the watch task owns the
//! only [`CacheWriter`]; plugins, the router and policies hold `Arc<KindCache>`, which can
//! only read. A relist replaces the whole content under one lock, so a reader sees the old
//! list or the new one, never half of each.

use crate::contract::KindRef;
use crate::contract::selector::LabelSelector;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

/// Namespace (absent for cluster-scoped objects) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ObjKey {
    /// A key from namespace and name.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjKey {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The controller owner of an object (`ownerReferences` with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's kind.
    pub kind: KindRef,
    /// The owner's name (in the object's namespace).
    pub name: String,
}

/// One cached object: its JSON and what routing and selection need without parsing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// Namespace and name.
    pub key: ObjKey,
    /// The object as JSON, managedFields stripped.
    pub json: Arc<str>,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.labels`, for selectors.
    pub labels: BTreeMap<String, String>,
    /// Its controller owner, for routing to the owner's key.
    pub controller: Option<OwnerRef>,
    /// Who wrote this version (the newest managedFields entry's manager), shared text.
    pub manager: Option<Arc<str>>,
}

impl CachedObject {
    /// Builds the cache entry from a watched object (its managedFields never parsed), and
    /// serialises it once.
    pub fn from_watched(object: super::WatchedObject) -> Self {
        let meta = &object.metadata;
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| OwnerRef {
                kind: KindRef::new(&o.api_version, &o.kind),
                name: o.name.clone(),
            });
        let key = ObjKey::new(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let resource_version = meta.resource_version.clone().unwrap_or_default();
        let labels = meta.labels.clone().unwrap_or_default();
        let manager = object.manager.clone();
        CachedObject {
            key,
            manager,
            json: object.into_json().to_string().into(),
            resource_version,
            labels,
            controller,
        }
    }
}

/// What happened to a cached object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// It was not cached before.
    Added,
    /// Its resourceVersion changed.
    Changed,
    /// It is gone.
    Deleted,
}

/// A change the watch saw, for the router. `object` is the new state, or the last known
/// state of a deleted object (so its owner can still be found).
#[derive(Debug, Clone)]
pub struct Change {
    /// The cache's kind.
    pub kind: KindRef,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (before it, for a deletion).
    pub object: Arc<CachedObject>,
    /// The object before a change (`None` for an addition or a deletion).
    pub previous: Option<Arc<CachedObject>>,
}

/// All cached objects of one kind, read-only: changes go through its [`CacheWriter`]s, one
/// per watch filling it (one cluster-wide watch, or one per namespace).
pub struct KindCache {
    kind: KindRef,
    objects: RwLock<HashMap<ObjKey, Arc<CachedObject>>>,
    synced: watch::Sender<bool>,
    /// The scopes written into it (`None`: every namespace), and whether each has listed.
    scopes: Mutex<HashMap<Option<String>, bool>>,
    /// The highest (numeric) resourceVersion each scope's watch has delivered into the cache:
    /// every change up to it is in (see [`KindCache::seen`]).
    seen: Mutex<HashMap<Option<String>, u64>>,
    /// Held while a watch changes the cache and sends the changes, and while a plugin joins
    /// the router's feed ([`feed`](super::feed)): the two never interleave.
    order: Mutex<()>,
}

/// A handle that changes a cache within its scope (every namespace, or one); owned by one
/// watch task (not `Clone`).
pub struct CacheWriter {
    cache: Arc<KindCache>,
    scope: Option<String>,
}

impl CacheWriter {
    /// An empty, not yet synced cache of `kind`, and its writer for every namespace.
    pub fn new(kind: KindRef) -> Self {
        let cache = KindCache::empty(kind);
        CacheWriter::scoped(&cache, None)
    }

    /// A writer of `cache` for the objects of `namespace` only (`None`: all of them). The
    /// cache is synced once each of its writers has listed (and stays synced when a writer
    /// is added later: the new scope's objects arrive as additions).
    pub fn scoped(cache: &Arc<KindCache>, namespace: Option<String>) -> Self {
        cache.lock_scopes().insert(namespace.clone(), false);
        CacheWriter {
            cache: cache.clone(),
            scope: namespace,
        }
    }

    fn in_scope(&self, key: &ObjKey) -> bool {
        self.scope.is_none() || key.namespace == self.scope
    }

    /// A reader of the cache.
    pub fn reader(&self) -> Arc<KindCache> {
        self.cache.clone()
    }

    /// Records that the watch has delivered every change up to `resource_version` (a
    /// deletion's, or an object's as it is stored). Versions that are not numbers are not
    /// compared, so not recorded.
    pub fn observed(&self, resource_version: &str) {
        if let Ok(rv) = resource_version.parse::<u64>() {
            let mut seen = self.cache.lock_seen();
            let mark = seen.entry(self.scope.clone()).or_default();
            *mark = (*mark).max(rv);
        }
    }

    /// Stores an object; returns the change, or `None` when its resourceVersion is unchanged.
    pub fn upsert(&mut self, object: CachedObject) -> Option<Change> {
        let cache = &*self.cache;
        let mut objects = cache.write();
        let change = match objects.get(&object.key) {
            Some(old) if old.resource_version == object.resource_version => return None,
            Some(_) => ChangeType::Changed,
            None => ChangeType::Added,
        };
        let object = Arc::new(object);
        let previous = objects.insert(object.key.clone(), object.clone());
        drop(objects);
        self.observed(&object.resource_version);
        Some(Change {
            kind: cache.kind.clone(),
            change,
            object,
            previous,
        })
    }

    /// Forgets an object; returns the deletion with its last known state.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Change> {
        let old = self.cache.write().remove(key)?;
        Some(Change {
            kind: self.cache.kind.clone(),
            change: ChangeType::Deleted,
            object: old,
            previous: None,
        })
    }

    /// Replaces everything after a (re)list, atomically: readers see the old content or the
    /// new, never a mix. Returns the deletions of objects the list no longer has, then the
    /// additions and changes, and marks the cache synced. The list was taken at the newest
    /// version it holds or later, so the watch has delivered every change up to it.
    pub fn replace_all(&mut self, fresh: Vec<CachedObject>) -> Vec<Change> {
        let newest = fresh
            .iter()
            .filter_map(|o| o.resource_version.parse::<u64>().ok())
            .max();
        let cache = &*self.cache;
        let mut next: HashMap<ObjKey, Arc<CachedObject>> = HashMap::with_capacity(fresh.len());
        for object in fresh {
            next.insert(object.key.clone(), Arc::new(object));
        }
        let change =
            |change, object: &Arc<CachedObject>, previous: Option<&Arc<CachedObject>>| Change {
                kind: cache.kind.clone(),
                change,
                object: object.clone(),
                previous: previous.cloned(),
            };
        let mut changes = Vec::new();
        let mut objects = cache.write();
        for (key, old) in objects.iter() {
            if self.in_scope(key) && !next.contains_key(key) {
                changes.push(change(ChangeType::Deleted, old, None));
            }
        }
        for (key, new) in &next {
            match objects.get(key) {
                Some(old) if old.resource_version == new.resource_version => {}
                Some(old) => changes.push(change(ChangeType::Changed, new, Some(old))),
                None => changes.push(change(ChangeType::Added, new, None)),
            }
        }
        match &self.scope {
            None => *objects = next,
            Some(_) => {
                objects.retain(|key, _| !self.in_scope(key));
                objects.extend(next);
            }
        }
        drop(objects);
        if let Some(rv) = newest {
            self.observed(&rv.to_string());
        }
        let mut scopes = cache.lock_scopes();
        scopes.insert(self.scope.clone(), true);
        if scopes.values().all(|listed| *listed) {
            cache.synced.send_replace(true);
        }
        changes
    }
}

impl Drop for CacheWriter {
    /// A scope no watch writes any more: it no longer holds the cache's sync back.
    fn drop(&mut self) {
        self.cache.lock_seen().remove(&self.scope);
        let mut scopes = self.cache.lock_scopes();
        scopes.remove(&self.scope);
        if !scopes.is_empty() && scopes.values().all(|listed| *listed) {
            self.cache.synced.send_replace(true);
        }
    }
}

impl KindCache {
    /// An empty cache of `kind` with no writer yet.
    pub fn empty(kind: KindRef) -> Arc<KindCache> {
        Arc::new(KindCache {
            kind,
            objects: RwLock::default(),
            synced: watch::Sender::new(false),
            scopes: Mutex::default(),
            seen: Mutex::default(),
            order: Mutex::default(),
        })
    }

    fn lock_scopes(&self) -> std::sync::MutexGuard<'_, HashMap<Option<String>, bool>> {
        self.scopes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ordering lock: a watch holds it from changing the cache until its changes are
    /// sent to the router, so a plugin joining meanwhile sees the cache before or after.
    pub fn order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, HashMap<Option<String>, u64>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The highest resourceVersion the watch covering `namespace` (the cluster-wide one
    /// when there is one, whose relists replace everything) has delivered: every change
    /// to an object there up to it is in the cache, so an object created at or before it
    /// and not cached has been deleted since. `None` before the watch delivered a
    /// numeric version.
    pub fn seen(&self, namespace: Option<&str>) -> Option<u64> {
        let seen = self.lock_seen();
        if self.lock_scopes().contains_key(&None) {
            return seen.get(&None).copied();
        }
        seen.get(&namespace.map(str::to_string)).copied()
    }

    /// Drops the objects outside `keep` (namespaces no plugin needs any more), without
    /// reporting them as deleted: nobody reads them.
    pub fn keep_namespaces(&self, keep: &std::collections::BTreeSet<String>) {
        self.write()
            .retain(|key, _| key.namespace.as_ref().is_none_or(|ns| keep.contains(ns)));
    }

    /// The kind this cache holds.
    pub fn kind(&self) -> &KindRef {
        &self.kind
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjKey, Arc<CachedObject>>> {
        self.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjKey, Arc<CachedObject>>> {
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }

    /// One object.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<CachedObject>> {
        self.read().get(key).cloned()
    }

    /// The objects in `namespace` (or all) as they are now: the lock is held only to clone
    /// their `Arc`s, never while anything is done with them.
    pub fn snapshot(&self, namespace: Option<&str>) -> Vec<Arc<CachedObject>> {
        let objects = self.read();
        match namespace {
            None => objects.values().cloned().collect(),
            Some(ns) => objects
                .values()
                .filter(|o| o.key.namespace.as_deref() == Some(ns))
                .cloned()
                .collect(),
        }
    }

    /// Objects in `namespace` (or all) matching `selector`, sorted by key. Matching and
    /// sorting work on a [`snapshot`](Self::snapshot), outside the lock the watch writes
    /// through, so a slow selector cannot hold up the watch.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<CachedObject>> {
        let mut items = self.snapshot(namespace);
        items.retain(|o| selector.matches_labels(&o.labels));
        items.sort_by(|a, b| a.key.cmp(&b.key));
        items
    }

    /// Every key, for resyncs and for plugins that start late.
    pub fn keys(&self) -> Vec<ObjKey> {
        self.read().keys().cloned().collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Whether the first list has completed.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Removes `metadata.managedFields`: bookkeeping of server-side apply that controllers do
/// not need and that often makes up half of an object's size.
pub fn strip_managed_fields(object: &mut serde_json::Value) {
    if let Some(meta) = object
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, rv: &str, app: &str) -> CachedObject {
        CachedObject {
            key: ObjKey::new(Some("ns"), name),
            json: format!("{{\"name\":\"{name}\"}}").into(),
            resource_version: rv.into(),
            labels: [("app".to_string(), app.to_string())].into(),
            controller: None,
            manager: None,
        }
    }

    #[test]
    fn upserts_report_only_real_changes() {
        let mut c = CacheWriter::new(KindRef::deployment());
        assert_eq!(
            c.upsert(obj("a", "1", "x")).unwrap().change,
            ChangeType::Added
        );
        assert!(
            c.upsert(obj("a", "1", "x")).is_none(),
            "same resourceVersion is no change"
        );
        assert_eq!(
            c.upsert(obj("a", "2", "x")).unwrap().change,
            ChangeType::Changed
        );
        let gone = c.remove(&ObjKey::new(Some("ns"), "a")).unwrap();
        assert_eq!(
            (gone.change, gone.object.resource_version.as_str()),
            (ChangeType::Deleted, "2")
        );
        assert!(c.remove(&ObjKey::new(Some("ns"), "a")).is_none());
    }

    fn in_ns(ns: &str, name: &str, rv: &str) -> CachedObject {
        CachedObject {
            key: ObjKey::new(Some(ns), name),
            ..obj(name, rv, "x")
        }
    }

    /// What each watch has delivered: the newest version it stored, deleted or listed, in
    /// its own namespace; the cluster-wide watch's once there is one.
    #[test]
    fn each_watch_remembers_the_newest_version_it_delivered() {
        let cache = KindCache::empty(KindRef::deployment());
        let mut a = CacheWriter::scoped(&cache, Some("a".into()));
        let mut b = CacheWriter::scoped(&cache, Some("b".into()));
        assert_eq!(cache.seen(Some("a")), None);
        a.replace_all(vec![in_ns("a", "x", "5"), in_ns("a", "y", "3")]);
        b.replace_all(Vec::new());
        assert_eq!(
            (cache.seen(Some("a")), cache.seen(Some("b"))),
            (Some(5), None)
        );
        b.upsert(in_ns("b", "z", "7"));
        a.observed("9");
        a.remove(&ObjKey::new(Some("a"), "x"));
        assert_eq!(
            (cache.seen(Some("a")), cache.seen(Some("b"))),
            (Some(9), Some(7))
        );
        a.observed("4");
        a.observed("opaque");
        assert_eq!(cache.seen(Some("a")), Some(9), "never goes back");
        let mut all = CacheWriter::scoped(&cache, None);
        assert_eq!(
            cache.seen(Some("a")),
            None,
            "the cluster-wide watch has delivered nothing"
        );
        all.replace_all(vec![in_ns("a", "y", "3"), in_ns("b", "z", "8")]);
        assert_eq!(cache.seen(Some("b")), Some(8));
        drop(all);
        assert_eq!(cache.seen(Some("a")), Some(9));
    }

    /// One cache filled by a watch per namespace: a namespace's relist replaces that
    /// namespace only, and the cache is synced once every namespace has listed.
    #[test]
    fn namespace_writers_replace_their_own_namespace_only() {
        let cache = KindCache::empty(KindRef::deployment());
        let mut a = CacheWriter::scoped(&cache, Some("a".into()));
        let mut b = CacheWriter::scoped(&cache, Some("b".into()));
        a.replace_all(vec![in_ns("a", "x", "1"), in_ns("a", "y", "1")]);
        assert!(!cache.is_synced(), "b has not listed");
        b.replace_all(vec![in_ns("b", "z", "1")]);
        assert!(cache.is_synced());
        let changes = a.replace_all(vec![in_ns("a", "x", "1")]);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].change, ChangeType::Deleted);
        assert_eq!(changes[0].object.key, ObjKey::new(Some("a"), "y"));
        assert_eq!(cache.len(), 2, "b's object stays");
        cache.keep_namespaces(&["a".to_string()].into());
        assert_eq!(cache.keys(), vec![ObjKey::new(Some("a"), "x")]);
        // A writer that stops no longer holds the sync back.
        let late = KindCache::empty(KindRef::deployment());
        let mut listed = CacheWriter::scoped(&late, Some("a".into()));
        let never = CacheWriter::scoped(&late, Some("b".into()));
        listed.replace_all(vec![]);
        assert!(!late.is_synced());
        drop(never);
        assert!(late.is_synced());
    }

    #[test]
    fn relist_replaces_and_reports_deletions() {
        let mut c = CacheWriter::new(KindRef::deployment());
        let reader = c.reader();
        assert!(!reader.is_synced());
        c.upsert(obj("a", "1", "x"));
        c.upsert(obj("b", "1", "x"));
        let changes = c.replace_all(vec![obj("b", "2", "x"), obj("c", "1", "x")]);
        let mut seen: Vec<_> = changes
            .iter()
            .map(|ch| (ch.object.key.name.clone(), ch.change))
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                ("a".to_string(), ChangeType::Deleted),
                ("b".to_string(), ChangeType::Changed),
                ("c".to_string(), ChangeType::Added)
            ]
        );
        assert!(reader.is_synced());
        assert_eq!(reader.len(), 2);
    }

    #[test]
    fn lists_by_namespace_and_labels() {
        let mut writer = CacheWriter::new(KindRef::deployment());
        writer.upsert(obj("a", "1", "web"));
        writer.upsert(obj("b", "1", "db"));
        let c = writer.reader();
        let web = LabelSelector::parse("app=web").unwrap();
        assert_eq!(c.list(Some("ns"), &web).len(), 1);
        assert_eq!(c.list(Some("other"), &LabelSelector::default()).len(), 0);
        assert_eq!(c.list(None, &LabelSelector::default()).len(), 2);
    }

    #[test]
    fn a_reader_never_sees_half_a_relist() {
        let set = |prefix: &str| -> Vec<CachedObject> {
            (0..200)
                .map(|i| obj(&format!("{prefix}{i}"), "1", "x"))
                .collect()
        };
        let mut writer = CacheWriter::new(KindRef::deployment());
        writer.replace_all(set("a"));
        let reader = writer.reader();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut looks = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || looks < 100 {
                    let seen = reader.snapshot(None);
                    let from_a = seen.iter().filter(|o| o.key.name.starts_with('a')).count();
                    assert!(
                        seen.len() == 200 && (from_a == 0 || from_a == 200),
                        "a reader saw {} objects, {from_a} of the first list",
                        seen.len()
                    );
                    looks += 1;
                }
                looks
            })
        };
        for round in 0..200 {
            writer.replace_all(set(if round % 2 == 0 { "b" } else { "a" }));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(watcher.join().expect("no torn relist seen") >= 100);
    }

    #[test]
    fn a_watched_object_is_cached_without_managed_fields() {
        let watched = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "resourceVersion": "7",
                         "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Foo", "name": "f",
                                              "uid": "u", "controller": true}]},
            "spec": {"replicas": 2},
        });
        let cached = CachedObject::from_watched(serde_json::from_value(watched.clone()).unwrap());
        let mut expected = watched;
        strip_managed_fields(&mut expected);
        let json: serde_json::Value = serde_json::from_str(&cached.json).unwrap();
        assert_eq!(json, expected);
        assert_eq!(cached.key, ObjKey::new(Some("team-a"), "web"));
        assert_eq!(cached.resource_version, "7");
        assert_eq!(cached.labels["app"], "web");
        assert_eq!(cached.controller.unwrap().name, "f");
    }

    #[test]
    fn strips_managed_fields_only() {
        let mut o = serde_json::json!({"metadata": {"name": "a", "managedFields": [{}]}});
        strip_managed_fields(&mut o);
        assert_eq!(o, serde_json::json!({"metadata": {"name": "a"}}));
    }
}
