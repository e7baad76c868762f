//! Several replicas on one cluster, coordinated through Kubernetes Leases and nothing else:
//! leader election (one replica reconciles, the others keep warm caches and take over
//! within seconds) or sharding (each key is reconciled by the one member rendezvous hashing
//! gives it, handed over without overlap). Both act through one [`Gate`] that every running
//! plugin's workers pass per key.

mod config;
mod election;
mod gate;
mod held;
mod leader;
mod member;
mod metrics;
mod ring;
mod status;
mod store;

pub use config::{
    APPLIED_RING_ANNOTATION, CoordinationConfig, LeaseTimings, Mode, RING_LABEL, check_identity,
    check_member_lease_name, default_identity,
};
pub use election::{Attempt, Elector, WallClock, system_clock};
pub use gate::{Gate, GateView, Hold, Pass, Scope, ShardView, Stamp};
pub(crate) use held::{LostHold, WhileHeld};
pub use member::Member;
pub use metrics::{CoordinationMetrics, Withheld, count_withheld};
pub use ring::Ring;
pub use status::{CoordinationStatus, RingStatus};
pub use store::{KubeLeases, LeaseError, LeaseStore};

use crate::metrics::MetricsRegistry;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Fires when the coordination loop should stop (and give its Lease up).
pub(crate) type Stop = watch::Receiver<bool>;

/// What the loops share with the rest of the host.
#[derive(Clone)]
pub(crate) struct Shared {
    gate: Gate,
    identity: Arc<str>,
    lease: Arc<str>,
    status: Arc<Mutex<CoordinationStatus>>,
    metrics: CoordinationMetrics,
}

impl Shared {
    fn status(&self) -> std::sync::MutexGuard<'_, CoordinationStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens or closes the gate for leader election, counting transitions.
    fn set_leading(&self, leading: bool, holder: Option<String>) {
        let mut status = self.status();
        if status.leading != Some(leading) {
            if status.leading.is_some() || leading {
                self.metrics.transitions.inc();
            }
            self.metrics.leader.set(leading as i64);
        }
        status.leading = Some(leading);
        status.leader = match leading {
            true => Some(self.identity.to_string()),
            false => holder,
        };
        drop(status);
        self.gate.set(Scope::Leader { leading });
    }

    fn set_ring(&self, ring: Option<RingStatus>) {
        self.metrics
            .members
            .set(ring.as_ref().map_or(0, |r| r.members.len() as i64));
        self.status().ring = ring;
    }
}

/// This replica's coordination: the gate its workers pass, and the loop that moves it.
#[derive(Clone)]
pub struct Coordinator {
    shared: Shared,
    stop: watch::Sender<bool>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Coordinator {
    /// Starts coordinating through Leases on the API server `client` talks to.
    pub fn start(
        client: kube::Client,
        config: &CoordinationConfig,
        metrics: &MetricsRegistry,
    ) -> Coordinator {
        let store = KubeLeases::new(client, &config.lease_namespace);
        Self::start_with(store, config, metrics, system_clock())
    }

    /// Starts coordinating through `store` (tests give one in memory).
    pub fn start_with<S: LeaseStore>(
        store: S,
        config: &CoordinationConfig,
        registry: &MetricsRegistry,
        wall: WallClock,
    ) -> Coordinator {
        let sharding = config.mode == Mode::Sharding;
        let scope = match config.mode {
            Mode::LeaderElection => Scope::Leader { leading: false },
            Mode::Sharding => Scope::Shard(ShardView {
                me: config.identity.as_str().into(),
                current: None,
                settled: None,
            }),
        };
        let gate = Gate::with_wall(scope, wall.clone());
        let metrics = gate.metrics().clone();
        registry.register(|r| metrics.register(r, sharding));
        let shared = Shared {
            gate,
            identity: config.identity.as_str().into(),
            lease: format!("{}/{}", config.lease_namespace, config.lease_name).into(),
            status: Arc::new(Mutex::new(CoordinationStatus {
                mode: match config.mode {
                    Mode::LeaderElection => "leader-election",
                    Mode::Sharding => "sharding",
                },
                identity: config.identity.clone(),
                lease: format!("{}/{}", config.lease_namespace, config.lease_name),
                leading: (!sharding).then_some(false),
                ..CoordinationStatus::default()
            })),
            metrics,
        };
        let (stop, stopped) = watch::channel(false);
        let task = match config.mode {
            Mode::LeaderElection => {
                let elector = Elector::new(
                    store,
                    &config.lease_name,
                    &config.identity,
                    config.timings,
                    wall,
                );
                tokio::spawn(leader::run(elector, shared.clone(), stopped))
            }
            Mode::Sharding => {
                let member = Member::new(
                    store,
                    &config.lease_name,
                    &config.identity,
                    config.timings,
                    wall,
                );
                tokio::spawn(member::run(member, shared.clone(), stopped))
            }
        };
        tracing::info!(identity = %config.identity, lease = %shared.lease, mode = shared.status().mode, lease_duration_s = config.timings.lease_duration.as_secs_f64(), renew_deadline_s = config.timings.renew_deadline.as_secs_f64(), retry_period_s = config.timings.retry_period.as_secs_f64(), "coordinating with other replicas through leases");
        Coordinator {
            shared,
            stop,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// The gate the workers pass.
    pub fn gate(&self) -> Gate {
        self.shared.gate.clone()
    }

    /// What `/plugins` and `/readyz` report.
    pub fn status(&self) -> CoordinationStatus {
        self.shared.status().clone()
    }

    /// Stops coordinating: closes the gate, gives the Lease up (leader) or leaves the ring
    /// (sharding), waiting at most `timeout`. Call it once the workers have drained.
    pub async fn stop(&self, timeout: Duration) {
        self.stop.send_replace(true);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut task) = task
            && tokio::time::timeout(timeout, &mut task).await.is_err()
        {
            task.abort();
            tracing::warn!(
                "the lease was not given up in time: the others take over once it expires"
            );
        }
    }
}
