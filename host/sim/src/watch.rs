//! Watch streams: chunked JSON lines `{"type":...,"object":...}` replayed from the bounded
//! history (or from a synthetic ADDED snapshot), then live; 410 Gone as an ERROR event when
//! the resourceVersion is older than the history; BOOKMARKs; `timeoutSeconds`; selectors
//! evaluated on old and new states so objects moving out of a selector are seen as DELETED.
//! An injected [`WatchFault`] closes, stalls, aborts or delays the stream (`watch_faults`).

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::store::{Event, EventType};
use super::watch_faults::{Chunk, Next, Outlet, WatchFault};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// Parameters of one watch request.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// Start after this resourceVersion; `None` (absent or "0") starts with the current state.
    pub resource_version: Option<u64>,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: current state as ADDED, then a BOOKMARK marking its end.
    pub send_initial_events: bool,
    /// Objects as one-row `Table`s (`Accept: ...;as=Table`, used by `kubectl get -w`).
    pub table: bool,
}

/// Renders an object for `kind`, rewriting apiVersion for another served version of it.
pub fn render(kind: &ResourceKind, object: &Arc<Value>) -> Vec<u8> {
    if let Some(converted) = kind.from_stored(object) {
        return serde_json::to_vec(&converted).unwrap_or_default();
    }
    let api_version = kind.api_version();
    if object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str()) {
        serde_json::to_vec(&**object).unwrap_or_default()
    } else {
        let mut o = (**object).clone();
        o["apiVersion"] = Value::String(api_version);
        serde_json::to_vec(&o).unwrap_or_default()
    }
}

fn line(event_type: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 40);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn bookmark(kind: &ResourceKind, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": kind.kind, "apiVersion": kind.api_version(), "metadata": meta});
    line("BOOKMARK", &serde_json::to_vec(&object).unwrap_or_default())
}

fn gone_line(message: String) -> Bytes {
    let status = ApiError::gone(message).status();
    line("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

struct Filter {
    kind: Arc<ResourceKind>,
    api_version: String,
    resource: String,
    params: WatchParams,
}

impl Filter {
    fn selects(&self, object: &Value) -> bool {
        let ns_ok = self
            .params
            .namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns));
        ns_ok && self.params.fields.matches(object) && self.params.labels.matches(object)
    }

    /// The line this watcher gets for `event`, if any.
    fn line_for(&self, event: &Event) -> Option<Bytes> {
        if *event.resource != *self.resource {
            return None;
        }
        let now = self.selects(&event.object);
        let before = event.old.as_deref().is_some_and(|o| self.selects(o));
        let event_type = match event.event_type {
            EventType::Added if now => "ADDED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            EventType::Deleted if now || before => "DELETED",
            _ => return None,
        };
        let same_version = event.object.get("apiVersion").and_then(Value::as_str)
            == Some(self.api_version.as_str());
        if same_version && !self.params.table {
            Some(line(event_type, event.object_json()))
        } else {
            Some(self.encode(event_type, &event.object))
        }
    }

    /// One line for `object`, as a one-row Table when the client asked for tables.
    fn encode(&self, event_type: &str, object: &Arc<Value>) -> Bytes {
        if self.params.table {
            let meta = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
            let table = super::table::table(&self.kind, std::slice::from_ref(object), meta);
            line(event_type, &serde_json::to_vec(&table).unwrap_or_default())
        } else {
            line(event_type, &render(&self.kind, object))
        }
    }
}

fn stream_response(rx: mpsc::Receiver<Chunk>) -> Response {
    // An abort waits once first, so the events before it are written out, not left buffered.
    let chunks = ReceiverStream::new(rx).then(|chunk| async move {
        if chunk.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        chunk
    });
    let body = Body::from_stream(chunks);
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// What an injected fault does to one watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Injected {
    /// Answer with a 410 ERROR event and end (the in-stream form of Gone).
    GoneEvent,
    /// Close, stall, abort or delay the stream.
    Stream(WatchFault),
}

