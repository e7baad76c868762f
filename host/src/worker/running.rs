//! A running plugin: its workqueue, its workers, and what they remember per key.

use super::expectations::{Expectations, Expected};
use super::instance::InstanceName;
use super::lifecycle::{Shared, Tasks};
use super::metrics::{ReconcileMetrics, ReconcileResult};
use super::revision::Revision;
use super::trigger::{Queued, Trigger};
use crate::actions::{
    Answers, Call, CallFailure, CallOutcome, Change, Fence, INITIAL_WRITES_IN_FLIGHT,
    InFlightLimit, Pipeline,
};
use crate::cluster::{CachedObject, CallObjects, ObjKey};
use crate::contract::{Action, ObjectRef, Reason, ReconcileRequest};
use crate::coordination::{Gate, Pass};
use crate::ledger::{Entry, Ledger, ObjectId, Verdict, Written};
use crate::plugin::{CallContext, CpuAccount};
use crate::policy::{Mode, Policy, is_write};
use crate::queue::{TenantSlots, WorkQueue};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;

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
    pipeline: Arc<Pipeline>,
    /// Set when the plugin is removed: queued keys are dropped, not processed, and writes
    /// still waiting for the write budget are skipped.
    stopped: tokio::sync::watch::Sender<bool>,
    /// What queued each queued key since its last call (the latest reason goes to the
    /// plugin; the ledger records them all).
    reasons: Mutex<HashMap<ObjKey, Queued>>,
    /// The object version each key was last reconciled successfully at (when the plugin
    /// asks for it).
    last_ok: Mutex<HashMap<ObjKey, Arc<str>>>,
    /// Keys whose last patch the cache has not shown yet, and keys whose fenced write was
    /// refused until the cache shows the object's newer version.
    expectations: Expectations,
    /// Call durations and reconcile results.
    metrics: ReconcileMetrics,
    /// Which keys this replica may reconcile now.
    gate: Gate,
    /// How many of its calls may have writes in flight (adapts to the API server).
    writes: Arc<InFlightLimit>,
    /// Its tenant's share of the plugin calls the host runs at once.
    calls: TenantSlots,
    /// The tenant's share of the cores for its guest code.
    cpu: CpuAccount,
    /// Where its reconciles are recorded, if anywhere.
    ledger: Option<Ledger>,
}

