//! The host put together in one place: the metrics registry, the audit sink, the plugin
//! runtime, the controller, the reloader (and its file watch) and the status server are
//! built here, in that order, from one checked [`HostConfig`]. `kubeplug run` only adds the
//! cluster connection and the signal loop.

mod config;

pub use config::HostConfig;

use crate::controller::{Controller, Drain};
use crate::coordination::Coordinator;
use crate::metrics::MetricsRegistry;
use crate::plugin::{PluginRuntime, RuntimeConfig};
use crate::plugin_objects::{PluginObjects, PluginObjectsConfig, PluginObjectsTask};
use crate::policy::AuditSink;
use crate::reload::{ReloadConfig, ReloadError, Reloader, WatchTask};
use crate::server::{Server, ServerState};
use anyhow::Context;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A running host: plugins from a directory reconciling against one cluster.
pub struct Host {
    controller: Controller,
    reloader: Reloader,
    metrics: MetricsRegistry,
    audit: AuditSink,
    shutdown_timeout: Duration,
    /// Follows file events while held (`None` with `watch: false`, or when watching failed).
    _watch: Option<WatchTask>,
    /// Follows `Plugin` and `PluginPolicy` objects while held.
    _objects: Option<PluginObjectsTask>,
    /// Whether there is a plugins directory to rescan.
    has_files: bool,
    /// Leader election or sharding, when replicas coordinate.
    coordinator: Option<Coordinator>,
    server: Option<Server>,
}

impl Host {
    /// Builds every part of the host against `client`, loads the plugins directory once and
    /// starts following it (`config.watch`) and serving (`config.listen`).
    pub async fn start(client: kube::Client, mut config: HostConfig) -> anyhow::Result<Host> {
        if let Some(dir) = config.plugins.as_ref().filter(|d| !d.is_dir()) {
            anyhow::bail!(
                "plugins directory {} does not exist (or is not a directory)",
                dir.display()
            );
        }
        // One registry and one audit sink for every part (subscribe to `config.controller.audit`
        // before starting to see every record).
        let metrics = config.controller.metrics.clone();
        let audit = config.controller.audit.clone();
        // Plugins, policies, watches and caches run on every replica; the gate decides which
        // keys this one reconciles.
        let coordinator = config
            .coordination
            .as_ref()
            .map(|c| Coordinator::start(client.clone(), c, &metrics));
        if let Some(coordinator) = &coordinator {
            config.controller.gate = coordinator.gate();
        }
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: config.compile_cache.clone(),
            ..RuntimeConfig::default()
        })
        .context("cannot start the plugin runtime")?;
        runtime.register_metrics(&metrics);
        let runtime = Arc::new(runtime);
        let gate = config.controller.gate.clone();
        let identity = config
            .coordination
            .as_ref()
            .map_or(config.controller.host_name.clone(), |c| c.identity.clone());
        let ledger = config.controller.ledger.clone();
        let controller = Controller::new(client.clone(), config.controller);
        // Without a plugins directory the reloader stays empty: never scanned, never watched.
        let files = config.plugins.clone();
        let mut reload = ReloadConfig::new(
            files.as_deref().unwrap_or_else(|| std::path::Path::new("")),
            &config.policies,
        );
        reload.debounce = config.debounce;
        let reloader = Reloader::new(runtime.clone(), controller.clone(), reload);
        if files.is_some() {
            reloader.rescan(false).await?;
        }
        let mut plugin_statuses = None;
        let objects = config.objects.map(|objects| {
            let source = PluginObjects::new(
                client,
                runtime,
                controller.clone(),
                gate,
                audit.clone(),
                PluginObjectsConfig {
                    identity,
                    ..objects
                },
            );
            plugin_statuses = Some(source.statuses());
            source.start()
        });
        // Without file events the host still serves what it loaded, and a rescan still reloads.
        let watch = match config.watch && files.is_some() {
            true => reloader
                .watch()
                .inspect_err(|err| {
                    tracing::error!("{err}: plugins are reloaded on SIGHUP only");
                })
                .ok(),
            false => None,
        };
        let server = match config.listen {
            Some(addr) => {
                let hub = crate::stream::global().clone();
                metrics.register(|r| hub.register(r));
                let state = ServerState {
                    controller: controller.clone(),
                    reloader: reloader.clone(),
                    access: config.access.clone(),
                    hub,
                    coordination: coordinator.clone(),
                    plugin_statuses: plugin_statuses.clone(),
                    ledger: ledger.clone(),
                };
                let server = Server::start(addr, state)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?;
                tracing::info!(addr = %server.addr(), token = config.access.has_token(), "serving /metrics, /healthz, /readyz, /plugins and the live stream at /api/wds/logs");
                Some(server)
            }
            None => None,
        };
        Ok(Host {
            controller,
            reloader,
            metrics,
            audit,
            shutdown_timeout: config.shutdown_timeout,
            _watch: watch,
            _objects: objects,
            has_files: files.is_some(),
            coordinator,
            server,
        })
    }

    /// The controller running the plugins.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// This replica's coordination with others, if any.
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }

    /// The reloader following the plugins directory.
    pub fn reloader(&self) -> &Reloader {
        &self.reloader
    }

    /// The host's metrics registry (what `/metrics` serves).
    pub fn metrics(&self) -> &MetricsRegistry {
        &self.metrics
    }

    /// The audit sink every plugin decision goes to.
    pub fn audit(&self) -> &AuditSink {
        &self.audit
    }

    /// Where the status server listens, if it runs.
    pub fn server_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(Server::addr)
    }

    /// Looks at the plugins and policies again, retrying what failed on unchanged content
    /// (what SIGHUP does).
    pub async fn rescan(&self) -> Result<(), ReloadError> {
        if !self.has_files {
            return Ok(());
        }
        self.reloader.rescan(true).await.map(|_| ())
    }

    /// Drains the controller within the configured shutdown timeout and stops serving.
    pub async fn shutdown(self) -> Drain {
        let timeout = self.shutdown_timeout;
        tracing::info!(
            timeout_s = timeout.as_secs(),
            "shutting down: finishing in-flight reconciles, skipping writes still waiting for a write budget"
        );
        let drain = self.controller.shutdown_within(timeout).await;
        // Only once no call is in flight: give the lease up, or leave the ring, so another
        // replica takes over at once instead of waiting for the lease to expire.
        if let Some(coordinator) = &self.coordinator {
            coordinator.stop(Duration::from_secs(5)).await;
        }
        match drain.abandoned {
            0 => tracing::info!(workers = drain.finished, "drained"),
            n => tracing::warn!(
                abandoned = n,
                finished = drain.finished,
                "shutdown timeout reached: {n} workers abandoned in the middle of a call"
            ),
        }
        drain
    }
}
