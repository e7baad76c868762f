//! The workqueue: client-go's `workqueue.Typed` (dirty and processing sets) combined with its
//! delaying queue and rate-limiting queue; each running plugin has its own.
//!
//! Semantics kept from client-go: a key added many times before it is handed out is handed out
//! once; a key is never held by two workers; a key added while it is being processed is queued
//! again when the worker calls [`WorkQueue::done`]; after shutdown adds are ignored and
//! [`WorkQueue::get`] keeps returning queued keys, then `None`.
//!
//! Deliberate differences:
//! - A key is handed straight to the worker that has waited longest, so workers are served in
//!   FIFO order and a newcomer cannot take a key from a worker already waiting; `get` is
//!   cancel-safe (a key handed to a `get` that is dropped goes back to the front of the queue).
//! - [`WorkQueue::add_after`] on a key already waiting in the queue does nothing: the pass it
//!   is waiting for will see the latest state anyway. client-go would run it once more later.
//! - `get` returns `Option<K>` instead of `(item, shutdown)`.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::background;
use super::config::{ConfigError, QueueConfig};
use super::delay::Waiting;
use super::metrics::{QueueInstruments, QueueMetrics};
use super::rate_limit::RateLimiter;

/// What a queue key must be: the controller uses an object reference such as namespace/name.
pub trait QueueKey: Clone + Eq + Hash + Send + Sync + 'static {}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> QueueKey for T {}

/// Why a queue could not be created.
#[derive(Debug, Error)]
pub enum QueueError {
    /// The configuration cannot produce a working queue.
    #[error("invalid workqueue configuration: {0}")]
    Config(#[from] ConfigError),
    /// The queue runs a timer task, so it must be created inside a Tokio runtime.
    #[error("a workqueue must be created inside a Tokio runtime")]
    NoRuntime,
}

/// A deduplicating, rate-limited work queue shared by a plugin's workers.
///
/// Cloning is cheap and every clone is the same queue. The queue's background task (delayed
/// adds, in-flight gauges) stops on shutdown or when the last clone is dropped.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// Shared by the clones of a queue; the background task holds it weakly.
pub(super) struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    limiter: Box<dyn RateLimiter<K>>,
    metrics: QueueInstruments,
    metrics_update_period: Duration,
    /// Wakes the background task: earlier delayed add, first key in flight, shutdown, drop.
    wake: Arc<Notify>,
    /// Woken whenever the last key in flight is done.
    drained: Notify,
}

/// Everything guarded by the queue's lock, which is never held across an `.await`.
struct State<K> {
    /// Keys ready to be handed out, oldest first.
    queue: VecDeque<K>,
    /// Keys added and not yet handed out (queued, or re-added while being processed), with
    /// the instant of that add (for `workqueue_queue_duration_seconds`).
    dirty: HashMap<K, Instant>,
    /// Keys held by workers, with the instant each was handed out.
    processing: HashMap<K, Instant>,
    /// Pending `get` calls, longest waiting first; non-empty only while `queue` is empty.
    waiters: VecDeque<oneshot::Sender<K>>,
    /// Keys waiting for a delayed add.
    waiting: Waiting<K>,
    shutting_down: bool,
}

/// What the background task should do next.
pub(super) enum Next {
    /// Sleep until this instant (or an earlier wake-up).
    At(Instant),
    /// Nothing scheduled: sleep until woken.
    Idle,
    /// Shut down and nothing in flight: exit.
    Stop,
}

