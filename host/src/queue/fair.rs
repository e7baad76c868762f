//! Slots of a host-wide resource shared fairly among tenants, in the spirit of the API
//! server's Priority and Fairness. A tenant is a namespace (`""` for the operator's plugin
//! files); each tenant that holds or waits for slots has a fair share of
//! `ceil(cap / such tenants)`. A free slot goes, round-robin, to the next tenant waiting
//! below its share, and only when none is, to the next one waiting at or above it, so no
//! slot idles while anyone may take it; each tenant's own waiters are served in order. One
//! tenant's burst then costs its own share, never another's: a tenant arriving while the
//! first holds every slot gets the next one freed.
//!
//! Two options, for the callers that need them:
//! - a maximum per tenant ([`FairSlots::with_max_per_tenant`]): a tenant never holds more,
//!   even alone;
//! - preemption ([`FairSlots::with_preemption`]): when every slot is held and a tenant waits
//!   below its share while another holds more than its own, the newest slot of the tenant
//!   holding the most is asked back ([`FairPermit::preempted`]); its holder stops and queues
//!   again. So one tenant whose work hangs (a registry that never answers) keeps at most its
//!   share once another tenant waits, not every slot until its deadline.
//!
//! Waiting and holding are both cancel-safe: a waiter dropped before its turn takes
//! nothing, one dropped after gives its slot back, and dropping a [`FairPermit`] gives the
//! slot to the next tenant in turn at once.

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
    /// Whether a slot is asked back for a tenant waiting below its share.
    preemption: bool,
    in_use: usize,
    next_id: u64,
    /// The tenants that hold or wait for slots.
    tenants: BTreeMap<Arc<str>, Tenant>,
    /// The tenants with waiters, in the order they are served.
    turn: VecDeque<Arc<str>>,
    /// The slot asked back and not given back yet: one at a time.
    preempting: Option<u64>,
}

/// One tenant's slots and waiters.
#[derive(Debug, Default)]
struct Tenant {
    /// Slots held, oldest first.
    held: Vec<Held>,
    /// Waiters, first come first served.
    waiting: VecDeque<Waiter>,
}

/// A slot held.
#[derive(Debug)]
struct Held {
    id: u64,
    /// Sends the request to give the slot back (taken when sent).
    preempt: Option<oneshot::Sender<()>>,
}

/// A waiter in line: granted a slot, it is sent the receiving end of its slot's preemption.
#[derive(Debug)]
struct Waiter {
    id: u64,
    grant: oneshot::Sender<oneshot::Receiver<()>>,
}

/// One slot held by a tenant; dropping it gives the slot to the next tenant in turn.
#[derive(Debug)]
pub struct FairPermit {
    state: Arc<Mutex<State>>,
    tenant: Arc<str>,
    id: u64,
    preempted: oneshot::Receiver<()>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FairSlots {
    /// `cap` slots (at least one), without a per-tenant maximum nor preemption.
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        FairSlots {
            state: Arc::new(Mutex::new(State {
                cap,
                max_per_tenant: cap,
                preemption: false,
                in_use: 0,
                next_id: 0,
                tenants: BTreeMap::new(),
                turn: VecDeque::new(),
                preempting: None,
            })),
        }
    }

    /// At most `max` slots (at least one) to one tenant, even when no other tenant waits.
    pub fn with_max_per_tenant(self, max: usize) -> Self {
        {
            let mut state = lock(&self.state);
            state.max_per_tenant = max.clamp(1, state.cap);
        }
        self
    }

