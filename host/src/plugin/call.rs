//! The one bounded call every export goes through (reconcile, metadata, and calls in a warm
//! sandbox): a store with the call's limits and deadline, the call under the wall-clock
//! deadline, the failure classified (timeout, trap, out of memory, ...), and the call's
//! output and log accounting settled. Version-independent: the export is reached through
//! [`ContractExports`].

use super::error::CallError;
use super::limits::Limits;
use super::sandbox::{CallIdentity, PluginLog, SandboxState};
use super::transient::{self, MAX_INSTANTIATE_ATTEMPTS};
use super::trap;
use super::wit::{ContractExports, ContractPre};
use crate::contract::ObjectSource;
use crate::contract::text::shown_max;
use crate::contract::{Action, OutputLimits, PluginMetadata, ReconcileRequest};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Engine, Store, UpdateDeadline};

/// When a call started and when it must be over. The deadline is on the real clock: host
/// imports and the wait for the call check it, and so does the epoch callback
/// ([`yield_or_trap`]) at every tick the guest runs through. Every call, fresh or warm,
/// reconcile or metadata, starts its clock here.
#[derive(Debug, Clone, Copy)]
pub(super) struct CallClock {
    /// When the call started.
    pub(super) started: Instant,
    /// When it must be over.
    pub(super) deadline: Instant,
}

impl CallClock {
    /// Starts the clock of a call that may take `timeout`.
    pub(super) fn start(timeout: Duration) -> Self {
        let started = Instant::now();
        CallClock {
            started,
            deadline: started + timeout,
        }
    }

    /// What remains until the deadline (zero once it passed).
    pub(super) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sets the deadline on `store`, before any guest code of the call runs (instantiation
    /// runs some), and asks for the epoch callback at the next tick.
    pub(super) fn arm(&self, store: &mut Store<SandboxState>) {
        store.data_mut().deadline = self.deadline;
        store.set_epoch_deadline(1);
    }
}

/// What guest code does at each epoch tick: past its call's deadline it traps (a timeout);
/// before it, it yields to the async runtime and runs on at the next tick, or, when its
/// tenant has spent more than its share of the cores ([`super::cpu_share`]), sleeps first
/// (never past the deadline). Calls run on the runtime's own threads, not one blocking
/// thread each (each thread kept its own allocator pages: ten plugins' calls took 95 to 227
/// threads and most of the host's memory, measured): yielding every tick is what keeps a
/// guest that spins until its deadline from holding a runtime thread for longer than a tick.
fn yield_or_trap(
    store: wasmtime::StoreContextMut<'_, SandboxState>,
) -> wasmtime::Result<UpdateDeadline> {
    let now = Instant::now();
    let deadline = store.data().deadline;
    if now >= deadline {
        return Err(wasmtime::Trap::Interrupt.into());
    }
    let (pause, resumed) = match &store.data().cpu {
        Some(cpu) => (cpu.tick(now).min(deadline - now), Some(cpu.resume_mark())),
        None => (Duration::ZERO, None),
    };
    // Through tokio's `yield_now`, which queues the call behind every task ready to run. A
    // plain `Yield` wakes the task at once, into the worker's LIFO slot, so two spinning
    // guests kept both runtime threads of a 2-core host: another tenant's call and the
    // host's own pass waited for their deadlines (change->patch 1.2 s instead of 20 ms).
    Ok(UpdateDeadline::YieldCustom(
        1,
        Box::pin(async move {
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
            if let Some(resumed) = resumed {
                resumed.now();
            }
        }),
    ))
}

/// A store for one call: the sandbox state and the memory limiter, with `clock`'s deadlines.
pub(super) fn new_store(
    engine: &Engine,
    clock: &CallClock,
    limits: &Limits,
    objects: Arc<dyn ObjectSource>,
    who: CallIdentity,
) -> Store<SandboxState> {
    let state = SandboxState::new(limits, objects, who);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.epoch_deadline_callback(yield_or_trap);
    clock.arm(&mut store);
    store
}

/// An export a call can run, whatever the contract version.
pub(super) trait Export {
    /// What the export returns once converted to the host's types.
    type Output;