impl<K: QueueKey> WorkQueue<K> {
    /// Creates the queue `name` (the plugin's name, used as the metrics label), with the
    /// default controller rate limiter built from `config.rate_limit`.
    ///
    /// Must be called inside a Tokio runtime: it spawns the queue's background task.
    pub fn new(
        name: impl Into<String>,
        config: &QueueConfig,
        metrics: &QueueMetrics,
    ) -> Result<Self, QueueError> {
        config.validate()?;
        let limiter = config.rate_limit.build::<K>()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| QueueError::NoRuntime)?;
        let name = name.into();
        let wake = Arc::new(Notify::new());
        let inner = Arc::new(Inner {
            metrics: metrics.for_queue(&name),
            name,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashMap::new(),
                waiters: VecDeque::new(),
                waiting: Waiting::new(),
                shutting_down: false,
            }),
            limiter: Box::new(limiter),
            metrics_update_period: config.metrics_update_period,
            wake: Arc::clone(&wake),
            drained: Notify::new(),
        });
        runtime.spawn(background::run(Arc::downgrade(&inner), wake));
        Ok(Self { inner })
    }

    /// The queue's name, as used in the metrics' `name` label.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Queues `key` unless it is already waiting; a key being processed is queued again once
    /// its worker calls [`done`](Self::done). Ignored after shutdown.
    pub fn add(&self, key: K) {
        let mut state = self.inner.lock();
        self.inner.add_locked(&mut state, key, Instant::now());
    }

    /// Queues `key` after `delay` (requeue-after). A key already scheduled keeps the earlier of
    /// its two instants; a key already waiting in the queue is left as it is. Ignored after
    /// shutdown; a zero delay adds at once.
    pub fn add_after(&self, key: K, delay: Duration) {
        let now = Instant::now();
        let mut state = self.inner.lock();
        if state.shutting_down {
            return;
        }
        if delay.is_zero() {
            self.inner.add_locked(&mut state, key, now);
            return;
        }
        if state.dirty.contains_key(&key) {
            return;
        }
        // A delay beyond the clock's range never comes due.
        let Some(ready_at) = now.checked_add(delay) else {
            return;
        };
        if state.waiting.schedule(key, ready_at) {
            drop(state);
            self.inner.wake.notify_one();
        }
    }

    /// Queues `key` after the delay its rate limiter gives (retry after a failure), and counts
    /// a retry. Ignored after shutdown.
    pub fn add_rate_limited(&self, key: K) {
        if self.is_shutting_down() {
            return;
        }
        let delay = self.inner.limiter.when(&key);
        self.inner.metrics.retried();
        self.add_after(key, delay);
    }

    /// Resets the key's backoff; call when it was processed successfully (or given up on).
    pub fn forget(&self, key: &K) {
        self.inner.limiter.forget(key);
    }

    /// Failures counted for the key since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.limiter.num_requeues(key)
    }

    /// Waits for a key and marks it as being processed; the caller must pass it to
    /// [`done`](Self::done) when finished. Returns `None` once the queue is shut down and
    /// empty. Cancel-safe: dropping the future never loses a key.
    pub async fn get(&self) -> Option<K> {
        let receiver = {
            let mut state = self.inner.lock();
            if let Some(key) = state.queue.pop_front() {
                self.inner.hand_out(&mut state, key.clone(), Instant::now());
                return Some(key);
            }
            if state.shutting_down {
                return None;
            }
            let (sender, receiver) = oneshot::channel();
            state.waiters.retain(|waiter| !waiter.is_closed());
            state.waiters.push_back(sender);
            receiver
        };
        let mut pending = PendingGet {
            receiver,
            inner: &self.inner,
        };
        // The sender is dropped without a key only on shutdown.
        (&mut pending.receiver).await.ok()
    }

    /// Marks `key` as no longer processed; if it was added meanwhile, it is queued again.
    /// A key that is not being processed is ignored.
    pub fn done(&self, key: &K) {
        let now = Instant::now();
        let mut state = self.inner.lock();
        let Some(started) = state.processing.remove(key) else {
            return;
        };
        self.inner.metrics.observe_work_duration(now - started);
        if state.dirty.contains_key(key) {
            state.queue.push_back(key.clone());
            self.inner.dispatch(&mut state, now);
        }
        self.inner.processing_changed(&state, now);
    }

    /// Number of keys ready to be handed out (not counting keys being processed or delayed).
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// Whether no key is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting adds and drops delayed keys not yet due. Workers waiting in `get` get
    /// `None`; keys already queued are still handed out, then `get` returns `None`.
    pub fn shut_down(&self) {
        let mut state = self.inner.lock();
        state.shutting_down = true;
        state.waiting.clear();
        // Waiters exist only while the queue is empty: dropping their senders ends them.
        state.waiters.clear();
        drop(state);
        self.inner.wake.notify_one();
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every key handed out is done.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let mut drained = pin!(self.inner.drained.notified());
            drained.as_mut().enable();
            let idle = self.inner.lock().processing.is_empty();
            if idle {
                return;
            }
            drained.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.lock().shutting_down
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("queued", &state.queue.len())
            .field("processing", &state.processing.len())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

impl<K> Inner<K> {
    /// Takes the lock. The queue's invariants hold between statements that cannot panic, so
    /// a lock poisoned by a panicking key `Hash`/`Eq` is used as is rather than failing every
    /// worker from then on.
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: QueueKey> Inner<K> {
    fn add_locked(&self, state: &mut State<K>, key: K, now: Instant) {
        if state.shutting_down || state.dirty.contains_key(&key) {
            return;
        }
        self.metrics.added();
        let processing = state.processing.contains_key(&key);
        state.dirty.insert(key.clone(), now);
        if !processing {
            state.queue.push_back(key);
            self.dispatch(state, now);
        }
        self.metrics.set_depth(state.dirty.len());
    }

    /// Hands queued keys to waiting workers, longest waiting first.
    fn dispatch(&self, state: &mut State<K>, now: Instant) {
        while !state.queue.is_empty() {
            let Some(waiter) = state.waiters.pop_front() else {
                return;
            };
            let Some(key) = state.queue.pop_front() else {
                return;
            };
            // The receiver cannot act on the key before we release the lock, so the
            // bookkeeping below is in place before its worker can call `done`.
            match waiter.send(key.clone()) {
                Ok(()) => self.hand_out(state, key, now),
                Err(key) => state.queue.push_front(key),
            }
        }
    }

    /// Records that `key`, just taken off the queue, is now held by a worker.
    fn hand_out(&self, state: &mut State<K>, key: K, now: Instant) {
        if let Some(added) = state.dirty.remove(&key) {
            self.metrics.observe_queue_duration(now - added);
        }
        if state.processing.is_empty() {
            // Start the periodic refresh of the in-flight gauges.
            self.wake.notify_one();
        }
        state.processing.insert(key, now);
        self.metrics.set_depth(state.dirty.len());
        self.refresh_in_flight(state, now);
    }

    /// Puts back a key that was handed to a `get` dropped before it returned.
    fn take_back(&self, state: &mut State<K>, key: K, now: Instant) {
        state.processing.remove(&key);
        state.dirty.entry(key.clone()).or_insert(now);
        state.queue.push_front(key);
        self.dispatch(state, now);
        self.processing_changed(state, now);
    }

    /// After a key left the processing set: gauges, drain waiters, background task.
    fn processing_changed(&self, state: &State<K>, now: Instant) {
        self.metrics.set_depth(state.dirty.len());
        self.refresh_in_flight(state, now);
        if state.processing.is_empty() {
            self.drained.notify_waiters();
            if state.shutting_down {
                self.wake.notify_one();
            }
        }
    }

    fn refresh_in_flight(&self, state: &State<K>, now: Instant) {
        let (total, longest) = state.processing.values().fold(
            (Duration::ZERO, Duration::ZERO),
            |(total, longest), &started| {
                let age = now - started;
                (total.saturating_add(age), longest.max(age))
            },
        );
        self.metrics.set_in_flight(total, longest);
    }

    /// Runs the timers due now (delayed adds, in-flight gauges) and says when to come back.
    /// `next_refresh` is the background task's schedule for the in-flight gauges.
    pub(super) fn run_timers(&self, next_refresh: &mut Option<Instant>) -> Next {
        let now = Instant::now();
        let mut state = self.lock();
        if state.shutting_down && state.processing.is_empty() {
            return Next::Stop;
        }
        for key in state.waiting.pop_ready(now) {
            self.add_locked(&mut state, key, now);
        }
        if state.processing.is_empty() {
            *next_refresh = None;
        } else if next_refresh.is_none_or(|at| at <= now) {
            if next_refresh.is_some() {
                self.refresh_in_flight(&state, now);
            }
            *next_refresh = Some(now + self.metrics_update_period);
        }
        match (state.waiting.next_deadline(), *next_refresh) {
            (Some(a), Some(b)) => Next::At(a.min(b)),
            (Some(at), None) | (None, Some(at)) => Next::At(at),
            (None, None) => Next::Idle,
        }
    }
}

impl<K> Drop for Inner<K> {
    fn drop(&mut self) {
        // The background task holds the queue weakly: wake it so it notices and exits.
        self.wake.notify_one();
    }
}

/// A `get` waiting for a key; if dropped after a key was sent to it, puts the key back.
struct PendingGet<'a, K: QueueKey> {
    receiver: oneshot::Receiver<K>,
    inner: &'a Inner<K>,
}

impl<K: QueueKey> Drop for PendingGet<'_, K> {
    fn drop(&mut self) {
        self.receiver.close();
        if let Ok(key) = self.receiver.try_recv() {
            let mut state = self.inner.lock();
            self.inner.take_back(&mut state, key, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests;