    /// Asks a slot back for a tenant waiting below its share (see the module's doc); the
    /// holders must watch [`FairPermit::preempted`].
    pub fn with_preemption(self) -> Self {
        lock(&self.state).preemption = true;
        self
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
        lock(&self.state).held(tenant)
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
        let (id, granted) = {
            let mut state = lock(&self.state);
            let id = state.next_id;
            state.next_id += 1;
            let (grant, granted) = oneshot::channel();
            let entry = state.tenants.entry(tenant.clone()).or_default();
            entry.waiting.push_back(Waiter { id, grant });
            if entry.waiting.len() == 1 {
                state.turn.push_back(tenant.clone());
            }
            state.dispatch();
            (id, granted)
        };
        // Dropped before the grant is seen: leaves the queue, or gives the slot back.
        let mut waiting = Waiting {
            state: &self.state,
            tenant: &tenant,
            id,
            done: false,
        };
        // The sender is only dropped by a grant (sent) or by `Waiting` (which is this
        // future's own drop): an error cannot be seen here.
        let preempted = granted.await.unwrap_or_else(|_| oneshot::channel().1);
        waiting.done = true;
        FairPermit {
            state: self.state.clone(),
            tenant: tenant.clone(),
            id,
            preempted,
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

impl FairPermit {
    /// Resolves when the slot is asked back for a tenant below its share (only with
    /// [`FairSlots::with_preemption`]): the holder should stop, drop the slot and queue
    /// again. Never resolves otherwise.
    pub async fn preempted(&mut self) {
        if (&mut self.preempted).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for FairPermit {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.release(&self.tenant, self.id);
        state.dispatch();
    }
}

/// A waiter's place in line until its grant is seen.
struct Waiting<'a> {
    state: &'a Mutex<State>,
    tenant: &'a str,
    id: u64,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(self.state);
        let queued = state.tenants.get_mut(self.tenant).and_then(|t| {
            let at = t.waiting.iter().position(|w| w.id == self.id)?;
            t.waiting.remove(at)
        });
        if queued.is_none() {
            // Granted meanwhile: the slot is given back.
            state.release(self.tenant, self.id);
        }
        state.tidy(self.tenant);
        state.dispatch();
    }
}

impl State {
    fn held(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, |t| t.held.len())
    }

    /// The fair share of each tenant that holds or waits.
    fn share(&self) -> usize {
        self.cap.div_ceil(self.tenants.len().max(1))
    }

    /// Gives back `tenant`'s slot `id`, if it holds it.
    fn release(&mut self, tenant: &str, id: u64) {
        if let Some(t) = self.tenants.get_mut(tenant)
            && let Some(at) = t.held.iter().position(|h| h.id == id)
        {
            t.held.remove(at);
            self.in_use -= 1;
        }
        if self.preempting == Some(id) {
            self.preempting = None;
        }
        self.tidy(tenant);
    }

    /// Forgets a tenant that neither holds nor waits, and takes one without waiters out
    /// of the turns.
    fn tidy(&mut self, tenant: &str) {
        let Some(t) = self.tenants.get(tenant) else {
            return;
        };
        if t.waiting.is_empty() {
            self.turn.retain(|n| &**n != tenant);
            if t.held.is_empty() {
                self.tenants.remove(tenant);
            }
        }
    }

    /// Hands free slots to waiters, round-robin, tenants below their share first; when none
    /// is free and a tenant waits below its share, asks one slot back (with preemption).
    fn dispatch(&mut self) {
        loop {
            let share = self.share().min(self.max_per_tenant);
            let below = self.turn.iter().position(|n| self.held(n) < share);
            if self.in_use >= self.cap {
                if self.preemption && below.is_some() && self.preempting.is_none() {
                    self.preempt_above(self.share());
                }
                return;
            }
            let next = below.or_else(|| {
                self.turn
                    .iter()
                    .position(|n| self.held(n) < self.max_per_tenant)
            });
            let Some(name) = next.and_then(|at| self.turn.remove(at)) else {
                return;
            };
            let tenant = self
                .tenants
                .get_mut(&name)
                .expect("a tenant in turn is known");
            let waiter = tenant.waiting.pop_front().expect("a tenant in turn waits");
            if !tenant.waiting.is_empty() {
                // Its next waiter is served after every other tenant waiting had a turn.
                self.turn.push_back(name.clone());
            }
            let (preempt, preempted) = oneshot::channel();
            tenant.held.push(Held {
                id: waiter.id,
                preempt: Some(preempt),
            });
            self.in_use += 1;
            if waiter.grant.send(preempted).is_err() {
                // Cannot happen (a waiter leaves the line under this lock); stay exact.
                self.release(&name, waiter.id);
            }
        }
    }

    /// Asks the newest slot of the tenant holding the most back, if it holds more than
    /// `share`.
    fn preempt_above(&mut self, share: usize) {
        let Some((name, tenant)) = self.tenants.iter_mut().max_by_key(|(_, t)| t.held.len()) else {
            return;
        };
        let held = tenant.held.len();
        if held <= share {
            return;
        }
        let Some(newest) = tenant.held.iter_mut().rev().find(|h| h.preempt.is_some()) else {
            return;
        };
        if let Some(preempt) = newest.preempt.take() {
            tracing::debug!(
                tenant = %name,
                held,
                share,
                "a slot is asked back for a tenant waiting below its share"
            );
            self.preempting = Some(newest.id);
            let _ = preempt.send(());
        }
    }
}

#[cfg(test)]
mod tests;
