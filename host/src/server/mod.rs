//! The host's own HTTP endpoints, for operators and Prometheus: `/metrics`, `/healthz`,
//! `/readyz`, `/plugins` (what runs, and why a plugin file does not) and `/` (the dashboard).

mod dashboard;
mod plugins;

use crate::controller::Controller;
use crate::reload::Reloader;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use tokio::task::JoinHandle;

/// What the endpoints report on.
#[derive(Clone)]
pub struct ServerState {
    /// What runs: plugins, queues, metrics, readiness.
    pub controller: Controller,
    /// What the plugin files hold: `/plugins` shows each file's status.
    pub reloader: Reloader,
}

/// The running server; dropping it stops serving.
pub struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free one) and serves in the background.
    pub async fn start(addr: SocketAddr, state: ServerState) -> std::io::Result<Server> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/", get(dashboard::page))
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(ready))
            .route("/plugins", get(plugins::list))
            .with_state(state);
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!("status server stopped: {err}");
            }
        });
        Ok(Server { addr, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn metrics(
    axum::extract::State(state): axum::extract::State<ServerState>,
) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.controller.metrics_text(),
    )
}

/// Ready once every watch has listed its kind.
async fn ready(axum::extract::State(state): axum::extract::State<ServerState>) -> StatusCode {
    match state.controller.is_synced() {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}
