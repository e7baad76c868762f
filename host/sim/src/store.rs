//! The object store: one `BTreeMap` per resource holding `Arc<Value>` objects, a single
//! resourceVersion counter across all kinds (like etcd's revision), a bounded event history
//! for watch replay, and a broadcast channel that fans events out to watchers.
//!
//! Every mutation is computed by the caller on a copy and committed here atomically with an
//! optional precondition, so a failed request never leaves partial state behind.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tokio::sync::broadcast;

/// The kind of change a watch event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// Storage key of the resource (`deployments.apps`).
    pub resource: Arc<str>,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for deletions: the last state, with the deletion's rv).
    pub object: Arc<Value>,
    /// The object before the change (absent for additions).
    pub old: Option<Arc<Value>>,
    /// `object` serialized once, shared by every watcher.
    encoded: OnceLock<Vec<u8>>,
}

impl Event {
    /// The object as JSON, serialized on first use and shared by all watchers.
    pub fn object_json(&self) -> &[u8] {
        self.encoded
            .get_or_init(|| serde_json::to_vec(&*self.object).unwrap_or_default())
    }
}

/// What must hold for a commit to proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Nothing.
    None,
    /// The object must not exist (create).
    Absent,
    /// The object must exist.
    Exists,
    /// The object must exist with this resourceVersion.
    ResourceVersion(u64),
}

/// Why a commit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Precondition `Absent` failed.
    #[error("already exists")]
    AlreadyExists,
    /// The object does not exist.
    #[error("not found")]
    NotFound,
    /// The resourceVersion did not match.
    #[error("conflict")]
    Conflict,
}

type Key = (String, String);

/// A live feed of committed events.
pub type Subscription = broadcast::Receiver<Arc<Event>>;

struct Inner {
    rv: u64,
    objects: HashMap<Arc<str>, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    capacity: usize,
    /// Highest resourceVersion dropped from the history (0 when nothing was dropped).
    compacted: u64,
    /// Indexes for garbage collection and namespace deletion.
    index: Index,
}

/// Where an object lives: resource and (namespace, name).
pub type Location = (Arc<str>, Key);

/// Secondary indexes kept in step with `objects`.
#[derive(Default)]
struct Index {
    /// uid → location.
    uids: HashMap<String, Location>,
    /// owner uid → dependents' locations.
    dependents: HashMap<String, HashSet<Location>>,
    /// namespace → number of objects in it.
    namespaces: HashMap<String, usize>,
}

fn uid_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

impl Index {
    fn remove(&mut self, location: &Location, object: &Value) {
        if let Some(uid) = uid_of(object) {
            self.uids.remove(uid);
        }
        for owner in owner_uids(object) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(location);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
        if let Some(n) = self.namespaces.get_mut(&location.1.0) {
            *n = n.saturating_sub(1);
        }
    }

    fn insert(&mut self, location: &Location, object: &Value) {
        if let Some(uid) = uid_of(object) {
            self.uids.insert(uid.to_string(), location.clone());
        }
        for owner in owner_uids(object) {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert(location.clone());
        }
        *self.namespaces.entry(location.1.0.clone()).or_default() += 1;
    }
}

/// The shared object store.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
}

