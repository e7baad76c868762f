//! `GET /api/why?kind=K&namespace=NS&name=N[&since=RFC3339][&plugin=P][&limit=L]`: an
//! object's recent reconciles from the decision ledger, oldest first (what `kubeplug why
//! --server` prints and the dashboard's per-object view shows).

use super::ServerState;
use crate::ledger::{Entry, ObjectId, Query};
use axum::Json;
use axum::extract::{Query as Params, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The most entries one answer holds.
pub const MAX_LIMIT: usize = 1000;

/// Ledger reads at once: a client asking in a tight loop queues behind these instead of
/// filling the blocking pool with read transactions the ledger's writer contends with.
static READS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// What `/api/why` takes.
#[derive(Debug, Deserialize)]
pub struct WhyParams {
    kind: String,
    #[serde(default)]
    namespace: String,
    name: String,
    since: Option<String>,
    plugin: Option<String>,
    limit: Option<usize>,
}

/// The answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct WhyReport {
    /// The object asked about.
    pub object: ObjectId,
    /// Its reconciles, oldest first.
    pub entries: Vec<Entry>,
}

fn bad(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

pub(super) async fn why(
    State(state): State<ServerState>,
    Params(p): Params<WhyParams>,
) -> Response {
    let Some(ledger) = state.ledger.clone() else {
        return bad(
            StatusCode::NOT_FOUND,
            "this host keeps no decision ledger (started without a state directory, or it could not be opened)".into(),
        );
    };
    // Names go into an index key: bounded, and no separator inside them.
    for (what, value) in [
        ("kind", &p.kind),
        ("namespace", &p.namespace),
        ("name", &p.name),
    ] {
        if value.len() > 253 || value.contains('/') || (what != "namespace" && value.is_empty()) {
            return bad(
                StatusCode::BAD_REQUEST,
                format!("{what} must be a Kubernetes name (1 to 253 characters, no '/')"),
            );
        }
    }
    let since = match p
        .since
        .as_deref()
        .map(str::parse::<jiff::Timestamp>)
        .transpose()
    {
        Ok(since) => since,
        Err(err) => {
            return bad(
                StatusCode::BAD_REQUEST,
                format!("since must be an RFC 3339 time: {err}"),
            );
        }
    };
    let object = ObjectId {
        kind: p.kind,
        namespace: p.namespace,
        name: p.name,
    };
    let query = Query {
        object: object.index_key(),
        since,
        plugin: p.plugin,
        limit: p.limit.unwrap_or(100).clamp(1, MAX_LIMIT),
    };
    let Ok(_read) = READS.acquire().await else {
        return bad(
            StatusCode::SERVICE_UNAVAILABLE,
            "the ledger is closing".into(),
        );
    };
    match tokio::task::spawn_blocking(move || ledger.history(&query)).await {
        Ok(Ok(entries)) => Json(WhyReport { object, entries }).into_response(),
        Ok(Err(err)) => bad(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        Err(err) => bad(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the ledger read failed: {err}"),
        ),
    }
}
