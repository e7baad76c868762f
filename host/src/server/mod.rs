//! The host's own HTTP endpoints, for operators and Prometheus: `/metrics`, `/healthz`,
//! `/readyz`, `/plugins` (what runs, and why a plugin file does not), the live stream
//! `/api/wds/logs` (also at `/ws`, where KubeStellar UI's log modal opens it) and `/` (the
//! dashboard, with `/dashboard.js` and `/dashboard.css`, and the plots' data at `/api/plugins`
//! and `/api/plugins/{name}`). All
//! but the probes and `/metrics` answer only requests naming an allowed `Host` (an IP
//! literal, `localhost`, `--allow-host`: against DNS rebinding); the dashboard, `/plugins`
//! and the stream also need the optional token. Every connection is closed once its client
//! accepts nothing for the send timeout.

mod access;
mod dashboard;
mod plugins;
mod series;
mod stall;
mod stream;
mod why;

pub use why::WhyReport;

pub use access::{Access, AccessError, DEFAULT_SEND_TIMEOUT, is_host_pattern};

use crate::controller::Controller;
use crate::reload::Reloader;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use std::net::SocketAddr;
use tokio::task::JoinHandle;

/// What the endpoints report on.
#[derive(Clone)]
pub struct ServerState {
    /// What runs: plugins, queues, metrics, readiness.
    pub controller: Controller,
    /// What the plugin files hold: `/plugins` shows each file's status.
    pub reloader: Reloader,
    /// Token and origin rules.
    pub access: Access,
    /// Where the live stream's records come from.
    pub hub: crate::stream::StreamHub,
    /// Leader election or sharding, when replicas coordinate.
    pub coordination: Option<crate::coordination::Coordinator>,
    /// The status of each Plugin object's instance, when the host follows them.
    pub plugin_statuses: Option<crate::plugin_objects::PluginStatuses>,
    /// The decision ledger `/api/why` reads, when the host keeps one.
    pub ledger: Option<crate::ledger::Ledger>,
}

/// The running server; dropping it stops serving.
pub struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
    sampler: JoinHandle<()>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free one) and serves in the background.
    pub async fn start(addr: SocketAddr, state: ServerState) -> std::io::Result<Server> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let streaming = stream::StreamState {
            hub: state.hub.clone(),
            access: state.access.clone(),
        };
        let plots = series::PlotState {
            server: state.clone(),
            series: series::Series::default(),
        };
        let sampler = series::start(&plots);
        let private = Router::new()
            .route("/", get(dashboard::page))
            .route("/plugins", get(plugins::list))
            .route("/api/why", get(why::why))
            .with_state(state.clone())
            .merge(
                Router::new()
                    .route("/api/plugins", get(series::all))
                    .route("/api/plugins/{name}", get(series::one))
                    .with_state(plots),
            )
            .merge(
                Router::new()
                    .route("/api/wds/logs", get(stream::logs))
                    .route("/ws", get(stream::logs))
                    .with_state(streaming),
            )
            .layer(axum::middleware::from_fn_with_state(
                state.access.clone(),
                access::require_token,
            ));
        // The page's own code is the same for everyone: no token (a <script src> could not
        // carry it), but the Host rule like the page.
        let browser = Router::new()
            .route("/dashboard.js", get(dashboard::script))
            .route("/dashboard.css", get(dashboard::style))
            .merge(private)
            .layer(axum::middleware::from_fn_with_state(
                state.access.clone(),
                access::require_host,
            ));
        let disconnected = Counter::default();
        state.controller.register_metrics(|r| {
            r.register(
                "kubeplug_server_clients_disconnected",
                "Status server clients disconnected because they accepted nothing for the send timeout (in practice live-stream clients that stopped reading)",
                disconnected.clone(),
            )
        });
        let listener =
            stall::GuardedListener::new(listener, state.access.send_timeout(), disconnected);
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(ready))
            .with_state(state)
            .merge(browser);
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(error = %err, "status server stopped");
            }
        });
        Ok(Server {
            addr,
            task,
            sampler,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        self.sampler.abort();
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

/// Ready once every watch has listed its kind (a follower too: its caches are warm for a
/// takeover); the body says whether this replica leads or which ring it is in.
async fn ready(
    axum::extract::State(state): axum::extract::State<ServerState>,
) -> (StatusCode, String) {
    let role = match &state.coordination {
        Some(c) => c.status().summary(),
        None => "single replica".into(),
    };
    match state.controller.is_synced() {
        true => (StatusCode::OK, format!("ready: {role}\n")),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("caches not synced yet: {role}\n"),
        ),
    }
}