/// Parses a stored object's `metadata.resourceVersion`.
pub fn object_rv(object: &Value) -> u64 {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl Store {
    /// A store keeping `history` events for watch replay; `fanout` bounds how far a watcher
    /// may lag before its watch is closed.
    pub fn new(history: usize, fanout: usize) -> Self {
        let (tx, _) = broadcast::channel(fanout.max(16));
        Self {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: HashMap::new(),
                history: VecDeque::with_capacity(history.min(65_536)),
                capacity: history.max(1),
                compacted: 0,
                index: Index::default(),
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch may start from.
    pub fn compacted_rv(&self) -> u64 {
        self.lock().compacted
    }

    /// One object.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.lock();
        inner
            .objects
            .get(resource)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of a resource (optionally one namespace) in key order, starting after `after`,
    /// keeping those `filter` accepts, at most `limit`; returns them, whether more matched, and
    /// the resourceVersion of the snapshot.
    pub fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        after: Option<&Key>,
        limit: Option<usize>,
        filter: impl Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, Option<Key>, u64) {
        let inner = self.lock();
        let mut items = Vec::new();
        let mut next = None;
        if let Some(map) = inner.objects.get(resource) {
            use std::ops::Bound;
            let lower = match (after, namespace) {
                (Some(k), _) => Bound::Excluded(k.clone()),
                (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
                (None, None) => Bound::Unbounded,
            };
            for (key, object) in map.range((lower, Bound::Unbounded)) {
                if namespace.is_some_and(|ns| key.0 != ns) {
                    break;
                }
                if !filter(object) {
                    continue;
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    next = items.last().map(|o: &Arc<Value>| key_of(o));
                    break;
                }
                items.push(object.clone());
            }
        }
        (items, next, inner.rv)
    }

    /// Objects of a resource (optionally one namespace) as they were at resourceVersion `rv`
    /// (a lagging cache), keeping those `filter` accepts, in key order, with the
    /// resourceVersion actually served: the history is undone back to `rv`, so no further
    /// back than the oldest retained event (the compaction point).
    pub fn list_at(
        &self,
        resource: &str,
        namespace: Option<&str>,
        rv: u64,
        filter: impl Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let target = rv.clamp(inner.compacted, inner.rv);
        let in_scope = |key: &Key| namespace.is_none_or(|ns| key.0 == ns);
        let mut state: BTreeMap<Key, Arc<Value>> = inner
            .objects
            .get(resource)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| in_scope(k))
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for event in inner.history.iter().rev() {
            if event.rv <= target {
                break;
            }
            if *event.resource != *resource {
                continue;
            }
            let key = key_of(&event.object);
            if !in_scope(&key) {
                continue;
            }
            match (&event.event_type, &event.old) {
                (EventType::Added, _) => {
                    state.remove(&key);
                }
                (EventType::Modified | EventType::Deleted, Some(old)) => {
                    state.insert(key, old.clone());
                }
                (_, None) => {}
            }
        }
        let items = state.into_values().filter(|o| filter(o)).collect();
        (items, target)
    }

    /// Every object of every resource (for garbage collection and namespace deletion).
    pub fn all(&self) -> Vec<(Arc<str>, Arc<Value>)> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .flat_map(|(r, map)| map.values().map(move |o| (r.clone(), o.clone())))
            .collect()
    }

    /// Number of objects of a resource (optionally in one namespace).
    pub fn count(&self, resource: &str, namespace: Option<&str>) -> usize {
        let inner = self.lock();
        inner
            .objects
            .get(resource)
            .map(|m| {
                m.keys()
                    .filter(|k| namespace.is_none_or(|ns| k.0 == ns))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Stores `new` (or removes the object when `None`) if `pre` holds, stamping a fresh
    /// resourceVersion; records and broadcasts the event. Returns the stored object (for a
    /// removal, the last state with the removal's resourceVersion).
    pub fn commit(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        pre: Precondition,
        new: Option<Value>,
    ) -> Result<Arc<Value>, CommitError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let key = (namespace.to_string(), name.to_string());
        let resource: Arc<str> = match inner.objects.get_key_value(resource) {
            Some((k, _)) => k.clone(),
            None => Arc::from(resource),
        };
        let map = inner.objects.entry(resource.clone()).or_default();
        let old = map.get(&key).cloned();
        match (pre, &old) {
            (Precondition::Absent, Some(_)) => return Err(CommitError::AlreadyExists),
            (Precondition::Exists | Precondition::ResourceVersion(_), None) => {
                return Err(CommitError::NotFound);
            }
            (Precondition::ResourceVersion(rv), Some(o)) if object_rv(o) != rv => {
                return Err(CommitError::Conflict);
            }
            _ => {}
        }
        if new.is_none() && old.is_none() {
            return Err(CommitError::NotFound);
        }
        inner.rv += 1;
        let rv = inner.rv;
        let location: Location = (resource.clone(), key.clone());
        if let Some(o) = &old {
            inner.index.remove(&location, o);
        }
        if let Some(n) = &new {
            inner.index.insert(&location, n);
        }
        let map = inner.objects.entry(resource.clone()).or_default();
        let (event_type, object) = match new {
            Some(mut value) => {
                set_rv(&mut value, rv);
                let object = Arc::new(value);
                map.insert(key, object.clone());
                (
                    if old.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    },
                    object,
                )
            }
            None => {
                map.remove(&key);
                let mut last = old.as_deref().cloned().unwrap_or(Value::Null);
                set_rv(&mut last, rv);
                (EventType::Deleted, Arc::new(last))
            }
        };
        let event = Arc::new(Event {
            rv,
            resource,
            event_type,
            object: object.clone(),
            old,
            encoded: OnceLock::new(),
        });
        if inner.history.len() >= inner.capacity
            && let Some(dropped) = inner.history.pop_front()
        {
            inner.compacted = dropped.rv;
        }
        inner.history.push_back(event.clone());
        let _ = self.tx.send(event);
        Ok(object)
    }

    /// Whether an object with this uid exists.
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.lock().index.uids.contains_key(uid)
    }

    /// Objects with an ownerReference to `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(Arc<str>, Arc<Value>)> {
        let inner = self.lock();
        let Some(locations) = inner.index.dependents.get(uid) else {
            return Vec::new();
        };
        locations
            .iter()
            .filter_map(|(resource, key)| {
                let object = inner.objects.get(resource)?.get(key)?;
                Some((resource.clone(), object.clone()))
            })
            .collect()
    }

    /// Number of objects (of any resource) in a namespace.
    pub fn count_in_namespace(&self, namespace: &str) -> usize {
        self.lock()
            .index
            .namespaces
            .get(namespace)
            .copied()
            .unwrap_or(0)
    }

    /// Subscribes to all future events.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events of `resource` after `from` from the history plus a subscription to later ones,
    /// taken atomically; `Err(oldest)` when `from` is older than the retained history.
    pub fn watch_from(
        &self,
        resource: &str,
        from: u64,
    ) -> Result<(Vec<Arc<Event>>, Subscription), u64> {
        let inner = self.lock();
        if from < inner.compacted {
            return Err(inner.compacted);
        }
        let start = inner.history.partition_point(|e| e.rv <= from);
        let replay = inner
            .history
            .range(start..)
            .filter(|e| &*e.resource == resource)
            .cloned()
            .collect();
        Ok((replay, self.tx.subscribe()))
    }

    /// The current objects of `resource` (optionally one namespace) plus a subscription to
    /// later events, taken atomically, with the snapshot's resourceVersion.
    pub fn snapshot(
        &self,
        resource: &str,
        namespace: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<Event>>) {
        let inner = self.lock();
        let items = inner
            .objects
            .get(resource)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| namespace.is_none_or(|ns| k.0 == ns))
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, inner.rv, self.tx.subscribe())
    }
}

