//! The configuration a host starts with: every setting already checked, so a host that
//! starts has nothing left to refuse. `kubeplug run` builds it from its flags
//! (`cli/run_settings.rs`); tests and embedders build it directly.

use crate::controller::ControllerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How to start a host: where the plugins and policies are, what to serve, and how the
/// controller runs.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Directory of `*.wasm` plugins (`None`: no file source).
    pub plugins: Option<PathBuf>,
    /// Directory of `<plugin>.policy.yaml` files (may be `plugins`).
    pub policies: PathBuf,
    /// Run `Plugin` objects (bounded by `PluginPolicy` objects) once the API server serves
    /// their CRDs (`None`: not followed).
    pub objects: Option<crate::plugin_objects::PluginObjectsConfig>,
    /// Follow file events (hot reload); without, only a rescan (SIGHUP) reloads.
    pub watch: bool,
    /// Quiet time after a file event before rescanning.
    pub debounce: Duration,
    /// Serve `/metrics`, `/healthz`, `/readyz`, `/plugins` and the live stream here.
    pub listen: Option<SocketAddr>,
    /// Token and origin rules of the status server.
    pub access: crate::server::Access,
    /// Where precompiled plugins are cached (`None`: no cache).
    pub compile_cache: Option<PathBuf>,
    /// How the controller runs plugins; its audit sink and metrics registry are the whole
    /// host's (the reloader registers its metrics there, the server serves them).
    pub controller: ControllerConfig,
    /// How long a drain may take on shutdown.
    pub shutdown_timeout: Duration,
    /// Leader election or sharding with other replicas (`None`: this replica reconciles
    /// every key).
    pub coordination: Option<crate::coordination::CoordinationConfig>,
}
