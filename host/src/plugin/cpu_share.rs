//! Fair shares of the host's cores for guest code, per tenant. Guest code yields at every
//! epoch tick; here each tick (and each call's end) charges the time the guest ran since it
//! last resumed to its tenant. While more than one tenant runs calls, a tenant may spend at
//! most `cores / active tenants` of CPU per second (plus a small burst); a tenant past that
//! sleeps at its tick instead of yielding, for as long as it takes its share to pay the
//! debt. Alone, a tenant may use every core.
//!
//! Why: fair sandbox slots bound how many calls a tenant runs, not what they cost. A tenant
//! whose calls spin until their deadline kept every runtime thread busy between its yields,
//! and the other tenants' calls, watches and writes (and, on a small host, the API server
//! beside it) waited for the CPU: quiet tenants' change→patch p50 went from 1.7 to 5.8 ms
//! (the e2e bench's tenants phase). Sleeping, unlike yielding, leaves the cores to others.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How recently a tenant must have run a call to count as active (sharing the cores).
pub const SHARE_WINDOW: Duration = Duration::from_millis(100);
/// CPU time a tenant may spend ahead of its share before it is paused.
pub const BURST: Duration = Duration::from_millis(20);
/// The longest single pause at a tick (the next tick pauses again if still in debt).
pub const MAX_PAUSE: Duration = Duration::from_millis(50);
/// How often the active tenants are recounted (and idle accounts dropped).
const SWEEP_EVERY: Duration = Duration::from_millis(10);

/// The host's cores shared between tenants' guest code; clones share the accounts.
#[derive(Clone)]
pub struct GuestCpu {
    shares: Arc<Mutex<Shares>>,
    /// The zero of the resume marks.
    origin: Instant,
    /// Ticks at which a guest slept instead of yielding, for the metrics.
    pauses: Counter,
    /// The time those guests slept, for the metrics.
    paused_seconds: Counter<f64, AtomicU64>,
}

impl std::fmt::Debug for GuestCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shares = lock(&self.shares);
        f.debug_struct("GuestCpu")
            .field("cores", &shares.cores)
            .field("active", &shares.active)
            .finish_non_exhaustive()
    }
}

/// One tenant's handle on the shared cores (cheap to clone).
#[derive(Debug, Clone)]
pub struct CpuAccount {
    cpu: GuestCpu,
    tenant: Arc<str>,
}

/// The CPU accounting of one call in flight: it counts its tenant as active until dropped,
/// when it charges the call's last slice.
pub(crate) struct CallCpu {
    account: CpuAccount,
    resumed: Arc<AtomicU64>,
}

fn lock(m: &Mutex<Shares>) -> std::sync::MutexGuard<'_, Shares> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GuestCpu {
    /// Shares of `cores` cores (at least one).
    pub fn new(cores: usize) -> Self {
        let now = Instant::now();
        GuestCpu {
            shares: Arc::new(Mutex::new(Shares::new(cores, now))),
            origin: now,
            pauses: Counter::default(),
            paused_seconds: Counter::default(),
        }
    }

    /// Registers the pause counters (`kubeplug_guest_cpu_pauses`,
    /// `kubeplug_guest_cpu_paused_seconds`), all tenants together: per-tenant series would
    /// grow with the tenants, and the host log names the tenant of each pause.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubeplug_guest_cpu_pauses",
            "Epoch ticks at which a tenant's guest code slept, past its share of the cores, instead of yielding",
            self.pauses.clone(),
        );
        registry.register(
            "kubeplug_guest_cpu_paused_seconds",
            "Time guest code slept past its tenant's share of the cores",
            self.paused_seconds.clone(),
        );
    }

    /// Shares of the cores this process may use.
    pub fn of_host() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The account of `tenant` (a namespace; `""` for the operator's plugin files).
    pub fn account(&self, tenant: &str) -> CpuAccount {
        CpuAccount {
            cpu: self.clone(),
            tenant: tenant.into(),
        }
    }

    /// Ticks at which a guest slept past its tenant's share, since the start.
    pub fn pauses(&self) -> u64 {
        self.pauses.get()
    }

    fn mark(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }
}

impl CpuAccount {
    /// A call of this tenant starts running guest code now.
    pub(crate) fn begin(&self) -> CallCpu {
        let now = Instant::now();
        lock(&self.cpu.shares).begin(&self.tenant, now);
        CallCpu {
            account: self.clone(),
            resumed: Arc::new(AtomicU64::new(self.cpu.mark(now))),
        }
    }
}