fn set_rv(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// The (namespace, name) key of an object.
pub fn key_of(object: &Value) -> Key {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn rv_is_global_and_preconditions_hold() {
        let s = Store::new(10, 16);
        let a = s
            .commit(
                "pods",
                "ns",
                "a",
                Precondition::Absent,
                Some(obj("ns", "a")),
            )
            .unwrap();
        let b = s
            .commit(
                "deployments.apps",
                "ns",
                "b",
                Precondition::Absent,
                Some(obj("ns", "b")),
            )
            .unwrap();
        assert_eq!(object_rv(&a), 1);
        assert_eq!(object_rv(&b), 2);
        assert_eq!(
            s.commit(
                "pods",
                "ns",
                "a",
                Precondition::Absent,
                Some(obj("ns", "a"))
            ),
            Err(CommitError::AlreadyExists)
        );
        assert_eq!(
            s.commit(
                "pods",
                "ns",
                "a",
                Precondition::ResourceVersion(7),
                Some(obj("ns", "a"))
            ),
            Err(CommitError::Conflict)
        );
        let deleted = s
            .commit("pods", "ns", "a", Precondition::ResourceVersion(1), None)
            .unwrap();
        assert_eq!(object_rv(&deleted), 3);
        assert!(s.get("pods", "ns", "a").is_none());
    }

    #[test]
    fn history_is_bounded_and_replays_per_resource() {
        let s = Store::new(3, 16);
        for i in 0..5 {
            s.commit(
                "pods",
                "ns",
                &format!("p{i}"),
                Precondition::Absent,
                Some(obj("ns", &format!("p{i}"))),
            )
            .unwrap();
        }
        assert_eq!(s.compacted_rv(), 2);
        assert!(s.watch_from("pods", 1).is_err());
        let (replay, _) = s.watch_from("pods", 3).unwrap();
        assert_eq!(replay.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![4, 5]);
        let (replay, _) = s.watch_from("deployments.apps", 2).unwrap();
        assert!(replay.is_empty());
    }

    #[test]
    fn list_at_undoes_later_changes_within_the_history() {
        let s = Store::new(4, 16);
        let labelled =
            |v: &str| json!({"metadata": {"namespace": "ns", "name": "a", "labels": {"v": v}}});
        s.commit("pods", "ns", "a", Precondition::Absent, Some(labelled("1")))
            .unwrap();
        s.commit("pods", "ns", "a", Precondition::Exists, Some(labelled("2")))
            .unwrap();
        s.commit(
            "pods",
            "ns",
            "b",
            Precondition::Absent,
            Some(obj("ns", "b")),
        )
        .unwrap();
        s.commit("pods", "ns", "a", Precondition::Exists, None)
            .unwrap();
        let (items, rv) = s.list_at("pods", None, 2, |_| true);
        assert_eq!(rv, 2);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["labels"]["v"], "2");
        assert_eq!(object_rv(&items[0]), 2);
        let (items, rv) = s.list_at("pods", Some("ns"), 1, |_| true);
        assert_eq!((items.len(), rv), (1, 1));
        assert_eq!(items[0]["metadata"]["labels"]["v"], "1");
        for i in 0..4 {
            let name = format!("c{i}");
            s.commit(
                "pods",
                "ns",
                &name,
                Precondition::Absent,
                Some(obj("ns", &name)),
            )
            .unwrap();
        }
        let (_, rv) = s.list_at("pods", None, 1, |_| true);
        assert_eq!(rv, s.compacted_rv(), "no further back than the history");
    }

    #[test]
    fn list_pages_in_key_order() {
        let s = Store::new(100, 16);
        for ns in ["a", "b"] {
            for i in 0..3 {
                let name = format!("o{i}");
                s.commit(
                    "pods",
                    ns,
                    &name,
                    Precondition::Absent,
                    Some(obj(ns, &name)),
                )
                .unwrap();
            }
        }
        let (page, next, _) = s.list("pods", None, None, Some(4), |_| true);
        assert_eq!(page.len(), 4);
        let next = next.unwrap();
        assert_eq!(next, ("b".to_string(), "o0".to_string()));
        let (rest, more, _) = s.list("pods", None, Some(&next), Some(4), |_| true);
        assert_eq!(rest.len(), 2);
        assert!(more.is_none());
        let (in_b, _, _) = s.list("pods", Some("b"), None, None, |_| true);
        assert_eq!(in_b.len(), 3);
    }

    #[test]
    fn indexes_follow_commits() {
        let s = Store::new(100, 16);
        let owner = json!({"metadata": {"namespace": "ns", "name": "o", "uid": "u1"}});
        let child = json!({"metadata": {"namespace": "ns", "name": "c", "uid": "u2",
            "ownerReferences": [{"uid": "u1"}]}});
        s.commit("a", "ns", "o", Precondition::Absent, Some(owner))
            .unwrap();
        s.commit("b", "ns", "c", Precondition::Absent, Some(child))
            .unwrap();
        assert!(s.uid_exists("u1"));
        assert_eq!(s.dependents("u1").len(), 1);
        assert_eq!(s.count_in_namespace("ns"), 2);
        let orphaned = json!({"metadata": {"namespace": "ns", "name": "c", "uid": "u2"}});
        s.commit("b", "ns", "c", Precondition::Exists, Some(orphaned))
            .unwrap();
        assert!(s.dependents("u1").is_empty());
        s.commit("a", "ns", "o", Precondition::Exists, None)
            .unwrap();
        assert!(!s.uid_exists("u1"));
        assert_eq!(s.count_in_namespace("ns"), 1);
    }
}
