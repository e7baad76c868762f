//! The gate between a plugin's queue and its workers: which keys this replica may reconcile
//! now (all of them, only while it leads, or those its ring gives it), and which calls are in
//! flight, so a replica gives a key up only once its last call on it has finished.
//!
//! A coordinated scope holds only until the renew deadline after the last renewal was
//! *sent*, on both the monotonic clock and the wall clock: the monotonic one keeps running
//! through a `SIGSTOP` or a stall, the wall clock through a suspended VM (where the
//! monotonic clock stops). Writes ask the gate again right before they are sent
//! ([`Pass::hold`]), and on every poll of the request until it is answered, up to the
//! deadline that answer gives: a replica that wakes from a pause sends nothing until it
//! renewed (see [`crate::actions::held`] for what this bounds and what it cannot).

use super::election::{WallClock, system_clock};
use super::metrics::CoordinationMetrics;
use super::ring::Ring;
use crate::cluster::ObjKey;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// What this replica may reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every key: the only replica (no coordination).
    Everything,
    /// Every key while it leads, none otherwise (`--leader-elect`).
    Leader {
        /// Whether it holds the leader Lease now.
        leading: bool,
    },
    /// The keys the ring gives it (`--sharding`).
    Shard(ShardView),
}

/// A sharding member's view: the ring it sees now, and the last ring every member of it
/// acknowledged (applied, with its calls on keys it lost finished).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    /// This replica's identity.
    pub me: Arc<str>,
    /// The members it sees now; `None` while its own member Lease is not current (it then
    /// takes no key at all).
    pub current: Option<Ring>,
    /// The newest ring all of whose members recorded it as applied.
    pub settled: Option<Ring>,
}

impl ShardView {
    /// Whether `key` is this replica's: it owns it in the ring it sees, and either that ring
    /// is settled or it already owned the key in the settled one (a key it gains waits until
    /// the previous owner has acknowledged giving it up, or has left the ring).
    pub fn owns(&self, key: &str) -> bool {
        let Some(current) = &self.current else {
            return false;
        };
        if current.owner(key) != Some(&*self.me) {
            return false;
        }
        match &self.settled {
            Some(settled) => settled == current || settled.owner(key) == Some(&*self.me),
            None => false,
        }
    }
}

impl Scope {
    /// Whether this replica may reconcile `key` now.
    pub fn allows(&self, key: &ObjKey) -> bool {
        match self {
            Scope::Everything => true,
            Scope::Leader { leading } => *leading,
            Scope::Shard(view) => view.owns(&key.to_string()),
        }
    }
}

/// What whoever follows the gate sees: the scope, and how many times the gate reopened after
/// a lapse (the lease renewed after its renew deadline had passed). Either changing means
/// keys may have been turned away that this replica owns now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateView {
    /// The scope now.
    pub scope: Arc<Scope>,
    /// Counts reopenings after a lapse.
    pub reopened: u64,
}

/// How long this replica holds a key, from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// It does not: the scope no longer allows the key, or the lease lapsed.
    Lost,
    /// Until this monotonic instant unless renewed meanwhile: the renew deadline after the
    /// last renewal was sent, on whichever clock reaches it first. The lease itself lasts
    /// longer (its duration); the difference is the margin a request already on its way
    /// has to arrive before another replica may take the key.
    Until(Instant),
    /// For as long as it runs (the only replica).
    Always,
}

impl Hold {
    /// Whether the key is held at `now`.
    pub fn at(self, now: Instant) -> bool {
        match self {
            Hold::Lost => false,
            Hold::Until(until) => now < until,
            Hold::Always => true,
        }
    }
}

/// Both clocks, read just before a renewal is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    mono: Instant,
    wall: Timestamp,
}

impl Stamp {
    /// The monotonic reading.
    pub fn mono(&self) -> Instant {
        self.mono
    }
}

/// How far the wall clock may run ahead of the monotonic clock between two renewals before
/// it counts as a jump (NTP slews far less than this).
const CLOCK_JUMP: Duration = Duration::from_secs(1);

/// Until when a coordinated scope holds, on both clocks.
#[derive(Debug, Clone, Copy)]
struct Validity {
    renewed: Stamp,
    until: Instant,
    wall_until: Timestamp,
}

/// Shared by the coordinator (which sets the scope) and every running plugin's workers
/// (which enter it per key); clones share it.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Woken whenever a call leaves the gate.
    left: Notify,
    /// The scope and reopenings, for whoever reacts to changes (the controller queues the
    /// keys it owns).
    view: watch::Sender<GateView>,
    /// Leader, ring and key metrics (the key counts are kept by whoever follows the scope).
    metrics: CoordinationMetrics,
    /// The wall clock (tests skew it).
    wall: WallClock,
}

