//! Settings of the controller host.

use crate::coordination::Gate;
use crate::metrics::MetricsRegistry;
use crate::plugin::Limits;
use crate::policy::AuditSink;
use crate::queue::QueueConfig;
use std::time::Duration;

/// How the controller runs plugins.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Watch and act in this namespace only; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Workers per plugin: keys of one plugin processed at once.
    pub workers: usize,
    /// Workqueue rate limiting.
    pub queue: QueueConfig,
    /// Per-call limits of every plugin.
    pub limits: Limits,
    /// Re-enqueue every cached key this often; `None` disables resyncs.
    pub resync: Option<Duration>,
    /// This host's name (its hostname: a pod's name), which the Events it reports carry as
    /// `reportingInstance`.
    pub host_name: String,
    /// Where audit records go; subscribe before starting to see every record.
    pub audit: AuditSink,
    /// Where the controller registers its metrics (queues, audit decisions).
    pub metrics: MetricsRegistry,
    /// Which keys this replica may reconcile (every key unless replicas coordinate).
    pub gate: Gate,
}

/// Workers per plugin unless configured.
pub const DEFAULT_WORKERS: usize = 2;

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: None,
            workers: DEFAULT_WORKERS,
            queue: QueueConfig::default(),
            limits: Limits::default(),
            resync: None,
            host_name: "kubeplug".into(),
            audit: AuditSink::default(),
            metrics: MetricsRegistry::default(),
            gate: Gate::default(),
        }
    }
}
