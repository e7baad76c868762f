//! A fixed number of slots shared fairly between namespaces, in the spirit of the API
//! server's Priority and Fairness: each namespace that waits or holds slots has a fair share
//! of `ceil(slots / such namespaces)`; a free slot goes, round-robin, to the next namespace
//! waiting below its share (and only when none is, to a namespace at or above it, so no slot
//! idles while anyone waits). When every slot is held and a namespace waits below its share
//! while another holds more than its own, the newest slot of the namespace holding the most
//! is asked back ([`Slot::preempted`]): its holder stops and queues again. So one namespace
//! whose work hangs (a registry that never answers) keeps at most its share once another
//! namespace waits, not every slot until its deadline.
//!
//! Waiting and holding are both cancel-safe: dropping a waiter leaves the queue, dropping a
//! [`Slot`] gives it back at once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Slots shared fairly between namespaces (cheap to clone: one shared state).
#[derive(Debug, Clone)]
pub struct FairSlots {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    capacity: usize,
    next_id: u64,
    /// Slots held, by namespace, oldest first.
    held: HashMap<String, Vec<Held>>,
    /// Waiters, by namespace, first come first served.
    waiting: HashMap<String, VecDeque<Waiter>>,
    /// The namespaces with waiters, in the order they are served.
    turn: VecDeque<String>,
    /// The slot asked back and not given back yet: one at a time.
    preempting: Option<u64>,
}

#[derive(Debug)]
struct Held {
    id: u64,
    /// Sends the request to give the slot back (taken when sent).
    preempt: Option<oneshot::Sender<()>>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    grant: oneshot::Sender<oneshot::Receiver<()>>,
}

/// A slot held by a namespace: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    state: Arc<Mutex<State>>,
    namespace: String,
    id: u64,
    preempted: oneshot::Receiver<()>,
}

impl FairSlots {
    /// `capacity` slots (at least one).
    pub fn new(capacity: usize) -> FairSlots {
        FairSlots {
            state: Arc::new(Mutex::new(State {
                capacity: capacity.max(1),
                next_id: 0,
                held: HashMap::new(),
                waiting: HashMap::new(),
                turn: VecDeque::new(),
                preempting: None,
            })),
        }
    }

    /// Waits for a slot for `namespace` (its turn among the namespaces, first come first
    /// served within it).
    pub async fn acquire(&self, namespace: &str) -> Slot {
        let (id, granted) = {
            let mut state = lock(&self.state);
            let id = state.next_id;
            state.next_id += 1;
            let (grant, granted) = oneshot::channel();
            state
                .waiting
                .entry(namespace.to_string())
                .or_default()
                .push_back(Waiter { id, grant });
            if !state.turn.iter().any(|n| n == namespace) {
                state.turn.push_back(namespace.to_string());
            }
            state.dispatch();
            (id, granted)
        };
        // Dropped before the grant is seen: leaves the queue, or gives the slot back.
        let mut waiting = Waiting {
            state: &self.state,
            namespace,
            id,
            done: false,
        };
        // The sender is only dropped by a grant (sent) or by `Waiting` (which is this
        // future's own drop): an error cannot be seen here.
        let preempted = granted.await.unwrap_or_else(|_| oneshot::channel().1);
        waiting.done = true;
        Slot {
            state: self.state.clone(),
            namespace: namespace.to_string(),
            id,
            preempted,
        }
    }

    /// Slots held by `namespace` now.
    #[cfg(test)]
    pub fn held_by(&self, namespace: &str) -> usize {
        lock(&self.state).held.get(namespace).map_or(0, Vec::len)
    }
}

impl Slot {
    /// Resolves when the slot is asked back for a namespace below its share: the holder
    /// should stop, drop the slot and queue again. Never resolves otherwise.
    pub async fn preempted(&mut self) {
        if (&mut self.preempted).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.release(&self.namespace, self.id);
        state.dispatch();
    }
}

/// A waiter's place in the queue until its grant is seen.
struct Waiting<'a> {
    state: &'a Mutex<State>,
    namespace: &'a str,
    id: u64,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(self.state);
        let queued = state.waiting.get_mut(self.namespace).and_then(|q| {
            let at = q.iter().position(|w| w.id == self.id)?;
            q.remove(at)
        });
        if queued.is_none() {
            // Granted meanwhile: the slot is given back.
            state.release(self.namespace, self.id);
        }
        state.tidy(self.namespace);
        state.dispatch();
    }
}

impl State {
    fn held(&self, namespace: &str) -> usize {
        self.held.get(namespace).map_or(0, Vec::len)
    }

    /// The fair share of each namespace that waits or holds.
    fn share(&self) -> usize {
        let mut namespaces: Vec<&String> = self.held.keys().collect();
        namespaces.extend(self.turn.iter().filter(|n| !self.held.contains_key(*n)));
        self.capacity.div_ceil(namespaces.len().max(1))
    }

    fn release(&mut self, namespace: &str, id: u64) {
        if let Some(held) = self.held.get_mut(namespace) {
            held.retain(|h| h.id != id);
        }
        if self.preempting == Some(id) {
            self.preempting = None;
        }
        self.tidy(namespace);
    }

    /// Drops a namespace's empty entries.
    fn tidy(&mut self, namespace: &str) {
        if self.held.get(namespace).is_some_and(Vec::is_empty) {
            self.held.remove(namespace);
        }
        if self.waiting.get(namespace).is_some_and(VecDeque::is_empty) {
            self.waiting.remove(namespace);
            self.turn.retain(|n| n != namespace);
        }
    }

