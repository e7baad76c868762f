//! The shared watches: one list+watch per kind, started when a plugin first needs the kind
//! and stopped when no plugin needs it any more.

use super::{Change, KindCache, KindRegistry, WatchHandle, spawn_watch};
use crate::contract::KindRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;

/// Every running watch, feeding one change channel.
pub(crate) struct Watches {
    kinds: Arc<KindRegistry>,
    namespace: Option<String>,
    streaming_lists: bool,
    changes: UnboundedSender<Change>,
    running: Mutex<BTreeMap<KindRef, WatchHandle>>,
}

impl Watches {
    /// No watch yet; kinds are resolved through `kinds` (shared with the executor, so
    /// discovery runs once per kind); watches started later send their changes to `changes`,
    /// and fill their caches from streaming lists when `streaming_lists` is set.
    pub fn new(
        kinds: Arc<KindRegistry>,
        namespace: Option<String>,
        streaming_lists: bool,
        changes: UnboundedSender<Change>,
    ) -> Self {
        Watches {
            kinds,
            namespace,
            streaming_lists,
            changes,
            running: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<KindRef, WatchHandle>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cache of `kind`, starting its watch if none runs (discovery first, once per kind).
    pub async fn ensure(&self, kind: &KindRef) -> Result<Arc<KindCache>, kube::Error> {
        if let Some(w) = self.lock().get(kind) {
            return Ok(w.cache.clone());
        }
        let resolved = self.kinds.resolve(kind).await?;
        let mut running = self.lock();
        // Another caller may have started it while discovery ran.
        let handle = running.entry(kind.clone()).or_insert_with(|| {
            tracing::info!(%kind, "watch started");
            spawn_watch(
                self.kinds.client().clone(),
                &resolved,
                self.namespace.as_deref(),
                self.streaming_lists,
                self.changes.clone(),
            )
        });
        Ok(handle.cache.clone())
    }

    /// Stops every watch whose kind is not in `needed`.
    pub fn retain(&self, needed: &BTreeSet<KindRef>) {
        let mut running = self.lock();
        let unneeded: Vec<KindRef> = running
            .keys()
            .filter(|k| !needed.contains(*k))
            .cloned()
            .collect();
        for kind in unneeded {
            running.remove(&kind);
            tracing::info!(%kind, "watch stopped: no plugin needs it any more");
        }
    }

    /// The kinds being watched.
    pub fn kinds(&self) -> Vec<KindRef> {
        self.lock().keys().cloned().collect()
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
