//! A worker's turns: it takes a key off the queue, waits for a write slot while the key's
//! replica still holds it, has the plugin decide, and acts; a call that writes hands its
//! writes off to run beside the worker's next call, so a slow API server holds the key, not
//! the worker.

use super::running::{RunningPlugin, lock};
use crate::cluster::ObjKey;
use crate::coordination::Pass;
use crate::policy::{Mode, Policy, is_write};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::sync::Arc;

/// What a worker's turn came to.
pub(super) enum Taken {
    /// The queue is shut down and empty.
    Closed,
    /// The key's call is over.
    Done,
    /// The key's call was decided and holds a write slot: its actions run in this future,
    /// beside the worker's next call; the key stays held until the future ends.
    Writing(BoxFuture<'static, ()>),
}

impl RunningPlugin {
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
        drive(move || Box::pin(self.clone().take())).await;
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
    /// the key out again (it waits for its own write to be seen, see
    /// [`Expectations`](super::expectations::Expectations)).
    fn end(&self, key: &ObjKey, pass: Pass, started: std::time::SystemTime) {
        if self.gate.is_coordinated() {
            span(&self.name, key, started);
        }
        drop(pass);
        self.queue.done(key);
    }
}

/// A worker's loop over the turns `take` starts: one at a time, each handed-off write
/// polled beside the turns that follow it, until a turn finds the queue closed; then the
/// writes still in flight are awaited.
async fn drive(mut take: impl FnMut() -> BoxFuture<'static, Taken>) {
    let mut writes: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
    let mut call: Option<BoxFuture<'static, Taken>> = Some(take());
    while let Some(current) = call.as_mut() {
        let taken = tokio::select! {
            Some(()) = writes.next(), if !writes.is_empty() => None,
            taken = current => Some(taken),
        };
        match taken {
            None => {}
            Some(Taken::Closed) => call = None,
            Some(Taken::Done) => call = Some(take()),
            Some(Taken::Writing(write)) => {
                writes.push(write);
                call = Some(take());
            }
        }
    }
    while writes.next().await.is_some() {}
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

/// Records when a reconcile on `key` ran on this replica, so the reconciles of several
/// replicas can be checked never to overlap (debug level, target `kubeplug::coordination`).
fn span(plugin: &str, key: &ObjKey, started: std::time::SystemTime) {
    let micros = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    tracing::debug!(target: "kubeplug::coordination", plugin, %key, start_us = micros(started), end_us = micros(std::time::SystemTime::now()), "reconcile span");
}

#[cfg(test)]
mod tests;