    /// Gives free slots to waiters, round-robin, below-share namespaces first; when none is
    /// free and a namespace waits below its share, asks one slot back from the namespace
    /// holding the most above its share.
    fn dispatch(&mut self) {
        loop {
            let share = self.share();
            let total: usize = self.held.values().map(Vec::len).sum();
            let below = self.turn.iter().position(|n| self.held(n) < share);
            if total >= self.capacity {
                if below.is_some() && self.preempting.is_none() {
                    self.preempt_above(share);
                }
                return;
            }
            let Some(at) = below.or(if self.turn.is_empty() { None } else { Some(0) }) else {
                return;
            };
            let Some(namespace) = self.turn.remove(at) else {
                return;
            };
            let waiter = self
                .waiting
                .get_mut(&namespace)
                .and_then(VecDeque::pop_front);
            if self.waiting.get(&namespace).is_some_and(|q| !q.is_empty()) {
                self.turn.push_back(namespace.clone());
            } else {
                self.waiting.remove(&namespace);
            }
            let Some(waiter) = waiter else {
                continue;
            };
            let (preempt, preempted) = oneshot::channel();
            self.held.entry(namespace.clone()).or_default().push(Held {
                id: waiter.id,
                preempt: Some(preempt),
            });
            if waiter.grant.send(preempted).is_err() {
                // Cannot happen (the waiter leaves the queue under this lock); stay exact.
                self.release(&namespace, waiter.id);
            }
        }
    }

    fn preempt_above(&mut self, share: usize) {
        let Some((namespace, count)) = self
            .held
            .iter()
            .map(|(n, h)| (n.clone(), h.len()))
            .max_by_key(|(_, count)| *count)
        else {
            return;
        };
        if count <= share {
            return;
        }
        let Some(newest) = self
            .held
            .get_mut(&namespace)
            .and_then(|h| h.iter_mut().rev().find(|h| h.preempt.is_some()))
        else {
            return;
        };
        if let Some(preempt) = newest.preempt.take() {
            tracing::debug!(
                namespace = %namespace,
                held = count,
                share,
                "a pull slot is asked back for a namespace waiting below its share"
            );
            self.preempting = Some(newest.id);
            let _ = preempt.send(());
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A future that must be ready now (everything here is decided under one lock).
    async fn now<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("ready")
    }

    fn pending<T>(f: &mut (impl Future<Output = T> + Unpin)) -> bool {
        futures::FutureExt::now_or_never(f).is_none()
    }

    #[tokio::test]
    async fn one_namespace_alone_may_use_every_slot() {
        let slots = FairSlots::new(4);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(now(slots.acquire("a")).await);
        }
        let mut fifth = Box::pin(slots.acquire("a"));
        assert!(pending(&mut fifth));
        held.pop();
        now(fifth).await;
    }

    /// The finding: one namespace held every slot (its pulls hanging) and another waited
    /// for their deadline. Now the newest of its slots is asked back at once.
    #[tokio::test]
    async fn a_namespace_over_its_share_gives_a_slot_back() {
        let slots = FairSlots::new(4);
        let mut a = Vec::new();
        for _ in 0..4 {
            a.push(now(slots.acquire("a")).await);
        }
        let mut b = Box::pin(slots.acquire("b"));
        assert!(pending(&mut b));
        // The newest of a's slots is asked back, and only that one.
        now(a[3].preempted()).await;
        for slot in &mut a[..3] {
            assert!(pending(&mut Box::pin(slot.preempted())));
        }
        a.pop(); // the holder stops
        let mut b1 = now(b).await;
        assert_eq!((slots.held_by("a"), slots.held_by("b")), (3, 1));
        // A second waiter of b: a is still above the share of 2, one more comes back.
        let mut b2 = Box::pin(slots.acquire("b"));
        assert!(pending(&mut b2));
        now(a[2].preempted()).await;
        a.pop();
        let _b2 = now(b2).await;
        assert_eq!((slots.held_by("a"), slots.held_by("b")), (2, 2));
        // At its share, a gives nothing more back for a third waiter of b.
        let mut b3 = Box::pin(slots.acquire("b"));
        assert!(pending(&mut b3));
        assert!(pending(&mut Box::pin(a[1].preempted())));
        assert!(pending(&mut Box::pin(b1.preempted())));
        drop(a);
        now(b3).await;
    }

    #[tokio::test]
    async fn free_slots_go_round_robin_below_share_first() {
        let slots = FairSlots::new(2);
        let a1 = now(slots.acquire("a")).await;
        let a2 = now(slots.acquire("a")).await;
        let mut a3 = Box::pin(slots.acquire("a"));
        let mut b1 = Box::pin(slots.acquire("b"));
        assert!(pending(&mut a3) && pending(&mut b1));
        drop(a2); // asked back or finished: b is below its share and goes first
        let _b1 = now(b1).await;
        assert!(pending(&mut a3));
        drop(a1);
        now(a3).await;
    }

    #[tokio::test]
    async fn a_dropped_waiter_leaves_and_a_dropped_slot_is_free() {
        let slots = FairSlots::new(1);
        let a = now(slots.acquire("a")).await;
        let mut b = Box::pin(slots.acquire("b"));
        assert!(pending(&mut b));
        drop(b);
        drop(a);
        let _c = now(slots.acquire("c")).await;
        assert_eq!(slots.held_by("a") + slots.held_by("b"), 0);
        assert_eq!(slots.held_by("c"), 1);
    }
}