impl CallCpu {
    /// At an epoch tick at `now`: charges the slice since the guest last resumed and says
    /// how long it must pause (zero: a plain yield).
    pub(crate) fn tick(&self, now: Instant) -> Duration {
        let slice = self.slice(now);
        let cpu = &self.account.cpu;
        let pause = lock(&cpu.shares).charge(&self.account.tenant, slice, now);
        if !pause.is_zero() {
            cpu.pauses.inc();
            cpu.paused_seconds.inc_by(pause.as_secs_f64());
            tracing::trace!(tenant = %self.account.tenant, pause_us = pause.as_micros() as u64, "guest paused past its tenant's share of the cores");
        }
        pause
    }

    /// What the guest calls once it runs again, to start its next slice.
    pub(crate) fn resume_mark(&self) -> ResumeMark {
        ResumeMark {
            origin: self.account.cpu.origin,
            resumed: self.resumed.clone(),
        }
    }

    fn slice(&self, now: Instant) -> Duration {
        let resumed = self.resumed.load(Ordering::Relaxed);
        Duration::from_nanos(self.account.cpu.mark(now).saturating_sub(resumed))
    }
}

impl Drop for CallCpu {
    fn drop(&mut self) {
        let now = Instant::now();
        let slice = self.slice(now);
        lock(&self.account.cpu.shares).end(&self.account.tenant, slice, now);
    }
}

/// Marks when a paused or yielded guest runs again.
pub(crate) struct ResumeMark {
    origin: Instant,
    resumed: Arc<AtomicU64>,
}

