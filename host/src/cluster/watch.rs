//! One list+watch per kind, feeding its cache and telling the router what changed.
//!
//! Uses kube-runtime's watcher with `default_backoff`, which retries failed watches like
//! client-go's reflector (800 ms doubling to 30 s, with jitter, reset after two healthy
//! minutes) and relists on a 410 Gone ERROR event inside an open stream. Two gaps are closed
//! here:
//! - A watch *answered* with an HTTP 410 Gone status (the form a real API server uses for a
//!   compacted resourceVersion) would be retried by the watcher with the same expired
//!   version forever; this loop drops the watcher and starts a fresh one, which relists,
//!   with the same backoff between attempts.
//! - A stream that stays open and sends nothing would be held until the server timeout
//!   (290 s by default) plus the watcher's 5 s margin; the host asks for a shorter server
//!   timeout ([`DEFAULT_WATCH_TIMEOUT`]), so such a stream is abandoned (and the watch
//!   resumed from its last version) within that timeout plus 5 s.

use super::WatchedObject;
use super::cache::{CacheWriter, CachedObject, Change, KindCache, ObjKey};
use super::feed::{Feed, Routed};
use super::kinds::ResolvedKind;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The server-side timeout of each watch request (`timeoutSeconds`) unless configured. A
/// healthy API server ends the stream then and the watch resumes from its last version (one
/// cheap request per watch every 30 s); kube-runtime abandons a stream that has sent nothing,
/// not even a bookmark, for this long plus 5 s, so a stalled stream is given up within 35 s
/// rather than the 295 s of the watcher's default.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How watches fill their caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSettings {
    /// From a streaming list (`sendInitialEvents`) rather than paged lists.
    pub streaming_lists: bool,
    /// The server-side timeout of each watch request; a stream silent for this long plus
    /// 5 s is abandoned.
    pub timeout: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            streaming_lists: false,
            timeout: DEFAULT_WATCH_TIMEOUT,
        }
    }
}

impl WatchSettings {
    fn config(&self) -> watcher::Config {
        let seconds = u32::try_from(self.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let config = watcher::Config::default().timeout(seconds);
        match self.streaming_lists {
            true => config.streaming_lists(),
            false => config,
        }
    }
}

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

/// Starts watching `kind` (in `namespace`, or everywhere) into `cache` as `settings` say,
/// sending every change to `changes`. Several watches may fill one cache, each its own
/// namespace.
pub fn spawn_watch(
    client: kube::Client,
    kind: &ResolvedKind,
    cache: &Arc<KindCache>,
    namespace: Option<&str>,
    settings: WatchSettings,
    changes: Feed,
) -> WatchHandle {
    let (api, scope): (Api<WatchedObject>, _) = match namespace {
        Some(ns) if kind.namespaced => (
            Api::namespaced_with(client, ns, &kind.resource),
            Some(ns.to_string()),
        ),
        _ => (Api::all_with(client, &kind.resource), None),
    };
    let writer = CacheWriter::scoped(cache, scope);
    let task = tokio::spawn(run(api, settings.config(), writer, changes));
    WatchHandle {
        cache: cache.clone(),
        task,
    }
}

/// Why a watcher stopped.
enum Stopped {
    /// The API server answered 410 Gone to a watch or list request: the watcher would retry
    /// the same expired version, so a fresh one must relist.
    Gone,
    /// Nobody takes the changes any more (or the watcher ended).
    Closed,
}

/// Runs watchers into `cache` until nobody takes the changes: a fresh watcher (relisting
/// from scratch) after each 410 Gone status, after a backoff that grows across them.
async fn run(
    api: Api<WatchedObject>,
    config: watcher::Config,
    mut cache: CacheWriter,
    changes: Feed,
) {
    let kind = cache.reader().kind().to_string();
    let mut backoff = DefaultBackoff::default();
    loop {
        match watch(&api, &config, &mut cache, &changes, &kind).await {
            Stopped::Closed => return,
            Stopped::Gone => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                tracing::warn!(%kind, delay_ms = delay.as_millis() as u64, "watch answered 410 Gone: relisting with a fresh watch");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Whether a watcher's error is an HTTP 410 Gone answer to its watch or list request.
fn is_gone_status(err: &watcher::Error) -> bool {
    matches!(
        err,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::InitialListFailed(kube::Error::Api(status))
            if status.code == 410
    )
}

/// One watcher into `cache`, until it stops.
async fn watch(
    api: &Api<WatchedObject>,
    config: &watcher::Config,
    cache: &mut CacheWriter,
    changes: &Feed,
    kind: &str,
) -> Stopped {
    let stream = watcher::watcher(api.clone(), config.clone()).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Vec<CachedObject> = Vec::new();
    let reader = cache.reader();
    while let Some(event) = stream.next().await {
        // From changing the cache until its changes are sent: a plugin joining the feed
        // meanwhile would see an object both in the cache and as a change after it.
        let _order = reader.order();
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
                cache.observed(meta.resource_version.as_deref().unwrap_or_default());
                cache.remove(&key).into_iter().collect()
            }
            Err(err) if is_gone_status(&err) => return Stopped::Gone,
            Err(err) => {
                tracing::warn!(%kind, "watch failed, retrying with backoff: {err}");
                Vec::new()
            }
        };
        for change in found {
            if changes.send(Routed::Change(change)).is_err() {
                return Stopped::Closed;
            }
        }
    }
    Stopped::Closed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn only_a_410_status_answering_a_watch_or_list_starts_a_fresh_watcher() {
        assert!(is_gone_status(&watcher::Error::WatchStartFailed(
            api_error(410)
        )));
        assert!(is_gone_status(&watcher::Error::InitialListFailed(
            api_error(410)
        )));
        assert!(!is_gone_status(&watcher::Error::WatchStartFailed(
            api_error(500)
        )));
        // Inside an open stream the watcher relists by itself.
        assert!(!is_gone_status(&watcher::Error::WatchFailed(api_error(
            410
        ))));
    }

    #[test]
    fn the_server_timeout_is_whole_seconds_and_at_least_one() {
        let timeout = |d| {
            WatchSettings {
                streaming_lists: false,
                timeout: d,
            }
            .config()
            .timeout
        };
        assert_eq!(timeout(DEFAULT_WATCH_TIMEOUT), Some(30));
        assert_eq!(timeout(Duration::from_millis(300)), Some(1));
    }
}
