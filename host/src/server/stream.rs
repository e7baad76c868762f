//! `GET /api/wds/logs`: the live stream as a WebSocket (one JSON text frame per record) or,
//! with `Accept: text/event-stream`, as Server-Sent Events (one `data:` line per record),
//! for `curl -N` and browsers' `EventSource`. Both replay the recent records first, apply
//! the client's filter, and turn falling behind into a `lagged` record.

use super::access::Access;
use crate::stream::{Filter, StreamHub};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::convert::Infallible;
use std::time::Duration;

/// How often an idle WebSocket is pinged (keeps it open behind proxies).
const PING_EVERY: Duration = Duration::from_secs(20);
/// A client that accepts nothing for this long is disconnected.
const SEND_TIMEOUT: Duration = Duration::from_secs(60);

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
            Ok(ws) => ws.on_upgrade(move |socket| websocket(socket, state.hub, filter)),
            Err(rejection) => rejection.into_response(),
        };
    }
    let wants_sse = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if wants_sse {
        return server_sent_events(state.hub, filter).into_response();
    }
    (
        StatusCode::BAD_REQUEST,
        "open this as a WebSocket, or with Accept: text/event-stream\n",
    )
        .into_response()
}

/// The replayed records this filter wants: the last `since` of them, oldest first.
fn replay(sub: &crate::stream::Subscription, filter: &Filter) -> Vec<String> {
    let matching: Vec<&String> = sub
        .replay
        .iter()
        .filter(|r| filter.matches(r))
        .map(|r| &r.json)
        .collect();
    let skip = matching.len().saturating_sub(filter.since);
    matching.into_iter().skip(skip).cloned().collect()
}

async fn websocket(mut socket: WebSocket, hub: StreamHub, filter: Filter) {
    let mut sub = hub.subscribe();
    for json in replay(&sub, &filter) {
        if !send(&mut socket, Message::Text(json.into())).await {
            return;
        }
    }
    sub.replay.clear();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            record = sub.next() => match record {
                Some(record) if filter.matches(&record) => {
                    if !send(&mut socket, Message::Text(record.json.clone().into())).await {
                        return;
                    }
                }
                Some(_) => {}
                None => return,
            },
            _ = ping.tick() => {
                if !send(&mut socket, Message::Ping(Vec::new().into())).await {
                    return;
                }
            }
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

/// Sends one message; false when the client is gone or accepted nothing for a minute.
async fn send(socket: &mut WebSocket, message: Message) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, socket.send(message)).await,
        Ok(Ok(()))
    )
}

fn server_sent_events(
    hub: StreamHub,
    filter: Filter,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let mut sub = hub.subscribe();
    let replayed = replay(&sub, &filter);
    sub.replay.clear();
    let live = futures::stream::unfold((sub, filter), |(mut sub, filter)| async move {
        loop {
            let record = sub.next().await?;
            if filter.matches(&record) {
                let json = record.json.clone();
                return Some((json, (sub, filter)));
            }
        }
    });
    let events = futures::stream::iter(replayed)
        .chain(live)
        .map(|json| Ok(Event::default().data(json)));
    Sse::new(events).keep_alive(KeepAlive::new().interval(PING_EVERY))
}