struct State {
    scope: Arc<Scope>,
    /// Coordinated scopes hold only until the last renewal plus the renew deadline: a
    /// replica whose loop is starved, paused or suspended stops taking keys (and sending
    /// writes) on time even if the loop never gets to narrow the scope.
    validity: Option<Validity>,
    /// Reopenings after a lapse.
    reopened: u64,
    /// Keys with calls in flight, by key (several plugins may reconcile the same key).
    in_flight: HashMap<ObjKey, usize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new(Scope::Everything)
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Gate").field(&self.scope()).finish()
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

impl Gate {
    /// A gate that starts with `scope`, on the system's wall clock.
    pub fn new(scope: Scope) -> Gate {
        Gate::with_wall(scope, system_clock())
    }

    /// A gate that starts with `scope`, reading the wall clock through `wall`.
    pub fn with_wall(scope: Scope, wall: WallClock) -> Gate {
        let scope = Arc::new(scope);
        Gate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    scope: scope.clone(),
                    validity: None,
                    reopened: 0,
                    in_flight: HashMap::new(),
                }),
                left: Notify::new(),
                view: watch::Sender::new(GateView { scope, reopened: 0 }),
                metrics: CoordinationMetrics::default(),
                wall,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The scope now.
    pub fn scope(&self) -> Arc<Scope> {
        self.lock().scope.clone()
    }

    /// Whether several replicas share the work (the scope is not [`Scope::Everything`]).
    pub fn is_coordinated(&self) -> bool {
        !matches!(*self.scope(), Scope::Everything)
    }

    /// The coordination metrics this gate's replica reports.
    pub fn metrics(&self) -> &CoordinationMetrics {
        &self.inner.metrics
    }

    /// Follows scope changes and reopenings.
    pub fn subscribe(&self) -> watch::Receiver<GateView> {
        self.inner.view.subscribe()
    }

    /// Both clocks now: take it just before sending a renewal, give it to [`Gate::renewed`].
    pub fn stamp(&self) -> Stamp {
        Stamp {
            mono: Instant::now(),
            wall: (self.inner.wall)(),
        }
    }

    /// Whether the last renewal still holds on both clocks (always for an uncoordinated gate).
    pub fn is_valid(&self) -> bool {
        self.valid(&self.lock())
    }

    fn valid(&self, state: &State) -> bool {
        if matches!(*state.scope, Scope::Everything) {
            return true;
        }
        state
            .validity
            .as_ref()
            .is_some_and(|v| Instant::now() < v.until && (self.inner.wall)() < v.wall_until)
    }

    fn holds(&self, state: &State, key: &ObjKey) -> bool {
        state.scope.allows(key) && self.valid(state)
    }

    /// Until when `key` is held: the earlier of the monotonic deadline and the wall one
    /// (mapped onto the monotonic clock from now).
    fn hold(&self, state: &State, key: &ObjKey) -> Hold {
        if matches!(*state.scope, Scope::Everything) {
            return Hold::Always;
        }
        if !self.holds(state, key) {
            return Hold::Lost;
        }
        let Some(v) = state.validity.as_ref() else {
            return Hold::Lost;
        };
        let now = Instant::now();
        let wall_left = Duration::try_from(v.wall_until.duration_since((self.inner.wall)()))
            .unwrap_or(Duration::ZERO);
        Hold::Until(v.until.min(now + wall_left))
    }

    /// Lets a call on `key` in, if the scope allows it now and the lease holds; the key
    /// counts as in flight until the returned pass is dropped.
    pub fn enter(&self, key: &ObjKey) -> Option<Pass> {
        let mut state = self.lock();
        if !self.holds(&state, key) {
            return None;
        }
        if matches!(*state.scope, Scope::Everything) {
            return Some(Pass { gate: None });
        }
        *state.in_flight.entry(key.clone()).or_default() += 1;
        Some(Pass {
            gate: Some((self.clone(), key.clone())),
        })
    }

    /// Replaces the scope: calls let in from now on follow it; calls in flight finish (see
    /// [`Gate::drained`]), but their writes are refused once the scope no longer allows
    /// their key.
    pub fn set(&self, scope: Scope) {
        let scope = Arc::new(scope);
        let mut state = self.lock();
        if *state.scope == *scope {
            return;
        }
        state.scope = scope.clone();
        let reopened = state.reopened;
        drop(state);
        self.inner.view.send_replace(GateView { scope, reopened });
    }

