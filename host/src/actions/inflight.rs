//! How many calls of one plugin may have writes at the API server at once: an adaptive
//! limit (AIMD with a latency guard, as TCP's congestion window), bounded by the plugin's
//! write budget and by a host-wide cap shared by every plugin.
//!
//! Why this shape. A worker runs plugin code (a sandbox, at most `--workers` at once per
//! plugin); a write is a wait on the network. Holding the worker for the write's round
//! trip, as controller-runtime does (`MaxConcurrentReconciles` workers, each blocked in its
//! reconcile's API calls) bounds a plugin to `workers / API latency` reconciles per second
//! whatever the plugin costs. kube-rs's runner avoids the bound by running every reconcile
//! at once (`Config::concurrency`, unbounded by default), so a burst of changes becomes a
//! burst of requests however the API server copes. Here a worker hands a call's writes off
//! and takes the next key, and the number of calls whose writes are in flight adapts to
//! what the API server does:
//! - it starts at [`INITIAL_WRITES_IN_FLIGHT`] (or the plugin's worker count, if higher) and
//!   doubles per round of answers while answers stay fast (slow start), then grows by one per
//!   round (additive increase);
//! - an answer markedly slower than the fastest recently seen stops the growth (the server
//!   is queueing: more requests would only wait longer);
//! - 429 Too Many Requests, a 5xx or a transport failure halves it (multiplicative
//!   decrease), once per round: answers to writes sent before the last cut do not cut again;
//! - a `Retry-After` (the Status' `retryAfterSeconds`) holds every new write of the plugin
//!   until it has passed (bounded by [`MAX_RETRY_AFTER`]);
//! - it never exceeds the plugin's write burst when the policy limits its write rate (more
//!   in flight would only wait for tokens) nor the host-wide cap, and never drops below one.
//!
//! A worker takes a slot before the plugin decides a key (a call that writes nothing gives it
//! back at once), so a slow or throttling API server slows plugin calls down instead of
//! piling decided calls up in memory, and a decision is never held back long enough to go
//! out stale.
//!
//! The host-wide cap counts writes, not calls: a write takes its slot once it has its
//! budget token and frees it when answered. Counted from before the decision, a tenant's
//! calls held the cap's slots while its guest code sat out a CPU-share pause or its writes
//! waited for its own budget, and every other tenant's calls, even those writing nothing,
//! waited for those slots (the e2e bench's noisy tenant moved the quiet tenants' p50 from
//! 1.5 to 4–7 ms that way).

use crate::queue::{FairPermit, FairSlots};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// The longest `Retry-After` honoured: a server (or a proxy) asking for more still gets a
/// write this often, so one bad answer cannot stop a plugin's writes for good.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Where a plugin's limit starts (or at its worker count, if higher): a worker can hand off
/// a few calls' writes before the first answers say how fast the API server is.
pub const INITIAL_WRITES_IN_FLIGHT: usize = 4;
/// Host-wide writes in flight unless configured (`--max-writes-in-flight`).
pub const DEFAULT_MAX_WRITES_IN_FLIGHT: usize = 64;
/// An answer is fast while it takes at most twice the fastest recent one plus this (so
/// answers of a few hundred microseconds are not judged on their jitter).
const FAST_SLACK: Duration = Duration::from_millis(2);
/// How fast the fastest-answer baseline follows slower answers (1/32 of the gap per answer),
/// so a server that became slower for good becomes the new normal instead of stopping the
/// growth forever.
const BASELINE_DRIFT: u32 = 32;

/// The writes at the API server of every plugin of a host together (each from its budget
/// token until its answer), shared fairly among tenants
/// (namespaces of Plugin objects; the operator's files are one tenant): while others wait, a
/// tenant has at most its share of the cap, so one tenant's flood of writes slows its own
/// plugins, not another's. Clones share the cap.
#[derive(Debug, Clone)]
pub struct HostWrites {
    slots: FairSlots,
}

impl HostWrites {
    /// At most `cap` calls' writes in flight over every plugin (at least one).
    pub fn new(cap: usize) -> Self {
        let cap = cap.clamp(1, Semaphore::MAX_PERMITS);
        HostWrites {
            slots: FairSlots::new(cap),
        }
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.slots.cap()
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.slots.available()
    }
}

impl Default for HostWrites {
    fn default() -> Self {
        HostWrites::new(DEFAULT_MAX_WRITES_IN_FLIGHT)
    }
}

/// What the API server's answers to one call's writes said, for the limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answers {
    /// The slowest answer's round trip (any answer: accepted, refused or failed), `None`
    /// when nothing was sent.
    pub slowest: Option<Duration>,
    /// The server pushed back: 429, a 5xx, or the request did not complete.
    pub pushed_back: bool,
    /// The longest `Retry-After` it asked for.
    pub retry_after: Option<Duration>,
}

impl Answers {
    /// Adds one answer that took `took`.
    pub fn answered(&mut self, took: Duration) {
        self.slowest = Some(self.slowest.map_or(took, |s| s.max(took)));
    }

    /// Adds a push-back, with the delay the server asked for, if any.
    pub fn pushed_back(&mut self, retry_after: Option<Duration>) {
        self.pushed_back = true;
        if let Some(after) = retry_after {
            self.retry_after = Some(self.retry_after.map_or(after, |a| a.max(after)));
        }
    }
}

