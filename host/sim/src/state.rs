//! The state one running sim shares between its HTTP handlers and background tasks.

use super::authn::{Tokens, UserInfo};
use super::faults::Faults;
use super::kinds::Registry;
use super::request_log::RequestLog;
use super::store::Store;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

/// Settings fixed at start-up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Create a missing namespace on first write into it instead of answering 404.
    pub auto_create_namespaces: bool,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Delay before a Deployment's simulated status reaches its spec.
    pub status_delay: Duration,
    /// Authentication (bearer tokens) and RBAC authorization on.
    pub rbac: bool,
    /// Keep the JSON body of every write in the request log.
    pub record_write_bodies: bool,
}

/// Everything a request handler needs.
pub struct Shared {
    /// Objects, resourceVersions and event history.
    pub store: Store,
    /// Served kinds.
    pub registry: RwLock<Registry>,
    /// Fault switches.
    pub faults: Faults,
    /// Request log.
    pub log: RequestLog,
    /// Start-up settings.
    pub config: Config,
    /// Ends every watch when the sim shuts down.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The bearer tokens the sim issued.
    pub tokens: Tokens,
    /// The administrator every request acts as when authorization is off.
    pub admin: Arc<UserInfo>,
}

impl Shared {
    /// Read access to the kind registry.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