    /// The Lease was renewed by a request sent at `sent`: the scope holds until `deadline`
    /// after it, on both clocks, unless renewed again. Returns whether this reopened a gate
    /// that had lapsed (followers then queue every key this replica owns again: keys
    /// turned away while it was closed would otherwise wait for their next change).
    pub fn renewed(&self, sent: Stamp, deadline: Duration) -> bool {
        let mut state = self.lock();
        let was_valid = self.valid(&state);
        if let Some(previous) = state.validity.as_ref() {
            let mono = sent.mono.saturating_duration_since(previous.renewed.mono);
            let wall = sent.wall.duration_since(previous.renewed.wall);
            if let Ok(wall) = Duration::try_from(wall)
                && wall > mono + CLOCK_JUMP
            {
                tracing::warn!(
                    wall_s = wall.as_secs_f64(),
                    monotonic_s = mono.as_secs_f64(),
                    "the wall clock ran ahead of the monotonic clock since the last renewal (a suspended VM or a clock step): the lease counted as lapsed"
                );
            }
        }
        state.validity = Some(Validity {
            renewed: sent,
            until: sent.mono + deadline,
            wall_until: add(sent.wall, deadline),
        });
        let reopened = !was_valid && self.valid(&state);
        if reopened {
            state.reopened += 1;
            let view = GateView {
                scope: state.scope.clone(),
                reopened: state.reopened,
            };
            drop(state);
            self.inner.view.send_replace(view);
        }
        reopened
    }

    /// Keys in flight that the scope no longer allows.
    pub fn draining(&self) -> usize {
        let state = self.lock();
        state
            .in_flight
            .keys()
            .filter(|k| !state.scope.allows(k))
            .count()
    }

    /// Waits until no call is in flight on a key the scope no longer allows.
    pub async fn drained(&self) {
        loop {
            let left = self.inner.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.draining() == 0 {
                return;
            }
            left.await;
        }
    }
}

/// A call on a key let in by the gate; dropping it ends the call.
#[must_use = "the key counts as in flight while the pass lives"]
pub struct Pass {
    gate: Option<(Gate, ObjKey)>,
}

impl Pass {
    /// Whether this replica still holds the pass's key now: the scope allows it and the
    /// lease was renewed in time on both clocks. Asked right before every write.
    pub fn holds(&self) -> bool {
        match &self.gate {
            None => true,
            Some((gate, key)) => gate.holds(&gate.lock(), key),
        }
    }

    /// Until when this replica holds the pass's key ([`Pass::holds`] with its deadline):
    /// asked after the wait for the write budget and on every poll of the request.
    pub fn hold(&self) -> Hold {
        match &self.gate {
            None => Hold::Always,
            Some((gate, key)) => gate.hold(&gate.lock(), key),
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let Some((gate, key)) = self.gate.take() else {
            return;
        };
        let mut state = gate.lock();
        if let Some(n) = state.in_flight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                state.in_flight.remove(&key);
            }
        }
        drop(state);
        gate.inner.left.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(name: &str) -> ObjKey {
        ObjKey::new(Some("ns"), name)
    }