/// How soon a key whose write was refused looks at the cache again (see
/// [`Expectations::recheck_after`] for later looks).
const EXPECTATION_RECHECK: Duration = Duration::from_millis(20);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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

    fn is_stopped(&self) -> bool {
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
        let kept = trigger.kept(self.ledger.is_some());
        lock(&self.reasons)
            .entry(key.clone())
            .or_default()
            .add(kept);
        self.queue.add(key);
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

    /// Works keys off the queue until it shuts down: one plugin call at a time, while the
    /// writes of calls it decided earlier run beside it (see [`Taken::Writing`]). Returns once
    /// the queue is shut down and its writes in flight have ended. A key this replica may
    /// not reconcile now (another replica leads, or owns it) is dropped: it is queued again
    /// when this replica gains it.
    ///
    /// The writes are futures of this task, not tasks of their own, so a worker and the
    /// writes it handed off end together: a drain waits for both, and abandoning the worker
    /// at the shutdown deadline drops its writes.
    pub(crate) async fn work(self: Arc<Self>) {
        let mut writes: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        let mut call: Option<BoxFuture<'static, Taken>> = Some(Box::pin(self.clone().take()));
        while let Some(current) = call.as_mut() {
            let taken = tokio::select! {
                Some(()) = writes.next(), if !writes.is_empty() => None,
                taken = current => Some(taken),
            };
            match taken {
                None => {}
                Some(Taken::Closed) => call = None,
                Some(Taken::Done) => call = Some(Box::pin(self.clone().take())),
                Some(Taken::Writing(write)) => {
                    writes.push(write);
                    call = Some(Box::pin(self.clone().take()));
                }
            }
        }
        while writes.next().await.is_some() {}
    }

    /// Takes the next key and runs its call; `Closed` once the queue is shut down and empty.
    async fn take(self: Arc<Self>) -> Taken {
        let Some(key) = self.queue.get().await else {
            return Taken::Closed;
        };
        if self.is_stopped() {
            self.queue.done(&key);
            return Taken::Done;
        }
        let Some(pass) = self.gate.enter(&key) else {
            lock(&self.reasons).remove(&key);
            self.queue.forget(&key);
            self.queue.done(&key);
            return Taken::Done;
        };
        let started = std::time::SystemTime::now();
        // The slot is taken before the plugin decides, not after: a decision held back while
        // the writes in flight are at their limit would go out stale (the object moved on,
        // 409 Conflict, one more call); measured with the e2e bench, waiting after deciding
        // had 3,466 of 13,466 cold-start patches refused. The worker waits here, holding the
        // key, while the plugin's writes are at their limit: a slow API server slows the
        // calls down. A call that writes nothing gives its slot back untouched.
        let permit = self.writes.acquire(write_cap(&self.current().policy)).await;
        // The wait for a slot may have outlasted the key (a pause, a lapse, a new ring): a
        // call on a key this replica no longer holds does not start.
        if !pass.holds() {
            drop(permit);
            lock(&self.reasons).remove(&key);
            self.queue.forget(&key);
            self.end(&key, pass, started);
            return Taken::Done;
        }
        let Some(decided) = self.decide(&key).await else {
            drop(permit);
            self.end(&key, pass, started);
            return Taken::Done;
        };
        let revision = &decided.revision;
        let writes = revision.policy.mode == Mode::Enforce && decided.actions.iter().any(is_write);
        if !writes {
            drop(permit);
            self.act(&key, &pass, decided).await;
            self.end(&key, pass, started);
            return Taken::Done;
        }
        Taken::Writing(Box::pin(async move {
            let answers = self.act(&key, &pass, decided).await;
            permit.answered(&answers);
            self.end(&key, pass, started);
        }))
    }

    /// The key's call is over (its writes too): the gate's pass ends and the queue may hand
    /// the key out again (it waits for its own write to be seen, see [`Expectations`]).
    fn end(&self, key: &ObjKey, pass: Pass, started: std::time::SystemTime) {
        if self.gate.is_coordinated() {
            span(&self.name, key, started);
        }
        drop(pass);
        self.queue.done(key);
    }

    /// Records one reconcile in the ledger, if there is one: what the plugin saw, and either
    /// its actions and what became of them or why the call failed.
    fn record(
        &self,
        seen: Seen<'_>,
        acted: Option<(&[Action], &CallOutcome)>,
        error: Option<String>,
    ) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        let Seen {
            revision,
            request,
            queued,
            cached,
            reads,
        } = seen;
        let target = &request.target;
        let (actions, writes, count) = match acted {
            Some((actions, outcome)) => (
                outcome
                    .decisions
                    .iter()
                    .take(crate::ledger::MAX_ACTIONS)
                    .map(Verdict::of)
                    .collect(),
                outcome
                    .writes
                    .iter()
                    .take(crate::ledger::MAX_ACTIONS)
                    .map(|w| Written {
                        change: w.change.as_str().to_string(),
                        object: w.object.to_string(),
                        resource_version: w.resource_version.clone(),
                    })
                    .collect(),
                actions.len(),
            ),
            None => (Vec::new(), Vec::new(), 0),
        };
        let (read, read_count) = reads.summary(crate::ledger::MAX_ACTIONS);
        ledger.offer(Entry {
            time: jiff::Timestamp::now(),
            object: ObjectId {
                kind: target.kind.clone(),
                namespace: target.namespace.clone().unwrap_or_default(),
                name: target.name.clone(),
            },
            plugin: self.name.to_string(),
            digest: revision.identity.digest.clone(),
            reason: request.reason.as_str().to_string(),
            attempt: request.attempt,
            resource_version: cached.map(|o| o.resource_version.to_string()),
            reads: read,
            read_count,
            triggers: queued
                .triggers
                .iter()
                .filter_map(|t| t.record.clone())
                .collect(),
            queued: queued.count,
            actions,
            action_count: count,
            writes,
            error,
        });
    }

    fn request(
        &self,
        revision: &Revision,
        key: &ObjKey,
        cached: Option<&CachedObject>,
    ) -> (ReconcileRequest, Queued) {
        let requeues = self.queue.num_requeues(key);
        let mut queued = lock(&self.reasons).remove(key).unwrap_or_default();
        if queued.triggers.is_empty() {
            // Queued by the queue itself: a retry's backoff, or a requeue-after.
            let reason = match requeues > 0 {
                true => Reason::Retry,
                false => Reason::Requeue,
            };
            queued.add(Trigger::only(reason).kept(self.ledger.is_some()));
        }
        let reason = queued.reason().unwrap_or(Reason::Requeue);
        let kind = &revision.plugin.metadata().reconciles;
        let previous = if revision.plugin.metadata().wants_previous {
            lock(&self.last_ok).get(key).cloned()
        } else {
            None
        };
        let request = ReconcileRequest {
            target: ObjectRef {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            },
            object: cached.map(|o| o.json.clone()),
            previous,
            reason,
            attempt: requeues + 1,
            config: revision.config.clone(),
        };
        (request, queued)
    }

    /// The plugin's half of one reconcile: waits for the caches and the key's expectations,
    /// calls the plugin, and handles a failed call. `None` when there
    /// is nothing to act on (the key was re-queued or forgotten as the failure asks).
    async fn decide(&self, key: &ObjKey) -> Option<Decided> {
        let name = &*self.name;
        // This call runs on the revision current now, whatever is swapped in meanwhile.
        let revision = self.current();
        for cache in &revision.caches {
            cache.wait_synced().await;
        }
        if !self
            .expectations
            .satisfied(key, Instant::now(), |kind, object| {
                revision.cached(kind, object)
            })
        {
            // Our last write, or the version our refused write was fenced on, is not in the
            // cache yet: reconciling now would act on the old object.
            let recheck = self.expectations.recheck_after(key, Instant::now());
            self.queue.add_after(key.clone(), recheck);
            return None;
        }
        // Sandboxes are a host-wide pool: each tenant gets its share while others wait, so a
        // tenant whose calls spend their whole budget delays its own plugins, not another's.
        // Taken before the object is read: a call that waited for its slot acts on the object
        // as it is when the call starts, not as it was before the wait (its writes would be
        // refused as conflicts).
        let slot = self.calls.acquire().await;
        let cached = revision.primary.get(key);
        let (request, queued) = self.request(&revision, key, cached.as_deref());
        // The call reads through a record of its own: its writes to what it read are fenced
        // with the versions it saw.
        let reads = Arc::new(CallObjects::new(revision.objects.clone()));
        let ctx = CallContext {
            objects: reads.clone(),
            cpu: Some(self.cpu.clone()),
            ..revision.ctx.clone()
        };
        let (plugin, req) = (revision.plugin.clone(), request.clone());
        // A task of its own on the runtime (guest code yields at every epoch tick, so a call
        // never holds a runtime thread for longer than one), so a panic in the call is
        // caught here as a failed task.
        let report = tokio::spawn(async move { plugin.reconcile(&req, &ctx).await }).await;
        drop(slot);
        // A call that failed is recorded with what it saw and why.
        let failed = |error: String| {
            let seen = Seen {
                revision: &revision,
                request: &request,
                queued: &queued,
                cached: cached.as_deref(),
                reads: &reads,
            };
            self.record(seen, None, Some(error));
        };
        let report = match report {
            Ok(report) => report,
            Err(err) => {
                tracing::error!(record = "reconcile", result = "error", plugin = name, %key, "plugin call task failed: {err}");
                failed(format!("plugin call task failed: {err}"));
                self.metrics.count(name, ReconcileResult::HostError);
                self.queue.add_rate_limited(key.clone());
                return None;
            }
        };
        self.metrics.observe_call(name, report.elapsed);
        if let Err(err) = &report.outcome {
            self.metrics.count(name, ReconcileResult::of_call(err));
        }
        if let Err(err) = &report.outcome {
            failed(err.to_string());
        }
        let actions = match report.outcome {
            Ok(actions) => actions,
            Err(err) if err.is_transient() => {
                tracing::warn!(record = "reconcile", result = err.kind(), plugin = name, %key, attempt = request.attempt, error = err.kind(), "reconcile failed, will retry: {err}");
                self.queue.add_rate_limited(key.clone());
                return None;
            }
            Err(err) => {
                tracing::error!(record = "reconcile", result = err.kind(), plugin = name, %key, error = err.kind(), "reconcile failed, not retried until the object changes: {err}");
                self.queue.forget(key);
                return None;
            }
        };
        Some(Decided {
            revision,
            request,
            queued,
            cached,
            reads,
            actions,
            elapsed: report.elapsed,
        })
    }

    /// The host's half: executes a decided call's actions, and tells the queue what to do
    /// with the key. Returns what the API server's answers said (for the write limit).
    async fn act(&self, key: &ObjKey, pass: &Pass, decided: Decided) -> Answers {
        let name = &*self.name;
        let Decided {
            revision,
            request,
            queued,
            cached,
            reads,
            actions,
            elapsed,
        } = decided;
        let call = Call {
            plugin: name,
            key: &key.to_string(),
            identity: &revision.identity,
            policy: &revision.policy,
            budget: &revision.budget,
            logs: revision.plugin.as_ref(),
            stopped: self.stopped.subscribe(),
            holds: &|| pass.hold(),
            fence: Fence::decided_on(
                &request.target,
                cached.as_ref().map(|o| o.resource_version.as_str()),
                &actions,
                |wanted| reads.first_versions(wanted),
            ),
        };
        let outcome = self.pipeline.run(call, &actions).await;
        let failure = outcome.failure.as_ref().map(ToString::to_string);
        self.record(
            Seen {
                revision: &revision,
                request: &request,
                queued: &queued,
                cached: cached.as_deref(),
                reads: &reads,
            },
            Some((&actions, &outcome)),
            failure,
        );
        self.metrics
            .count(name, ReconcileResult::of_actions(outcome.failure.as_ref()));
        // Wait for our own writes to show before reconciling it again, whatever became of
        // the call's later actions: a retry after a failed status patch must still see the
        // children the call created before it.
        self.expect_own_writes(key, &request, &outcome);
        match &outcome.failure {
            Some(CallFailure::Conflict {
                object, fenced_at, ..
            }) => self.conflicted(key, object, fenced_at),
            Some(f) if f.is_transient() => self.queue.add_rate_limited(key.clone()),
            Some(_) => self.queue.forget(key),
            None => {
                self.queue.forget(key);
                if revision.plugin.metadata().wants_previous {
                    let mut last = lock(&self.last_ok);
                    match &request.object {
                        Some(o) => last.insert(key.clone(), o.clone()),
                        None => last.remove(key),
                    };
                }
                if let Some(delay) = outcome.requeue_after {
                    self.queue.add_after(key.clone(), delay);
                }
            }
        }
        match &request.object {
            // As the change logger this grew from said it, for every plugin.
            None => {
                tracing::info!(record = "reconcile", result = "deleted", plugin = name, %key, "{} {key} has been deleted", request.target.kind)
            }
            Some(_) => {
                tracing::debug!(record = "reconcile", result = "success", plugin = name, %key, actions = actions.len(), elapsed_us = elapsed.as_micros() as u64, "reconciled")
            }
        }
        outcome.answers
    }
}

