//! The shared watches: one cache per kind, filled by one list+watch across the cluster or,
//! when every plugin that needs the kind is confined to named namespaces, by one per
//! namespace, so a tenant's grant never makes the host list and hold a kind cluster-wide
//! (Secrets above all). Watches start when a plugin first needs a kind (or a namespace of
//! it) and stop when none does any more.

use super::{Feed, KindCache, KindRegistry, ResolvedKind, WatchHandle, WatchSettings, spawn_watch};
use crate::contract::KindRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Where a plugin needs a kind watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchScope {
    /// Every namespace (and cluster-scoped objects).
    All,
    /// These namespaces only.
    Only(BTreeSet<String>),
}

impl WatchScope {
    /// Widens this scope to the smallest covering `other` too, in place: gathering the
    /// scopes of T plugins into a new set each time copied the growing set T times (with
    /// every instance start gathering them, 1,000 Plugins took 7.8 s to start, most of it
    /// copying).
    pub fn widen(&mut self, other: &WatchScope) {
        match (&mut *self, other) {
            (WatchScope::Only(a), WatchScope::Only(b)) => a.extend(b.iter().cloned()),
            _ => *self = WatchScope::All,
        }
    }
}

/// One kind's cache and the watches filling it, by namespace (`None`: cluster-wide).
struct KindWatch {
    cache: Arc<KindCache>,
    resolved: ResolvedKind,
    watches: BTreeMap<Option<String>, WatchHandle>,
}

/// Every running watch, feeding one change channel.
pub(crate) struct Watches {
    kinds: Arc<KindRegistry>,
    namespace: Option<String>,
    settings: WatchSettings,
    changes: Feed,
    running: Mutex<BTreeMap<KindRef, KindWatch>>,
}

impl Watches {
    /// No watch yet; kinds are resolved through `kinds` (shared with the executor, so
    /// discovery runs once per kind); watches started later send their changes to `changes`,
    /// and fill their caches as `settings` say.
    pub fn new(
        kinds: Arc<KindRegistry>,
        namespace: Option<String>,
        settings: WatchSettings,
        changes: Feed,
    ) -> Self {
        Watches {
            kinds,
            namespace,
            settings,
            changes,
            running: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<KindRef, KindWatch>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a watch of `entry`'s kind in namespace `at` (`None`: cluster-wide), filling
    /// its cache.
    fn start(&self, entry: &mut KindWatch, at: Option<String>) {
        let handle = spawn_watch(
            self.kinds.client().clone(),
            &entry.resolved,
            &entry.cache,
            at.as_deref(),
            self.settings,
            self.changes.clone(),
        );
        entry.watches.insert(at, handle);
    }

    /// The watch keys `scope` needs of a kind: `None` (cluster-wide) or each namespace. The
    /// host's own `--namespace` confines everything to it.
    fn wanted(&self, namespaced: bool, scope: &WatchScope) -> BTreeSet<Option<String>> {
        match (&self.namespace, namespaced, scope) {
            (Some(ns), true, _) => [Some(ns.clone())].into(),
            (_, false, _) | (None, true, WatchScope::All) => [None].into(),
            (None, true, WatchScope::Only(names)) => names.iter().cloned().map(Some).collect(),
        }
    }

    /// The cache of `kind`, with watches covering `scope` (discovery first, once per kind).
    pub async fn ensure(
        &self,
        kind: &KindRef,
        scope: &WatchScope,
    ) -> Result<Arc<KindCache>, kube::Error> {
        let resolved = self.kinds.resolve(kind).await?;
        let wanted = self.wanted(resolved.namespaced, scope);
        let mut running = self.lock();
        let entry = running.entry(kind.clone()).or_insert_with(|| KindWatch {
            cache: KindCache::empty(kind.clone()),
            resolved,
            watches: BTreeMap::new(),
        });
        // A cluster-wide watch covers every namespace already.
        if entry.watches.contains_key(&None) {
            return Ok(entry.cache.clone());
        }
        let missing: Vec<Option<String>> = wanted
            .iter()
            .filter(|at| !entry.watches.contains_key(*at))
            .cloned()
            .collect();
        for at in missing {
            tracing::info!(%kind, namespace = at.as_deref().unwrap_or("*"), "watch started");
            self.start(entry, at);
        }
        if wanted.contains(&None) {
            // Widened to the cluster: its list covers what the namespaces' watches held.
            entry.watches.retain(|at, _| at.is_none());
        }
        Ok(entry.cache.clone())
    }

    /// Stops every watch no plugin needs: kinds not in `needed`, and namespaces outside a
    /// kind's needed scope (narrowing a cluster-wide watch to namespaces once no plugin
    /// needs more: their watches start first, so nothing needed leaves the cache meanwhile).
    pub fn retain(&self, needed: &BTreeMap<KindRef, WatchScope>) {
        let mut running = self.lock();
        let unneeded: Vec<KindRef> = running
            .keys()
            .filter(|k| !needed.contains_key(*k))
            .cloned()
            .collect();
        for kind in unneeded {
            running.remove(&kind);
            tracing::info!(%kind, "watch stopped: no plugin needs it any more");
        }
        for (kind, entry) in running.iter_mut() {
            let wanted = self.wanted(entry.resolved.namespaced, &needed[kind]);
            if wanted.contains(&None) {
                continue;
            }
            let missing: Vec<Option<String>> = wanted
                .iter()
                .filter(|at| !entry.watches.contains_key(*at))
                .cloned()
                .collect();
            for at in missing {
                tracing::info!(%kind, namespace = at.as_deref().unwrap_or("*"), "watch narrowed to a namespace");
                self.start(entry, at);
            }
            let before = entry.watches.len();
            entry.watches.retain(|at, _| wanted.contains(at));
            if entry.watches.len() < before {
                let keep: BTreeSet<String> = wanted.iter().flatten().cloned().collect();
                entry.cache.keep_namespaces(&keep);
                tracing::info!(%kind, namespaces = keep.len(), "watch narrowed: no plugin needs the other namespaces");
            }
        }
    }

    /// The kinds being watched.
    pub fn kinds(&self) -> Vec<KindRef> {
        self.lock().keys().cloned().collect()
    }

    /// Where each kind is watched: `None` for cluster-wide, else its namespaces.
    pub fn scopes(&self) -> Vec<(KindRef, Vec<Option<String>>)> {
        self.lock()
            .iter()
            .map(|(kind, w)| (kind.clone(), w.watches.keys().cloned().collect()))
            .collect()
    }

    /// How many objects each watched kind's cache holds.
    pub fn object_counts(&self) -> Vec<(KindRef, usize)> {
        self.lock()
            .iter()
            .map(|(kind, w)| (kind.clone(), w.cache.len()))
            .collect()
    }

    /// Whether every watch has listed its kind once.
    pub fn all_synced(&self) -> bool {
        self.lock().values().all(|w| w.cache.is_synced())
    }

    /// Stops every watch.
    pub fn stop_all(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(names: &[&str]) -> WatchScope {
        WatchScope::Only(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn widening_covers_both_scopes() {
        let mut scope = only(&["a", "b"]);
        scope.widen(&only(&["b", "c"]));
        assert_eq!(scope, only(&["a", "b", "c"]));
        scope.widen(&WatchScope::All);
        assert_eq!(scope, WatchScope::All);
        scope.widen(&only(&["d"]));
        assert_eq!(scope, WatchScope::All, "all stays all");
    }
}