    fn view(me: &str, current: &[&str], settled: Option<&[&str]>) -> ShardView {
        ShardView {
            me: me.into(),
            current: Some(Ring::new(current.iter().copied())),
            settled: settled.map(|s| Ring::new(s.iter().copied())),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_gate_opens_only_while_leading_and_renewed() {
        let gate = Gate::new(Scope::Leader { leading: false });
        assert!(gate.enter(&key("a")).is_none());
        gate.set(Scope::Leader { leading: true });
        assert!(gate.enter(&key("a")).is_none(), "never renewed");
        gate.renewed(gate.stamp(), Duration::from_secs(10));
        assert!(gate.enter(&key("a")).is_some());
        // The loop that should narrow the scope is stuck: the gate closes by itself.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(gate.enter(&key("a")).is_none());
        assert!(Gate::default().enter(&key("a")).is_some());
    }

    #[test]
    fn a_gained_key_waits_for_the_ring_to_settle() {
        let keys: Vec<String> = (0..200).map(|i| format!("ns/k{i}")).collect();
        let two = Ring::new(["a", "b"]);
        // b left: a owns every key in {a}, but b's keys only once {a} is settled.
        let waiting = view("a", &["a"], Some(&["a", "b"]));
        let settled = view("a", &["a"], Some(&["a"]));
        for k in &keys {
            let was_mine = two.owner(k) == Some("a");
            assert_eq!(waiting.owns(k), was_mine, "{k}");
            assert!(settled.owns(k), "{k}");
        }
        // A member that sees no ring of its own (its lease is not current) takes nothing.
        let lost = ShardView {
            me: "a".into(),
            current: None,
            settled: Some(two.clone()),
        };
        assert!(keys.iter().all(|k| !lost.owns(k)));
        // A new member takes nothing before any ring with it is settled.
        let joining = view("c", &["a", "b", "c"], Some(&["a", "b"]));
        assert!(keys.iter().all(|k| !joining.owns(k)));
    }

    #[tokio::test(start_paused = true)]
    async fn drained_waits_for_calls_on_keys_given_up() {
        let gate = Gate::new(Scope::Leader { leading: true });
        gate.renewed(gate.stamp(), Duration::from_secs(60));
        let pass = gate.enter(&key("a")).unwrap();
        gate.drained().await; // still allowed: nothing to wait for
        gate.set(Scope::Leader { leading: false });
        assert_eq!(gate.draining(), 1);
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.drained().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a call is still in flight");
        drop(pass);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("drained once the call ended")
            .unwrap();
        assert_eq!(gate.draining(), 0);
    }

    #[test]
    fn subscribers_see_each_change_once() {
        let gate = Gate::new(Scope::Leader { leading: false });
        let mut rx = gate.subscribe();
        gate.set(Scope::Leader { leading: false });
        assert!(!rx.has_changed().unwrap(), "an equal scope is no change");
        gate.set(Scope::Leader { leading: true });
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            *rx.borrow_and_update().scope,
            Scope::Leader { leading: true }
        );
    }

    /// A wall clock the test moves by hand, as a suspended VM sees it: the monotonic clock
    /// stood still while the wall clock ran on.
    fn skewed() -> (WallClock, Arc<std::sync::atomic::AtomicI64>) {
        let offset = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let read = offset.clone();
        let wall: WallClock = Arc::new(move || {
            let s = read.load(std::sync::atomic::Ordering::SeqCst);
            Timestamp::now()
                .checked_add(SignedDuration::from_secs(s))
                .unwrap()
        });
        (wall, offset)
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_stops_holding_when_the_lease_lapses_on_either_clock() {
        let (wall, offset) = skewed();
        let gate = Gate::with_wall(Scope::Leader { leading: true }, wall);
        gate.renewed(gate.stamp(), Duration::from_secs(10));
        let pass = gate.enter(&key("a")).unwrap();
        assert!(pass.holds());
        // Held until the renew deadline (the wall clock's reading of it may come a few
        // real microseconds earlier).
        let start = Instant::now();
        assert!(matches!(pass.hold(), Hold::Until(t)
            if t <= start + Duration::from_secs(10) && t > start + Duration::from_secs(9)));
        // A pause (SIGSTOP, a stall): the monotonic clock ran past the deadline while the
        // call was in flight. Its writes are refused although it entered in time.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!pass.holds());
        gate.renewed(gate.stamp(), Duration::from_secs(10));
        assert!(pass.holds(), "renewed: the same call may write again");
        // The wall clock ran 4 s ahead: the wall deadline comes first.
        offset.store(4, std::sync::atomic::Ordering::SeqCst);
        match pass.hold() {
            Hold::Until(t) => {
                let left = t - Instant::now();
                assert!(left <= Duration::from_secs(6), "{left:?}");
                assert!(left > Duration::from_secs(5), "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        // A suspended VM: the monotonic clock did not move, the wall clock did.
        offset.store(30, std::sync::atomic::Ordering::SeqCst);
        assert!(!pass.holds());
        assert_eq!(pass.hold(), Hold::Lost);
        assert!(gate.enter(&key("b")).is_none());
        assert!(!gate.is_valid());
        gate.renewed(gate.stamp(), Duration::from_secs(10));
        assert!(pass.holds());
        // The key moved away: the call in flight may no longer write.
        gate.set(Scope::Leader { leading: false });
        assert!(!pass.holds());
        assert!(Gate::default().enter(&key("a")).unwrap().holds());
        assert_eq!(
            Gate::default().enter(&key("a")).unwrap().hold(),
            Hold::Always
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_a_lapse_reopens_the_gate_for_followers() {
        let gate = Gate::new(Scope::Leader { leading: true });
        let mut rx = gate.subscribe();
        assert!(
            gate.renewed(gate.stamp(), Duration::from_secs(10)),
            "first opening"
        );
        assert_eq!(rx.borrow_and_update().reopened, 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            !gate.renewed(gate.stamp(), Duration::from_secs(10)),
            "renewed in time"
        );
        assert!(!rx.has_changed().unwrap());
        tokio::time::advance(Duration::from_secs(12)).await;
        assert!(
            gate.enter(&key("a")).is_none(),
            "lapsed: keys are turned away"
        );
        assert!(gate.renewed(gate.stamp(), Duration::from_secs(10)));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().reopened, 2);
    }
}
