//! Fair shares of a host-wide resource among tenants, in the spirit of the API server's
//! Priority and Fairness: a tenant (a namespace; `""` for the operator's plugin files) takes
//! at most `max_per_tenant` slots, and while other tenants wait, at most its fair share
//! (the cap divided among the tenants holding or waiting); waiting tenants are served in
//! turn, each tenant's own waiters in order. One tenant's burst then costs its own share,
//! never another's: a tenant arriving while the first holds every slot gets the next one
//! freed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Slots shared fairly among tenants; clones share them.
#[derive(Debug, Clone)]
pub struct FairSlots {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    cap: usize,
    max_per_tenant: usize,
    in_use: usize,
    tenants: BTreeMap<Arc<str>, Tenant>,
    /// The tenant served last: the next turn goes to the one after it.
    last: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct Tenant {
    held: usize,
    waiting: VecDeque<oneshot::Sender<()>>,
}

/// One slot; dropping it gives the slot to the next tenant in turn.
#[derive(Debug)]
pub struct FairPermit {
    state: Arc<Mutex<State>>,
    tenant: Arc<str>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FairSlots {
    /// `cap` slots (at least one), at most `max_per_tenant` (at least one) to one tenant.
    pub fn new(cap: usize, max_per_tenant: usize) -> Self {
        let cap = cap.max(1);
        FairSlots {
            state: Arc::new(Mutex::new(State {
                cap,
                max_per_tenant: max_per_tenant.clamp(1, cap),
                in_use: 0,
                tenants: BTreeMap::new(),
                last: None,
            })),
        }
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        lock(&self.state).cap
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        let state = lock(&self.state);
        state.cap - state.in_use
    }

    /// Slots `tenant` holds now.
    pub fn held_by(&self, tenant: &str) -> usize {
        lock(&self.state).tenants.get(tenant).map_or(0, |t| t.held)
    }

    /// These slots as `tenant` takes them.
    pub fn for_tenant(&self, tenant: &str) -> TenantSlots {
        TenantSlots {
            slots: self.clone(),
            tenant: tenant.into(),
        }
    }

    /// Waits for a slot for `tenant`, its turn among the tenants waiting. Cancel-safe: a
    /// waiter dropped before its turn takes nothing, one dropped after gives it back.
    pub async fn acquire(&self, tenant: &str) -> FairPermit {
        let tenant: Arc<str> = tenant.into();
        loop {
            let (tx, rx) = oneshot::channel();
            {
                let mut state = lock(&self.state);
                state
                    .tenants
                    .entry(tenant.clone())
                    .or_default()
                    .waiting
                    .push_back(tx);
                state.dispatch();
            }
            let mut waiting = Waiting {
                rx: Some(rx),
                state: self.state.clone(),
                tenant: tenant.clone(),
            };
            let granted = waiting.rx.as_mut().expect("set above").await;
            waiting.rx = None;
            if granted.is_ok() {
                return FairPermit {
                    state: self.state.clone(),
                    tenant,
                };
            }
        }
    }
}

/// Fair slots bound to one tenant: what a running plugin holds.
#[derive(Debug, Clone)]
pub struct TenantSlots {
    slots: FairSlots,
    tenant: Arc<str>,
}

impl TenantSlots {
    /// Waits for a slot, the tenant's turn (see [`FairSlots::acquire`]).
    pub async fn acquire(&self) -> FairPermit {
        self.slots.acquire(&self.tenant).await
    }
}

/// A waiter in line; dropped after its slot was granted but before it woke, it gives the
/// slot back.
struct Waiting {
    rx: Option<oneshot::Receiver<()>>,
    state: Arc<Mutex<State>>,
    tenant: Arc<str>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                lock(&self.state).release(&self.tenant);
            }
        }
    }
}

impl State {
    /// The tenants that hold or wait for slots.
    fn active(&self) -> usize {
        self.tenants.len().max(1)
    }

    /// Whether `name` may take one more slot now.
    fn may_take(&self, name: &str) -> bool {
        let Some(t) = self.tenants.get(name) else {
            return false;
        };
        if t.held >= self.max_per_tenant {
            return false;
        }
        let share = self.cap.div_ceil(self.active());
        let others_wait = self
            .tenants
            .iter()
            .any(|(n, o)| &**n != name && !o.waiting.is_empty());
        t.held < share || !others_wait
    }

