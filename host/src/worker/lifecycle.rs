//! A running plugin's life: started from its first revision (its queue built, its workers
//! spawned, joined to the router's feed with every cached key queued once), given new
//! revisions while it runs, halted, and its workers joined. The task handles live here, with
//! the running plugin.

use super::error::StartError;
use super::instance::InstanceName;
use super::metrics::ReconcileMetrics;
use super::revision::Revision;
use super::running::{RunningPlugin, lock};
use crate::actions::{HostWrites, Pipeline};
use crate::cluster::Feed;
use crate::contract::Reason;
use crate::coordination::Gate;
use crate::ledger::Ledger;
use crate::plugin::GuestCpu;
use crate::queue::{FairSlots, QueueConfig, QueueMetrics, WorkQueue};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What every running plugin of a controller is started with.
#[derive(Clone)]
pub(crate) struct Shared {
    /// Runs each call's actions: policy, dry-run, budget, execution, audit.
    pub pipeline: Arc<Pipeline>,
    /// Call durations and reconcile results.
    pub metrics: ReconcileMetrics,
    /// Workqueue rate limiting.
    pub queue: QueueConfig,
    /// Workqueue metrics, labelled by plugin.
    pub queue_metrics: QueueMetrics,
    /// Which keys this replica may reconcile.
    pub gate: Gate,
    /// Workers per running plugin (at least one runs): plugin calls at once.
    pub workers: usize,
    /// How long a key waits for the caches to show the objects its calls created.
    pub expectation_wait: Duration,
    /// The host-wide cap of calls with writes in flight, shared by every plugin.
    pub host_writes: HostWrites,
    /// The plugin calls running at once host-wide, shared fairly among tenants.
    pub calls: FairSlots,
    /// The cores guest code runs on, shared fairly among tenants.
    pub guest_cpu: GuestCpu,
    /// Where every reconcile is recorded, if anywhere.
    pub ledger: Option<Ledger>,
}

/// The tasks of one running plugin.
#[derive(Default)]
pub(super) struct Tasks {
    workers: Vec<JoinHandle<()>>,
    /// Queues every cached key once the current revision's caches have synced.
    enqueue_all: Option<JoinHandle<()>>,
}

/// What joining a running plugin's workers came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drain {
    /// Workers that finished their call and the writes they handed off (or were idle)
    /// before the deadline.
    pub finished: usize,
    /// Workers still busy at the deadline (in a call, or with a write in flight), stopped
    /// where they were.
    pub abandoned: usize,
}

impl RunningPlugin {
    /// Starts instance `name` on `revision`: builds its queue and spawns its workers. Nothing
    /// is queued yet: once the caller has put it in the running set, [`RunningPlugin::prime`]
    /// queues what it must see first.
    pub(crate) fn start(
        name: InstanceName,
        revision: Revision,
        shared: &Shared,
    ) -> Result<Arc<Self>, StartError> {
        // A Plugin object's tenant is its namespace; the operator's files are one tenant.
        let tenant = name.object_ref().map_or("", |(ns, _)| ns).to_string();
        let tenant = tenant.as_str();
        let queue = WorkQueue::new(name.as_str(), &shared.queue, &shared.queue_metrics).map_err(
            |source| StartError::Queue {
                plugin: name.clone(),
                source,
            },
        )?;
        let running = Arc::new(RunningPlugin::new(name, queue, revision, shared, tenant));
        let workers = (0..shared.workers.max(1))
            .map(|_| tokio::spawn(running.clone().work()))
            .collect();
        lock(&running.tasks).workers = workers;
        Ok(running)
    }

    /// Joins the router's `feed` for a plugin the caller has just put in the running set:
    /// every key its primary cache holds when it joins is queued once, as added, and every
    /// change sent after is routed to it. Each key is reconciled once at start-up, whether
    /// the cache had listed (another plugin's watch), had not (its own watch, just started),
    /// or was part-filled (another scope's watch listed while this one had not).
    pub(crate) fn prime(self: &Arc<Self>, feed: &Feed) {
        let plugin = self.clone();
        self.current().primary.join(feed, move |keys| {
            plugin.joined.store(true, Ordering::Release);
            for key in keys {
                plugin.enqueue(key, Reason::Added);
            }
        });
    }

    /// Whether the router routes changes to it yet ([`RunningPlugin::prime`]).
    pub(crate) fn has_joined(&self) -> bool {
        self.joined.load(Ordering::Acquire)
    }

    /// Makes `revision` the one new calls run (calls in flight finish on the old one) and
    /// queues every cached key again (as a resync) once its caches have synced. Returns the
    /// revision replaced.
    pub(crate) fn update(self: &Arc<Self>, revision: Revision) -> Arc<Revision> {
        let old = self.swap(revision);
        self.enqueue_all_later(Reason::Resync);
        old
    }

    /// Queues every cached key once the current revision's caches have synced, replacing
    /// (aborting) a queueing still waiting for an older revision's.
    fn enqueue_all_later(self: &Arc<Self>, reason: Reason) {
        let task = tokio::spawn({
            let running = self.clone();
            async move { running.enqueue_all(reason).await }
        });
        if let Some(previous) = lock(&self.tasks).enqueue_all.replace(task) {
            previous.abort();
        }
    }

    /// Stops taking keys ([`RunningPlugin::stop`]) and stops queueing cached keys; the
    /// workers finish their calls in flight ([`RunningPlugin::join`]).
    pub(crate) fn halt(&self) {
        self.stop();
        if let Some(task) = lock(&self.tasks).enqueue_all.take() {
            task.abort();
        }
    }

    /// Waits for the workers of a halted plugin to end; those still busy at `deadline` (if
    /// any) are abandoned where they are.
    pub(crate) async fn join(&self, deadline: Option<Instant>) -> Drain {
        let workers = std::mem::take(&mut lock(&self.tasks).workers);
        let mut drain = Drain::default();
        for mut worker in workers {
            let Some(deadline) = deadline else {
                let _ = worker.await;
                drain.finished += 1;
                continue;
            };
            if tokio::time::timeout_at(deadline, &mut worker)
                .await
                .is_err()
            {
                worker.abort();
                drain.abandoned += 1;
            } else {
                drain.finished += 1;
            }
        }
        drain
    }
}
