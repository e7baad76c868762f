//! A running plugin: its workqueue, the state its workers share, and how keys are queued
//! (each with what queued it). The workers' turns are in [`turn`](super::turn), one
//! reconcile's two halves in [`reconcile`](super::reconcile), the request the plugin is
//! handed in [`request`](super::request), what a call's writes leave a key waiting for in
//! [`own_writes`](super::own_writes), and its ledger entry in
//! [`ledger_entry`](super::ledger_entry).

use super::expectations::Expectations;
use super::instance::InstanceName;
use super::lifecycle::{Shared, Tasks};
use super::metrics::ReconcileMetrics;
use super::revision::Revision;
use super::trigger::{Queued, Trigger};
use crate::actions::{INITIAL_WRITES_IN_FLIGHT, InFlightLimit, Pipeline};
use crate::cluster::ObjKey;
use crate::contract::Reason;
use crate::coordination::Gate;
use crate::ledger::Ledger;
use crate::plugin::CpuAccount;
use crate::queue::{TenantSlots, WorkQueue};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

/// A running plugin: an instance the controller runs, with its queue, its workers' tasks and
/// the state they share. Its [`Revision`] (plugin, policy, caches) can be swapped while it
/// runs; the queue and the per-key state stay.
pub(crate) struct RunningPlugin {
    pub name: InstanceName,
    pub queue: WorkQueue<ObjKey>,
    revision: RwLock<Arc<Revision>>,
    /// Its workers and the task queueing every cached key ([`lifecycle`](super::lifecycle)).
    pub(super) tasks: Mutex<Tasks>,
    /// Runs each call's actions: policy, dry-run, budget, execution, audit.
    pub(super) pipeline: Arc<Pipeline>,
    /// Set when the plugin is removed: queued keys are dropped, not processed, and writes
    /// still waiting for the write budget are skipped.
    pub(super) stopped: tokio::sync::watch::Sender<bool>,
    /// What queued each queued key since its last call (the latest reason goes to the
    /// plugin; the ledger records them all).
    pub(super) reasons: Mutex<HashMap<ObjKey, Queued>>,
    /// The object version each key was last reconciled successfully at (when the plugin
    /// asks for it).
    pub(super) last_ok: Mutex<HashMap<ObjKey, Arc<str>>>,
    /// Keys whose last patch the cache has not shown yet, and keys whose fenced write was
    /// refused until the cache shows the object's newer version.
    pub(super) expectations: Expectations,
    /// Call durations and reconcile results.
    pub(super) metrics: ReconcileMetrics,
    /// Which keys this replica may reconcile now.
    pub(super) gate: Gate,
    /// How many of its calls may have writes in flight (adapts to the API server).
    pub(super) writes: Arc<InFlightLimit>,
    /// Its tenant's share of the plugin calls the host runs at once.
    pub(super) calls: TenantSlots,
    /// The tenant's share of the cores for its guest code.
    pub(super) cpu: CpuAccount,
    /// Where its reconciles are recorded, if anywhere.
    pub(super) ledger: Option<Ledger>,
    /// Set by the router when it joins the feed: changes are routed to it from then on.
    pub(super) joined: AtomicBool,
}

pub(super) use crate::sync::lock;

impl RunningPlugin {
    /// Instance `name` on `revision`, with the controller's shared parts; its writes and calls
    /// count against `tenant`'s shares of the host-wide caps.
    pub(super) fn new(
        name: InstanceName,
        queue: WorkQueue<ObjKey>,
        revision: Revision,
        shared: &Shared,
        tenant: &str,
    ) -> Self {
        let pipeline = shared.pipeline.clone();
        let metrics = shared.metrics.clone();
        let gate = shared.gate.clone();
        let writes = InFlightLimit::new(
            shared.workers.max(INITIAL_WRITES_IN_FLIGHT),
            shared.host_writes.clone(),
            tenant,
        );
        let calls = shared.calls.for_tenant(tenant);
        let cpu = shared.guest_cpu.account(tenant);
        RunningPlugin {
            name,
            queue,
            revision: RwLock::new(Arc::new(revision)),
            tasks: Mutex::default(),
            pipeline,
            stopped: tokio::sync::watch::Sender::new(false),
            reasons: Mutex::default(),
            last_ok: Mutex::default(),
            expectations: Expectations::new(shared.expectation_wait),
            metrics,
            gate,
            writes,
            calls,
            cpu,
            ledger: shared.ledger.clone(),
            joined: AtomicBool::new(false),
        }
    }

    /// Its calls with writes in flight now, and their limit.
    pub(crate) fn writes(&self) -> (usize, usize) {
        (self.writes.in_flight(), self.writes.limit())
    }

    /// The revision new calls run.
    pub(crate) fn current(&self) -> Arc<Revision> {
        self.revision
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `revision` the one new calls run; calls in flight finish on the old one.
    pub(super) fn swap(&self, revision: Revision) -> Arc<Revision> {
        let mut current = self.revision.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *current, Arc::new(revision))
    }

    /// Stops taking keys: queued ones are dropped, calls in flight finish, and their writes
    /// still waiting for the write budget are skipped (a removal must not wait out a slow
    /// budget).
    pub(super) fn stop(&self) {
        self.stopped.send_replace(true);
        self.queue.shut_down();
    }

    /// Whether [`Self::stop`] was called.
    pub(super) fn is_stopped(&self) -> bool {
        *self.stopped.borrow()
    }

    /// Once the current revision's caches have synced, queues every cached key of the kind
    /// it reconciles (a new plugin, or a new revision that should look at everything again).
    pub(crate) async fn enqueue_all(&self, reason: Reason) {
        for cache in &self.current().caches {
            cache.wait_synced().await;
        }
        self.enqueue_cached(reason);
    }

    /// Queues every key the cache of the kind it reconciles holds now.
    pub(crate) fn enqueue_cached(&self, reason: Reason) {
        for key in self.current().primary.keys() {
            self.enqueue(key, reason);
        }
    }

    /// Queues `key`, remembering why (the latest reason wins). Keys outside the namespaces
    /// the policy grants are never queued.
    pub(crate) fn enqueue(&self, key: ObjKey, reason: Reason) {
        self.enqueue_with(key, Trigger::only(reason));
    }

    /// [`Self::enqueue`], with the change that queued it (kept for the ledger only while a
    /// ledger records the calls).
    pub(crate) fn enqueue_with(&self, key: ObjKey, trigger: Trigger) {
        if !self.current().grants_namespace(key.namespace.as_deref()) {
            return;
        }
        self.remember(&key, trigger);
        self.queue.add(key);
    }

    /// Adds `trigger` to what queued `key` since its last call (kept for the ledger only
    /// while a ledger records the calls).
    pub(super) fn remember(&self, key: &ObjKey, trigger: Trigger) {
        let kept = trigger.kept(self.ledger.is_some());
        lock(&self.reasons)
            .entry(key.clone())
            .or_default()
            .add(kept);
    }

    /// Queues this plugin's keys in `namespace` (its labels changed: a label selector in the
    /// policy may now grant or refuse it).
    pub(crate) fn namespace_changed(&self, namespace: &str) {
        let revision = self.current();
        if revision.policy.grants.namespaces.selector().is_none() {
            return;
        }
        for key in revision.primary.keys() {
            if key.namespace.as_deref() == Some(namespace) {
                self.enqueue(key, Reason::Changed);
            }
        }
    }
}