impl ResumeMark {
    /// The guest runs again now.
    pub(crate) fn now(&self) {
        let at = Instant::now().saturating_duration_since(self.origin);
        self.resumed.store(at.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Every tenant's account: a token bucket of CPU time refilled at the tenant's share.
#[derive(Debug)]
struct Shares {
    cores: f64,
    tenants: HashMap<Arc<str>, Account>,
    /// Tenants with a call in flight or ended within [`SHARE_WINDOW`], as last counted.
    active: usize,
    swept: Instant,
}

#[derive(Debug)]
struct Account {
    /// Calls in flight.
    calls: usize,
    /// When its last call ended, if one did.
    last_call: Option<Instant>,
    /// CPU seconds it may still spend (negative: its debt).
    tokens: f64,
    refilled: Instant,
}

impl Account {
    fn active(&self, now: Instant) -> bool {
        self.calls > 0
            || self
                .last_call
                .is_some_and(|t| now.saturating_duration_since(t) < SHARE_WINDOW)
    }
}

impl Shares {
    fn new(cores: usize, now: Instant) -> Self {
        Shares {
            cores: cores.max(1) as f64,
            tenants: HashMap::new(),
            active: 0,
            swept: now,
        }
    }

    fn begin(&mut self, tenant: &Arc<str>, now: Instant) {
        let account = self.tenants.entry(tenant.clone()).or_insert(Account {
            calls: 0,
            last_call: None,
            tokens: BURST.as_secs_f64(),
            refilled: now,
        });
        if !account.active(now) {
            self.active += 1;
        }
        account.calls += 1;
    }

    fn end(&mut self, tenant: &Arc<str>, slice: Duration, now: Instant) {
        self.charge(tenant, slice, now);
        if let Some(account) = self.tenants.get_mut(tenant) {
            account.calls = account.calls.saturating_sub(1);
            account.last_call = Some(now);
        }
    }

    /// Charges `slice` to `tenant` at `now`; the pause it must take (zero when within its
    /// share, or alone).
    fn charge(&mut self, tenant: &Arc<str>, slice: Duration, now: Instant) -> Duration {
        if now.saturating_duration_since(self.swept) >= SWEEP_EVERY {
            self.sweep(now);
        }
        let rate = self.cores / self.active.max(1) as f64;
        let alone = self.active <= 1;
        let Some(account) = self.tenants.get_mut(tenant) else {
            return Duration::ZERO;
        };
        let earned = rate
            * now
                .saturating_duration_since(account.refilled)
                .as_secs_f64();
        account.tokens = (account.tokens + earned).min(BURST.as_secs_f64()) - slice.as_secs_f64();
        account.refilled = now;
        if alone {
            // Alone it may use every core, and carries no debt into the next contention.
            account.tokens = account.tokens.max(0.0);
            return Duration::ZERO;
        }
        if account.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-account.tokens / rate).min(MAX_PAUSE)
    }

    /// Recounts the active tenants and forgets the idle ones whose bucket is full (an
    /// absent account is a full bucket).
    fn sweep(&mut self, now: Instant) {
        let full = BURST.as_secs_f64();
        let rate = self.cores / self.active.max(1) as f64;
        self.tenants.retain(|_, a| {
            let tokens = a.tokens + rate * now.saturating_duration_since(a.refilled).as_secs_f64();
            a.active(now) || tokens < full
        });
        self.active = self.tenants.values().filter(|a| a.active(now)).count();
        self.swept = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn tenant(name: &str) -> Arc<str> {
        name.into()
    }

    #[test]
    fn a_tenant_alone_is_never_paused() {
        let t0 = Instant::now();
        let mut shares = Shares::new(2, t0);
        let a = tenant("a");
        shares.begin(&a, t0);
        shares.begin(&a, t0);
        for i in 1..=1000 {
            assert_eq!(shares.charge(&a, ms(1), t0 + ms(i)), Duration::ZERO);
        }
    }

    #[test]
    fn beside_another_tenant_a_spinner_is_held_to_its_share() {
        let t0 = Instant::now();
        let mut shares = Shares::new(2, t0);
        let (noisy, quiet) = (tenant("noisy"), tenant("quiet"));
        shares.begin(&quiet, t0);
        shares.begin(&noisy, t0);
        shares.begin(&noisy, t0);
        // Two spinners that each run 1 ms then pause as told, for one simulated second.
        let (mut ran, mut pauses) = (Duration::ZERO, 0);
        let mut clocks = [t0, t0];
        let end = t0 + Duration::from_secs(1);
        while clocks.iter().any(|c| *c < end) {
            let i = if clocks[0] <= clocks[1] { 0 } else { 1 };
            let now = clocks[i] + ms(1);
            ran += ms(1);
            let pause = shares.charge(&noisy, ms(1), now);
            pauses += usize::from(!pause.is_zero());
            clocks[i] = now + pause;
        }
        // Its share of 2 cores beside one other active tenant: 1 core-second (and its burst).
        let spent = ran.as_secs_f64();
        assert!(
            (0.95..=1.1).contains(&spent),
            "the noisy tenant ran {spent:.3} CPU s in 1 s of 2 cores"
        );
        assert!(pauses > 0);
        // The quiet tenant, within its share, is never paused.
        assert_eq!(shares.charge(&quiet, ms(1), end), Duration::ZERO);
    }

    #[test]
    fn a_tenant_counts_as_active_for_a_window_after_its_call() {
        let t0 = Instant::now();
        let mut shares = Shares::new(1, t0);
        let (a, b) = (tenant("a"), tenant("b"));
        shares.begin(&b, t0);
        shares.end(&b, ms(0), t0 + ms(1));
        shares.begin(&a, t0 + ms(1));
        // b's call ended 1 ms ago: a shares the core and, past its burst, pauses.
        let pause = shares.charge(&a, BURST + ms(10), t0 + ms(12));
        assert!(pause > Duration::ZERO, "a was not paused beside b");
        // Past the window, b no longer counts: a is alone and runs on.
        let later = t0 + ms(1) + SHARE_WINDOW + SWEEP_EVERY;
        assert_eq!(shares.charge(&a, ms(50), later), Duration::ZERO);
    }

    #[test]
    fn idle_accounts_are_forgotten() {
        let t0 = Instant::now();
        let mut shares = Shares::new(2, t0);
        for i in 0..100 {
            let t = tenant(&format!("t{i}"));
            shares.begin(&t, t0);
            shares.end(&t, ms(1), t0);
        }
        let late = t0 + Duration::from_secs(5);
        shares.sweep(late);
        assert!(
            shares.tenants.is_empty(),
            "{} accounts kept",
            shares.tenants.len()
        );
        assert_eq!(shares.active, 0);
    }

    #[test]
    fn pauses_are_bounded() {
        let t0 = Instant::now();
        let mut shares = Shares::new(1, t0);
        let (a, b) = (tenant("a"), tenant("b"));
        shares.begin(&a, t0);
        shares.begin(&b, t0);
        let pause = shares.charge(&a, Duration::from_secs(10), t0 + ms(1));
        assert_eq!(pause, MAX_PAUSE);
    }
}