    /// Calls the export among `exports`.
    fn call(
        self,
        exports: &ContractExports,
        store: &mut Store<SandboxState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Output>> + Send;
}

/// The reconcile export, with the bounds on its output.
pub(super) struct Reconcile<'a> {
    pub(super) request: &'a ReconcileRequest,
    pub(super) output: OutputLimits,
}

impl Export for Reconcile<'_> {
    type Output = Result<Vec<Action>, CallError>;

    async fn call(
        self,
        exports: &ContractExports,
        store: &mut Store<SandboxState>,
    ) -> wasmtime::Result<Self::Output> {
        exports.reconcile(store, self.request, self.output).await
    }
}

/// The metadata export (its answer is checked by the loader).
pub(super) struct Metadata;

impl Export for Metadata {
    type Output = PluginMetadata;

    async fn call(
        self,
        exports: &ContractExports,
        store: &mut Store<SandboxState>,
    ) -> wasmtime::Result<PluginMetadata> {
        exports.metadata(store).await
    }
}

/// What a call is about, for its deadline, limits and log attribution.
pub(super) struct CallScope<'a> {
    pub(super) limits: &'a Limits,
    pub(super) clock: CallClock,
    pub(super) plugin: &'a str,
}

/// Runs `export` on `exports` (the plugin instantiated in `store`) until the scope's
/// deadline, then settles the call: the one place where a timeout, a trap or a refused memory
/// growth becomes a [`CallError`]. The scope's clock must be armed on the store already
/// ([`new_store`] does).
pub(super) async fn run<E: Export>(
    store: &mut Store<SandboxState>,
    exports: &ContractExports,
    export: E,
    scope: CallScope<'_>,
) -> Settled<E::Output> {
    // The deadline is on the real clock (host imports check it on their own threads); the
    // wait for the call runs on tokio's, which tests pause: wait for what remains of it.
    let result = tokio::time::timeout(scope.clock.remaining(), export.call(exports, store)).await;
    settle(store, result, scope)
}

/// The plugin instantiated in `store` (under the clock's deadline: instantiation runs guest
/// code), or the error it failed with (an injected one in tests).
async fn instantiate(
    pre: &ContractPre,
    store: &mut Store<SandboxState>,
    clock: &CallClock,
) -> Result<wasmtime::Result<ContractExports>, tokio::time::error::Elapsed> {
    tokio::time::timeout(clock.remaining(), async {
        match transient::injected() {
            Some(err) => Err(err),
            None => pre.instantiate(store).await,
        }
    })
    .await
}

