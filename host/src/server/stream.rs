//! `GET /api/wds/logs` and `GET /ws` (the path KubeStellar UI's log modal opens): the live
//! stream as a WebSocket (one JSON text frame per record, or `[timestamp] message` lines with
//! `format=text`) or,
//! with `Accept: text/event-stream`, as Server-Sent Events (one `data:` line per record),
//! for `curl -N` and browsers' `EventSource`. Both transports send the same records from
//! [`records`]: the recent ones replayed first, the client's filter applied, and falling
//! behind turned into a `lagged` record. A client that accepts nothing for the send
//! timeout is disconnected below HTTP, for both alike (see `stall.rs`).

use super::access::Access;
use crate::stream::{Filter, StreamHub};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use std::convert::Infallible;
use std::time::Duration;

/// How often an idle WebSocket is pinged and an idle SSE response gets a comment (keeps
/// them open behind proxies).
const PING_EVERY: Duration = Duration::from_secs(20);

/// What the handler needs.
#[derive(Clone)]
pub struct StreamState {
    /// Where records come from.
    pub hub: StreamHub,
    /// Origin rules for WebSocket handshakes.
    pub access: Access,
}

/// Serves one client, as a WebSocket or as Server-Sent Events.
pub async fn logs(State(state): State<StreamState>, request: Request) -> Response {
    let filter = match Filter::parse(request.uri().query().unwrap_or("")) {
        Ok(filter) => filter,
        Err(err) => return (StatusCode::BAD_REQUEST, format!("{err}\n")).into_response(),
    };
    let (mut parts, _) = request.into_parts();
    let upgrade = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        if !state.access.origin_allowed(&parts.headers) {
            return (
                StatusCode::FORBIDDEN,
                "this origin may not open the stream (see --allow-origin)\n",
            )
                .into_response();
        }
        return match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
            Ok(ws) => ws.on_upgrade(move |socket| websocket(socket, records(&state.hub, filter))),
            Err(rejection) => rejection.into_response(),
        };
    }
    let wants_sse = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if wants_sse {
        let events = records(&state.hub, filter)
            .map(|json| Ok::<_, Infallible>(Event::default().data(json)));
        return Sse::new(events)
            .keep_alive(KeepAlive::new().interval(PING_EVERY))
            .into_response();
    }
    (
        StatusCode::BAD_REQUEST,
        "open this as a WebSocket, or with Accept: text/event-stream\n",
    )
        .into_response()
}

/// The records one client gets, as JSON text (or text lines): the last `since` replayed records its filter
/// wants (oldest first), then the live ones it wants, with a `lagged` record wherever it
/// fell too far behind. The client counts in `kubeplug_stream_clients` until the stream is
/// dropped.
fn records(hub: &StreamHub, filter: Filter) -> impl Stream<Item = String> + Send + use<> {
    let mut sub = hub.subscribe();
    let matching: Vec<String> = sub
        .replay
        .drain(..)
        .filter(|r| filter.matches(r))
        .map(|r| filter.frame(&r).to_string())
        .collect();
    let skip = matching.len().saturating_sub(filter.since);
    let replayed = matching.into_iter().skip(skip);
    let live = futures::stream::unfold((sub, filter), |(mut sub, filter)| async move {
        loop {
            let record = sub.next().await?;
            if filter.matches(&record) {
                let frame = filter.frame(&record).to_string();
                return Some((frame, (sub, filter)));
            }
        }
    });
    futures::stream::iter(replayed).chain(live)
}

/// Sends `records` to a WebSocket client, pinging it every [`PING_EVERY`], until it
/// closes, a send fails (the send timeout fails it for a client that accepts nothing), or
/// the hub is gone.
async fn websocket(mut socket: WebSocket, records: impl Stream<Item = String>) {
    let mut records = std::pin::pin!(records);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        let message = tokio::select! {
            record = records.next() => match record {
                Some(json) => Message::Text(json.into()),
                None => return,
            },
            _ = ping.tick() => Message::Ping(Vec::new().into()),
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => continue,
            },
        };
        if socket.send(message).await.is_err() {
            return;
        }
    }
}