/// Starts a watch and returns its streaming response.
pub(crate) fn start(
    shared: &Arc<Shared>,
    kind: Arc<ResourceKind>,
    params: WatchParams,
    fault: Option<Injected>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Chunk>(1024);
    let resource = kind.storage_name();
    if fault == Some(Injected::GoneEvent) {
        let _ = tx.try_send(Ok(gone_line(
            "too old resource version (injected fault)".into(),
        )));
        return stream_response(rx);
    }
    let fault = match fault {
        Some(Injected::Stream(f)) => Some(f),
        _ => None,
    };
    let mut initial: Vec<Bytes> = Vec::new();
    let filter = Filter {
        kind: kind.clone(),
        api_version: kind.api_version(),
        resource: resource.clone(),
        params,
    };
    let (start_rv, receiver) = match filter.params.resource_version {
        Some(rv) => match shared.store.watch_from(&resource, rv) {
            Ok((replay, receiver)) => {
                initial.extend(replay.iter().filter_map(|e| filter.line_for(e)));
                (replay.last().map_or(rv, |e| e.rv), receiver)
            }
            Err(oldest) => {
                let _ = tx.try_send(Ok(gone_line(format!(
                    "too old resource version: {rv} ({oldest})"
                ))));
                return stream_response(rx);
            }
        },
        None => {
            let (items, rv, receiver) = shared
                .store
                .snapshot(&resource, filter.params.namespace.as_deref());
            for object in items.iter().filter(|o| filter.selects(o)) {
                initial.push(filter.encode("ADDED", object));
            }
            if filter.params.send_initial_events && filter.params.bookmarks {
                initial.push(bookmark(&kind, rv, true));
            }
            (rv, receiver)
        }
    };
    let drop_signal = shared.faults.drop_signal();
    let shutdown = shared.shutdown.clone();
    let interval = shared.config.bookmark_interval;
    let outlet = Outlet::new(tx, fault, shared.faults.stall_gauge());
    tokio::spawn(run(
        filter,
        outlet,
        initial,
        start_rv,
        receiver,
        drop_signal,
        shutdown,
        interval,
    ));
    stream_response(rx)
}

#[allow(clippy::too_many_arguments)]
async fn run(
    filter: Filter,
    mut outlet: Outlet,
    initial: Vec<Bytes>,
    mut progress: u64,
    mut receiver: broadcast::Receiver<Arc<Event>>,
    mut drop_signal: tokio::sync::watch::Receiver<u64>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    bookmark_interval: Duration,
) {
    // No `mark_unchanged` here: the receiver was subscribed before the response went out,
    // so it already ignores earlier drops and sees every later one, including one sent
    // before this task first runs.
    let mut next = outlet.begin().await;
    for chunk in initial {
        if next != Next::Continue {
            break;
        }
        next = outlet.event(chunk).await;
    }
    let until = async move {
        tokio::select! {
            _ = drop_signal.changed() => {}
            _ = shutdown.changed() => {}
        }
    };
    tokio::pin!(until);
    match next {
        Next::Continue => {}
        Next::End => return,
        Next::Stall => return outlet.stall(until.as_mut()).await,
    }
    let deadline = filter
        .params
        .timeout
        .map(|t| tokio::time::Instant::now() + t);
    let timeout = async move {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timeout);
    let mut ticker = tokio::time::interval(bookmark_interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            event = receiver.recv() => match event {
                Ok(event) => {
                    if event.rv <= progress {
                        continue;
                    }
                    progress = event.rv;
                    if let Some(chunk) = filter.line_for(&event) {
                        next = outlet.event(chunk).await;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(resource = %filter.resource, missed, "watcher fell behind; closing its watch");
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = ticker.tick(), if filter.params.bookmarks => {
                next = outlet.other(bookmark(&filter.kind, progress, false)).await;
            }
            _ = &mut timeout => return,
            _ = until.as_mut() => return,
            _ = outlet.closed() => return,
        }
        match next {
            Next::Continue => {}
            Next::End => return,
            Next::Stall => return outlet.stall(until.as_mut()).await,
        }
    }
}