/// [`run`] in a fresh sandbox: a new store for `who`, under `clock`. An instantiation that
/// fails for a transient OS reason ([`transient::is_transient`]) is tried again in a new
/// store, up to [`MAX_INSTANTIATE_ATTEMPTS`] times with a doubling back-off while the
/// deadline allows, each retry logged and counted in `retries`; when they are spent, the call
/// fails with [`CallError::Instantiate`] (retried with backoff like any transient failure).
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_fresh<E: Export>(
    engine: &Engine,
    clock: CallClock,
    pre: &ContractPre,
    limits: &Limits,
    objects: Arc<dyn ObjectSource>,
    who: CallIdentity,
    export: E,
    retries: &Counter,
) -> Settled<E::Output> {
    let plugin = who.plugin.clone();
    let scope = || CallScope {
        limits,
        clock,
        plugin: &plugin,
    };
    let mut attempt = 1;
    loop {
        let mut store = new_store(engine, &clock, limits, objects.clone(), who.clone());
        let err = match instantiate(pre, &mut store, &clock).await {
            Ok(Ok(exports)) => return run(&mut store, &exports, export, scope()).await,
            Err(elapsed) => return settle(&mut store, Err(elapsed), scope()),
            Ok(Err(err)) => err,
        };
        if !transient::is_transient(&err) {
            return settle(&mut store, Ok(Err(err)), scope());
        }
        let wait = transient::backoff(attempt + 1);
        if attempt >= MAX_INSTANTIATE_ATTEMPTS || clock.remaining() <= wait {
            tracing::warn!(
                plugin = shown_max(&plugin, 256).to_string().as_str(),
                attempts = attempt,
                error = shown_max(&format!("{err:#}"), 512).to_string().as_str(),
                "instantiation kept failing for a transient OS reason: giving up on this call"
            );
            let source = err.into();
            return settle_as(&mut store, scope(), |_, _| {
                Err(CallError::Instantiate { source })
            });
        }
        tracing::warn!(
            plugin = shown_max(&plugin, 256).to_string().as_str(),
            attempt,
            retry_in_ms = wait.as_millis() as u64,
            error = shown_max(&format!("{err:#}"), 512).to_string().as_str(),
            "instantiation failed for a transient OS reason: retrying in a fresh sandbox"
        );
        retries.inc();
        drop(store);
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// A settled call: its typed outcome and what the plugin logged.
pub(super) struct Settled<R> {
    pub(super) outcome: Result<R, CallError>,
    pub(super) logs: Vec<PluginLog>,
    pub(super) dropped: u64,
}

/// Maps the raw outcome to a typed one and collects the plugin's output (its stdout and
/// stderr lines are written to the host log here, through the log gate). Dropped lines are
/// reported in a host line at most once per plugin every
/// [`DROP_REPORT_INTERVAL`](super::log_gate::DROP_REPORT_INTERVAL), with all since the last.
fn settle<R>(
    store: &mut Store<SandboxState>,
    result: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
    scope: CallScope<'_>,
) -> Settled<R> {
    let limits = scope.limits;
    settle_as(store, scope, |refused, stderr| match result {
        Err(_elapsed) => Err(CallError::Timeout {
            limit: limits.timeout,
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(trap::classify(
            &err,
            refused,
            limits.memory_bytes,
            stderr,
            limits.timeout,
        )),
    })
}

/// [`settle`] with the outcome decided by `outcome`, given the memory growth the limiter
/// refused and the guest's stderr.
fn settle_as<R>(
    store: &mut Store<SandboxState>,
    scope: CallScope<'_>,
    outcome: impl FnOnce(Option<usize>, &str) -> Result<R, CallError>,
) -> Settled<R> {
    let state = store.data_mut();
    let taken = state.take_logs();
    if let Some(dropped) = taken.report {
        tracing::warn!(
            plugin = shown_max(scope.plugin, 256).to_string().as_str(),
            dropped,
            "plugin log lines dropped since the last report: over the per-call log limit or the plugin's log rate"
        );
    }
    Settled {
        outcome: outcome(state.limiter.refused, &taken.stderr),
        logs: taken.logs,
        dropped: taken.dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::NoObjects;
    use crate::plugin::test_support::{ctx_ms, hostile, hostile_meta, request, runtime};
    use crate::plugin::{LoadError, PluginRuntime, RuntimeConfig};

    /// What each hostile mode must be classified as.
    const MODES: &[(&str, &str)] = &[
        ("loop", "timeout"),
        ("sleep", "timeout"),
        ("panic", "panic"),
        ("alloc", "out-of-memory"),
        ("recurse", "stack-overflow"),
    ];

    #[tokio::test]
    async fn fresh_and_warm_calls_are_classified_alike() {
        let rt = runtime();
        let p = hostile(&rt).await;
        let ctx = ctx_ms(300);
        for (mode, kind) in MODES {
            let config = format!(r#"{{"mode": "{mode}"}}"#);
            let fresh = p.reconcile(&request(&config), &ctx).await.outcome;
            assert_eq!(
                fresh.map_err(|e| e.kind()).err(),
                Some(*kind),
                "fresh {mode}"
            );

            let mut warm = p.warm(&ctx).await.unwrap();
            let first = warm.reconcile(&request(&config)).await.outcome;
            assert_eq!(
                first.map_err(|e| e.kind()).err(),
                Some(*kind),
                "warm {mode}"
            );
            // A failed call poisons the warm sandbox: it is never entered again.
            let again = warm.reconcile(&request(r#"{"mode": "behave"}"#)).await;
            assert_eq!(
                again.outcome.unwrap_err().kind(),
                "instantiate",
                "warm {mode}"
            );
        }
        // Plugin-reported errors are answers, not failures of the call: the warm sandbox
        // keeps serving.
        let mut warm = p.warm(&ctx).await.unwrap();
        let behave = request(r#"{"mode": "behave"}"#);
        assert!(warm.reconcile(&behave).await.outcome.is_ok());
        assert!(warm.reconcile(&behave).await.outcome.is_ok());
    }

    #[tokio::test]
    async fn a_transient_os_error_while_instantiating_is_retried_and_counted() {
        use crate::plugin::transient::fail_next_instantiations;
        let rt = runtime();
        // The load's metadata call: sealing the memory image answers EBUSY twice.
        fail_next_instantiations(2, false);
        let p = hostile(&rt).await;
        assert_eq!(rt.instantiate_retries(), 2);
        // A reconcile: every retry but the last fails too, and the call still succeeds.
        let behave = request(r#"{"mode": "behave"}"#);
        let ctx = ctx_ms(5_000);
        fail_next_instantiations(MAX_INSTANTIATE_ATTEMPTS - 1, false);
        let report = p.reconcile(&behave, &ctx).await;
        assert!(report.outcome.is_ok(), "{:?}", report.outcome);
        assert_eq!(
            rt.instantiate_retries(),
            u64::from(MAX_INSTANTIATE_ATTEMPTS) + 1
        );
        // Retries spent: the call fails as an instantiation failure (a transient one, so the
        // key is retried with backoff), not as the plugin's trap.
        fail_next_instantiations(MAX_INSTANTIATE_ATTEMPTS, false);
        let spent = p.reconcile(&behave, &ctx).await.outcome.unwrap_err();
        assert!(matches!(spent, CallError::Instantiate { .. }), "{spent:?}");
        assert!(spent.is_transient());
        let retried = rt.instantiate_retries();
        // An error that is no OS error is not retried.
        fail_next_instantiations(1, true);
        let permanent = p.reconcile(&behave, &ctx).await.outcome.unwrap_err();
        assert_eq!(permanent.kind(), "trap", "{permanent:?}");
        assert_eq!(rt.instantiate_retries(), retried);
        assert!(p.reconcile(&behave, &ctx).await.outcome.is_ok());
    }

    /// A load's metadata call has the runtime's metadata time limit, not a reconcile's 1 s: a
    /// large component on a loaded machine needs longer once (found by `kubeplug chaos`),
    /// and a metadata export that never answers still ends.
    #[tokio::test]
    async fn a_loads_metadata_call_has_its_own_time_limit() {
        let limit = Duration::from_millis(1500);
        let rt = PluginRuntime::new(RuntimeConfig {
            metadata_timeout: limit,
            ..runtime().config().clone()
        })
        .unwrap();
        let Err(err) = rt.load_bytes("spin.wasm", hostile_meta("spin")).await else {
            panic!("a metadata export that never answers does not load");
        };
        assert!(
            matches!(&err, LoadError::Metadata { source: CallError::Timeout { limit: l }, .. } if *l == limit),
            "{err}"
        );
    }

    #[tokio::test]
    async fn metadata_calls_go_through_the_same_classification() {
        let rt = runtime();
        let p = rt
            .load_bytes("flood.wasm", hostile_meta("flood-log"))
            .await
            .unwrap();
        let who = || CallIdentity {
            plugin: "flood".into(),
            key: "metadata".into(),
            log_rate: p.log_rate.clone(),
            cpu: None,
        };
        let metadata = |limits: Limits, deadline| {
            let who = who();
            let pre = &p.pre;
            let clock = CallClock {
                deadline,
                ..CallClock::start(limits.timeout)
            };
            let engine = &p.engine;
            async move {
                run_fresh(
                    engine,
                    clock,
                    pre,
                    &limits,
                    Arc::new(NoObjects),
                    who,
                    Metadata,
                    &Counter::default(),
                )
                .await
                .outcome
            }
        };
        let limits = Limits::default();
        let ok = metadata(limits, Instant::now() + limits.timeout).await;
        assert_eq!(ok.unwrap().name, "hostile-meta");
        // Its `log` calls find the deadline passed: the call is a timeout.
        let late = metadata(limits, Instant::now()).await;
        assert_eq!(
            late.unwrap_err(),
            CallError::Timeout {
                limit: limits.timeout
            }
        );
        // A memory limit below what the component starts with: out of memory.
        let tiny = Limits {
            memory_bytes: 64 << 10,
            ..limits
        };
        let refused = metadata(tiny, Instant::now() + limits.timeout).await;
        assert!(
            matches!(refused, Err(CallError::OutOfMemory { limit, .. }) if limit == 64 << 10),
            "{refused:?}"
        );
    }
}