    /// Hands free slots to waiting tenants, in turn after the last one served.
    fn dispatch(&mut self) {
        while self.in_use < self.cap {
            let names: Vec<Arc<str>> = self.tenants.keys().cloned().collect();
            let start = match &self.last {
                Some(last) => names.iter().position(|n| n > last).unwrap_or(0),
                None => 0,
            };
            let next = (0..names.len())
                .map(|i| names[(start + i) % names.len()].clone())
                .find(|n| !self.tenants[n].waiting.is_empty() && self.may_take(n));
            let Some(name) = next else {
                break;
            };
            let tenant = self.tenants.get_mut(&name).expect("listed above");
            let waiter = tenant.waiting.pop_front().expect("checked non-empty");
            if waiter.send(()).is_ok() {
                tenant.held += 1;
                self.in_use += 1;
                self.last = Some(name);
            } else if tenant.held == 0 && tenant.waiting.is_empty() {
                self.tenants.remove(&name);
            }
        }
    }

    fn release(&mut self, name: &str) {
        if let Some(t) = self.tenants.get_mut(name) {
            t.held = t.held.saturating_sub(1);
            if t.held == 0 && t.waiting.is_empty() {
                self.tenants.remove(name);
            }
        }
        self.in_use = self.in_use.saturating_sub(1);
        self.dispatch();
    }
}

impl Drop for FairPermit {
    fn drop(&mut self) {
        lock(&self.state).release(&self.tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A waiter's future, polled once: `Some` if it got its slot at once.
    fn try_now(slots: &FairSlots, tenant: &str) -> Option<FairPermit> {
        slots.acquire(tenant).now_or_never()
    }

    #[tokio::test]
    async fn a_tenant_alone_may_use_every_slot_up_to_its_maximum() {
        let slots = FairSlots::new(4, 3);
        let held: Vec<_> = (0..3).filter_map(|_| try_now(&slots, "a")).collect();
        assert_eq!(held.len(), 3);
        assert!(try_now(&slots, "a").is_none(), "at most 3 per tenant");
        assert!(try_now(&slots, "b").is_some(), "the fourth is another's");
    }

    #[tokio::test]
    async fn the_next_free_slot_goes_to_the_tenant_that_waited_not_the_busy_one() {
        let slots = FairSlots::new(2, 2);
        let a1 = try_now(&slots, "a").unwrap();
        let _a2 = try_now(&slots, "a").unwrap();
        // a queues a third, then b arrives: a's release goes to b, although a asked first.
        let a3 = tokio::spawn({
            let s = slots.clone();
            async move { s.acquire("a").await }
        });
        tokio::task::yield_now().await;
        let b = tokio::spawn({
            let s = slots.clone();
            async move { s.acquire("b").await }
        });
        tokio::task::yield_now().await;
        drop(a1);
        let b = b.await.unwrap();
        assert_eq!(slots.held_by("b"), 1);
        assert!(!a3.is_finished());
        // b's share is one of two: when it is done, a's waiter runs.
        drop(b);
        let _a3 = a3.await.unwrap();
        assert_eq!(slots.held_by("a"), 2);
    }

    #[tokio::test]
    async fn waiting_tenants_share_in_turn() {
        let slots = FairSlots::new(4, 4);
        let mut held: Vec<FairPermit> = (0..4).filter_map(|_| try_now(&slots, "a")).collect();
        let mut waiters = Vec::new();
        for tenant in ["a", "a", "a", "b", "b", "c"] {
            let s = slots.clone();
            waiters.push(tokio::spawn(async move { s.acquire(tenant).await }));
            tokio::task::yield_now().await;
        }
        // Four releases of a's: b, c and b get three (their shares of a 4-slot cap among
        // three tenants are 2, 2 and 2; a holds 1 then, under its share), a one.
        for _ in 0..4 {
            held.pop();
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(slots.held_by("b"), 2);
        assert_eq!(slots.held_by("c"), 1);
        assert_eq!(slots.held_by("a"), 1);
        assert_eq!(slots.available(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_takes_nothing() {
        let slots = FairSlots::new(1, 1);
        let a = try_now(&slots, "a").unwrap();
        let cancelled = slots.acquire("b");
        drop(cancelled.now_or_never());
        drop(a);
        assert_eq!(slots.available(), 1);
        assert!(try_now(&slots, "c").is_some());
    }
}