/// One plugin's adaptive limit of calls with writes in flight.
#[derive(Debug)]
pub struct InFlightLimit {
    state: Mutex<State>,
    /// Woken when a slot frees, the limit grows or a hold ends.
    changed: Notify,
    host: HostWrites,
    /// Whose share of the host-wide cap its slots count against.
    tenant: Box<str>,
}

#[derive(Debug)]
struct State {
    /// The limit, fractional so additive increase can add `1/limit` per answer.
    limit: f64,
    in_flight: usize,
    /// No write starts before this (a `Retry-After`).
    hold_until: Option<Instant>,
    /// The fastest recent answer, drifting up towards slower ones.
    baseline: Option<Duration>,
    /// How many times the limit was cut: answers to writes granted before the last cut do
    /// not cut it again.
    cuts: u64,
    /// Doubling per round until the first cut or slow answer.
    slow_start: bool,
    /// The most it may grow to: the plugin's bound (from its write budget) and the
    /// host-wide cap, as of the last slot asked for.
    ceiling: f64,
}

/// A slot for one call's writes; dropping it frees the slot (with no news for the limit:
/// a stopped or abandoned call).
#[derive(Debug)]
pub struct WritePermit {
    limit: Arc<InFlightLimit>,
    /// The cut count when the slot was granted: pushed-back answers to writes sent before
    /// the last cut do not cut again.
    granted: u64,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl InFlightLimit {
    /// A limit starting at `initial` (at least one), under the host-wide `host` cap, whose
    /// slots it takes as `tenant`'s.
    pub fn new(initial: usize, host: HostWrites, tenant: &str) -> Arc<Self> {
        Arc::new(InFlightLimit {
            tenant: tenant.into(),
            state: Mutex::new(State {
                limit: initial.max(1) as f64,
                in_flight: 0,
                hold_until: None,
                baseline: None,
                cuts: 0,
                slow_start: true,
                ceiling: host.cap() as f64,
            }),
            changed: Notify::new(),
            host,
        })
    }

    /// The limit now (whole slots).
    pub fn limit(&self) -> usize {
        lock(&self.state).limit as usize
    }

    /// Calls with writes in flight now.
    pub fn in_flight(&self) -> usize {
        lock(&self.state).in_flight
    }

    /// Waits for a slot: fewer than the limit (and than `cap`, the plugin's bound) in flight
    /// and no `Retry-After` hold. Each write then takes a slot of the host-wide cap as it
    /// is sent ([`sending`](Self::sending)). Cancel-safe.
    pub async fn acquire(self: &Arc<Self>, cap: usize) -> WritePermit {
        let cap = cap.clamp(1, self.host.cap());
        lock(&self.state).ceiling = cap as f64;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let hold = {
                let mut state = lock(&self.state);
                match state.hold_until {
                    Some(at) if at > Instant::now() => Some(at),
                    _ if state.in_flight < (state.limit as usize).clamp(1, cap) => {
                        state.in_flight += 1;
                        break;
                    }
                    _ => None,
                }
            };
            match hold {
                Some(at) => tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = changed => {}
                },
                None => changed.await,
            }
        }
        WritePermit {
            limit: self.clone(),
            granted: lock(&self.state).cuts,
        }
    }

    /// Waits for a slot of the host-wide cap, this plugin's tenant's turn, for one write
    /// about to be sent; dropping it frees the slot. Taken only once the write has its
    /// budget token: a plugin whose writes wait for their own budget holds none of the
    /// slots every other tenant's writes need (holding them there let a tenant throttled
    /// by its policy hold the whole cap and pace every other tenant's writes at its own
    /// rate). Cancel-safe.
    pub async fn sending(&self) -> FairPermit {
        self.host.slots.acquire(&self.tenant).await
    }

    fn learn(&self, granted: u64, answers: &Answers) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        if let Some(after) = answers.retry_after {
            let until = now + after.min(MAX_RETRY_AFTER);
            state.hold_until = Some(state.hold_until.map_or(until, |h| h.max(until)));
        }
        if answers.pushed_back {
            if granted == state.cuts {
                state.limit = (state.limit / 2.0).max(1.0);
                state.cuts += 1;
                state.slow_start = false;
            }
        } else if let Some(took) = answers.slowest {
            let baseline = match state.baseline {
                Some(b) if b <= took => b + (took - b) / BASELINE_DRIFT,
                _ => took,
            };
            state.baseline = Some(baseline);
            if took <= baseline * 2 + FAST_SLACK {
                // Slow start adds one per answer (doubling per round); after it, 1/limit
                // per answer adds one per round.
                state.limit += if state.slow_start {
                    1.0
                } else {
                    1.0 / state.limit
                };
                state.limit = state.limit.min(state.ceiling);
            } else {
                state.slow_start = false;
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

impl WritePermit {
    /// The call's writes are done and the API server said `answers`: the limit learns from
    /// them, and the slot is freed.
    pub fn answered(self, answers: &Answers) {
        self.limit.learn(self.granted, answers);
    }
}

impl Drop for WritePermit {
    fn drop(&mut self) {
        let mut state = lock(&self.limit.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.limit.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests;
