//! Settings of the controller host.

use crate::actions::DEFAULT_MAX_WRITES_IN_FLIGHT;
use crate::cluster::DEFAULT_WATCH_TIMEOUT;
use crate::coordination::Gate;
use crate::ledger::Ledger;
use crate::metrics::MetricsRegistry;
use crate::plugin::CallLimits;
use crate::policy::AuditSink;
use crate::queue::QueueConfig;
use std::time::Duration;

/// How the controller runs plugins.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Watch and act in this namespace only; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Workers per plugin: plugin calls of one plugin at once. A worker does not wait for
    /// its call's writes: it hands them off and takes the next key (see
    /// [`crate::actions::inflight`]).
    pub workers: usize,
    /// Calls whose writes are in flight at once, over every plugin: the host-wide cap of
    /// each plugin's adaptive limit.
    pub max_writes_in_flight: usize,
    /// Plugin calls running at once, over every plugin: the sandbox pool's size
    /// ([`crate::plugin::RuntimeConfig::max_sandboxes`]), shared fairly among tenants.
    pub max_calls: usize,
    /// Workqueue rate limiting.
    pub queue: QueueConfig,
    /// Per-call limits of every plugin, as checked (a policy may lower or raise them within
    /// the same caps).
    pub limits: CallLimits,
    /// Re-enqueue every cached key this often; `None` disables resyncs.
    pub resync: Option<Duration>,
    /// Whether watches fill their caches from streaming lists (`sendInitialEvents`) rather
    /// than paged lists.
    pub streaming_lists: bool,
    /// The server-side timeout of each watch request: a watch stream that has sent nothing
    /// (no change, no bookmark) for this long plus 5 s is abandoned and resumed.
    pub watch_timeout: Duration,
    /// How long a key waits for the caches to show the objects its calls created before it
    /// is reconciled anyway, as client-go's expectations (5 minutes): the watch ends the
    /// wait as soon as it delivers them (or their deletion), and until then the next call
    /// could miss them and create them again.
    pub expectation_wait: Duration,
    /// This host's name (its hostname: a pod's name), which the Events it reports carry as
    /// `reportingInstance`.
    pub host_name: String,
    /// Where audit records go; subscribe before starting to see every record.
    pub audit: AuditSink,
    /// Where the controller registers its metrics (queues, audit decisions).
    pub metrics: MetricsRegistry,
    /// Which keys this replica may reconcile (every key unless replicas coordinate).
    pub gate: Gate,
    /// Where every reconcile is recorded (`None`: nowhere).
    pub ledger: Option<Ledger>,
}

/// How long a key waits for the objects it created to show in the caches unless configured.
pub const DEFAULT_EXPECTATION_WAIT: Duration = Duration::from_secs(300);

/// Workers per plugin unless configured.
pub const DEFAULT_WORKERS: usize = 2;

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: None,
            workers: DEFAULT_WORKERS,
            max_writes_in_flight: DEFAULT_MAX_WRITES_IN_FLIGHT,
            max_calls: crate::plugin::RuntimeConfig::default().max_sandboxes as usize,
            queue: QueueConfig::default(),
            limits: CallLimits::default(),
            resync: None,
            streaming_lists: false,
            watch_timeout: DEFAULT_WATCH_TIMEOUT,
            expectation_wait: DEFAULT_EXPECTATION_WAIT,
            host_name: "kubeplug".into(),
            audit: AuditSink::default(),
            metrics: MetricsRegistry::default(),
            gate: Gate::default(),
            ledger: None,
        }
    }
}