/// What a call saw, as the ledger records it.
struct Seen<'a> {
    revision: &'a Revision,
    request: &'a ReconcileRequest,
    queued: &'a Queued,
    cached: Option<&'a CachedObject>,
    reads: &'a CallObjects,
}

/// What a worker's turn came to.
enum Taken {
    /// The queue is shut down and empty.
    Closed,
    /// The key's call is over.
    Done,
    /// The key's call was decided and holds a write slot: its actions run in this future,
    /// beside the worker's next call; the key stays held until the future ends.
    Writing(BoxFuture<'static, ()>),
}

/// A call the plugin answered, waiting to be acted on.
struct Decided {
    /// The revision the call ran on (its policy, budget and identity act on it).
    revision: Arc<Revision>,
    request: ReconcileRequest,
    /// What queued the key.
    queued: Queued,
    /// The object handed to the plugin.
    cached: Option<Arc<CachedObject>>,
    /// What the call read, whose versions fence its writes.
    reads: Arc<CallObjects>,
    actions: Vec<Action>,
    /// How long the plugin took.
    elapsed: Duration,
}

/// The most calls of a plugin under `policy` may have writes in flight: its write burst
/// when its write rate is limited (writes beyond it would wait for tokens anyway), the
/// host-wide cap otherwise.
fn write_cap(policy: &Policy) -> usize {
    let rate = policy.limits.write_rate();
    match rate.per_second().is_finite() {
        true => rate.burst() as usize,
        false => usize::MAX,
    }
}

impl RunningPlugin {
    /// Waits for the cache to show the key's object at the version its last patch in this
    /// call left it at, if the call patched it, and each other object the call deleted
    /// (having read it) gone or past the version it was deleted at: otherwise the next call,
    /// queued by the first deletion's event, could still find a later one in the cache and
    /// delete it again (a CustomCluster going from 3 Pods to 1 sent 3 deletes for 2 Pods).
    /// Likewise each object it created in the key's namespace (where an owner's children
    /// live, and which a host watching one namespace caches) until the cache holds it: else
    /// the next call could miss it and create another.
    fn expect_own_writes(&self, key: &ObjKey, request: &ReconcileRequest, outcome: &CallOutcome) {
        let now = Instant::now();
        if let Some(rv) = outcome.patched(&request.target) {
            self.expectations
                .expect(key, Expected::reached(&request.target, rv), now);
        }
        for write in &outcome.writes {
            if let (Change::Deleted, Some(version)) = (write.change, &write.decided_on)
                && write.object != request.target
            {
                self.expectations
                    .expect(key, Expected::passed(&write.object, version), now);
            }
            if let (Change::Created, Some(version)) = (write.change, &write.resource_version)
                && write.object.namespace == key.namespace
                && !write.object.name.is_empty()
            {
                self.expectations
                    .expect(key, Expected::created(&write.object, version), now);
            }
        }
    }

