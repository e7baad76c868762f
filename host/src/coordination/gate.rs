//! The gate between a plugin's queue and its workers: which keys this replica may reconcile
//! now (all of them, only while it leads, or those its ring gives it), and which calls are in
//! flight, so a replica gives a key up only once its last call on it has finished.

use super::metrics::CoordinationMetrics;
use super::ring::Ring;
use crate::cluster::ObjKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
    /// The scope, for whoever reacts to changes (the controller queues keys it gained).
    scope: watch::Sender<Arc<Scope>>,
    /// Leader, ring and key metrics (the key counts are kept by whoever follows the scope).
    metrics: CoordinationMetrics,
}

struct State {
    scope: Arc<Scope>,
    /// Coordinated scopes hold only until this instant (the last renewal plus the renew
    /// deadline): a replica whose loop is starved or stuck stops taking keys on time even if
    /// the loop never gets to narrow the scope.
    valid_until: Option<Instant>,
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

impl Gate {
    /// A gate that starts with `scope`.
    pub fn new(scope: Scope) -> Gate {
        let scope = Arc::new(scope);
        Gate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    scope: scope.clone(),
                    valid_until: None,
                    in_flight: HashMap::new(),
                }),
                left: Notify::new(),
                scope: watch::Sender::new(scope),
                metrics: CoordinationMetrics::default(),
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

    /// Follows scope changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Scope>> {
        self.inner.scope.subscribe()
    }

    /// Lets a call on `key` in, if the scope allows it now; the key counts as in flight
    /// until the returned pass is dropped.
    pub fn enter(&self, key: &ObjKey) -> Option<Pass> {
        let mut state = self.lock();
        if !state.scope.allows(key) {
            return None;
        }
        if matches!(*state.scope, Scope::Everything) {
            return Some(Pass { gate: None });
        }
        if state.valid_until.is_none_or(|t| Instant::now() >= t) {
            return None;
        }
        *state.in_flight.entry(key.clone()).or_default() += 1;
        Some(Pass {
            gate: Some((self.inner.clone(), key.clone())),
        })
    }

    /// Replaces the scope: calls let in from now on follow it; calls in flight finish (see
    /// [`Gate::drained`]).
    pub fn set(&self, scope: Scope) {
        let scope = Arc::new(scope);
        let mut state = self.lock();
        if *state.scope == *scope {
            return;
        }
        state.scope = scope.clone();
        drop(state);
        self.inner.scope.send_replace(scope);
    }

    /// The Lease was renewed: the scope holds until `until` unless renewed again.
    pub fn valid_until(&self, until: Instant) {
        self.lock().valid_until = Some(until);
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
    gate: Option<(Arc<Inner>, ObjKey)>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        let Some((inner, key)) = self.gate.take() else {
            return;
        };
        let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = state.in_flight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                state.in_flight.remove(&key);
            }
        }
        drop(state);
        inner.left.notify_waiters();
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
        gate.valid_until(Instant::now() + Duration::from_secs(10));
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
        gate.valid_until(Instant::now() + Duration::from_secs(60));
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
        assert_eq!(**rx.borrow_and_update(), Scope::Leader { leading: true });
    }
}
