//! One list+watch per kind, feeding its cache and telling the router what changed.
//!
//! Uses kube-runtime's watcher: it relists on `410 Gone` and, with `default_backoff`, retries
//! failed watches like client-go's reflector (800 ms doubling to 30 s, with jitter, reset
//! after two healthy minutes).

use super::WatchedObject;
use super::cache::{CacheWriter, CachedObject, Change, KindCache, ObjKey};
use super::kinds::ResolvedKind;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// A running watch; dropping it stops the watch.
pub struct WatchHandle {
    /// A reader of the cache the watch fills (the watch task holds its writer).
    pub cache: Arc<KindCache>,
    task: JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `kind` (in `namespace`, or everywhere) into `cache` (from a streaming
/// list when `streaming_lists` is set, from paged lists otherwise), sending every change to
/// `changes`. Several watches may fill one cache, each its own namespace.
pub fn spawn_watch(
    client: kube::Client,
    kind: &ResolvedKind,
    cache: &Arc<KindCache>,
    namespace: Option<&str>,
    streaming_lists: bool,
    changes: UnboundedSender<Change>,
) -> WatchHandle {
    let (api, scope): (Api<WatchedObject>, _) = match namespace {
        Some(ns) if kind.namespaced => (
            Api::namespaced_with(client, ns, &kind.resource),
            Some(ns.to_string()),
        ),
        _ => (Api::all_with(client, &kind.resource), None),
    };
    let writer = CacheWriter::scoped(cache, scope);
    let config = match streaming_lists {
        true => watcher::Config::default().streaming_lists(),
        false => watcher::Config::default(),
    };
    let task = tokio::spawn(run(api, config, writer, changes));
    WatchHandle {
        cache: cache.clone(),
        task,
    }
}

async fn run(
    api: Api<WatchedObject>,
    config: watcher::Config,
    mut cache: CacheWriter,
    changes: UnboundedSender<Change>,
) {
    let kind = cache.reader().kind().to_string();
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Vec<CachedObject> = Vec::new();
    while let Some(event) = stream.next().await {
        let found: Vec<Change> = match event {
            Ok(Event::Init) => {
                listing.clear();
                Vec::new()
            }
            Ok(Event::InitApply(object)) => {
                listing.push(CachedObject::from_watched(object));
                Vec::new()
            }
            Ok(Event::InitDone) => {
                let fresh = std::mem::take(&mut listing);
                let n = fresh.len();
                let found = cache.replace_all(fresh);
                tracing::debug!(%kind, objects = n, changes = found.len(), "cache synced");
                found
            }
            Ok(Event::Apply(object)) => cache
                .upsert(CachedObject::from_watched(object))
                .into_iter()
                .collect(),
            Ok(Event::Delete(object)) => {
                let meta = &object.metadata;
                let key = ObjKey::new(
                    meta.namespace.as_deref(),
                    meta.name.as_deref().unwrap_or_default(),
                );
                cache.remove(&key).into_iter().collect()
            }
            Err(err) => {
                tracing::warn!(%kind, "watch failed, retrying with backoff: {err}");
                Vec::new()
            }
        };
        for change in found {
            if changes.send(change).is_err() {
                return;
            }
        }
    }
}