    /// A fenced write of the call on `object` was refused: the object moved past `fenced_at`
    /// since the plugin decided. The key is not retried with backoff; it is reconciled again
    /// (as a change) once the cache shows a newer version of `object`, or after
    /// 2 s at the latest (see [`Expectations`]). The call's own writes are already awaited.
    fn conflicted(&self, key: &ObjKey, object: &ObjectRef, fenced_at: &str) {
        let name = &*self.name;
        self.metrics.count_conflict(name);
        self.queue.forget(key);
        self.expectations
            .expect(key, Expected::passed(object, fenced_at), Instant::now());
        lock(&self.reasons)
            .entry(key.clone())
            .or_default()
            .add(Trigger::only(Reason::Changed).kept(self.ledger.is_some()));
        self.queue.add_after(key.clone(), EXPECTATION_RECHECK);
        tracing::info!(record = "reconcile", result = "conflict", plugin = name, %key, object = %crate::contract::text::shown(&object.to_string()), fenced_at, "a write was refused: the object changed after the version the plugin decided on; reconciling again once the cache shows the newer one");
    }
}

/// Records when a reconcile on `key` ran on this replica, so the reconciles of several
/// replicas can be checked never to overlap (debug level, target `kubeplug::coordination`).
fn span(plugin: &str, key: &ObjKey, started: std::time::SystemTime) {
    let micros = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    tracing::debug!(target: "kubeplug::coordination", plugin, %key, start_us = micros(started), end_us = micros(std::time::SystemTime::now()), "reconcile span");
}
