//! A loaded plugin and its calls: each call instantiates the pre-linked component in a fresh
//! store with the call's limits and runs it through the shared bounded call (`call.rs`).

use super::call::{self, CallClock, Reconcile};
use super::compile_cache::CacheOutcome;
use super::cpu_share::CpuAccount;
use super::error::{CallError, LoadError};
use super::limits::Limits;
use super::log_gate::LogRate;
use super::sandbox::{CallIdentity, PluginLog};
use super::wit::ContractPre;
use crate::contract::ObjectSource;
use crate::contract::{Action, PluginMetadata, ReconcileRequest};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::Engine;

/// What a call may use and read.
#[derive(Clone)]
pub struct CallContext {
    /// The call's limits (memory is clamped to the runtime's maximum).
    pub limits: Limits,
    /// Where the `get`/`list` imports read from.
    pub objects: Arc<dyn ObjectSource>,
    /// The instance the call is for: its output is logged under this name. `None`: the
    /// name the plugin declares (offline use only).
    pub instance: Option<Arc<str>>,
    /// The tenant's share of the cores its guest code runs on; `None`: unshared (offline
    /// use, loads).
    pub cpu: Option<CpuAccount>,
}

impl CallContext {
    /// A context with the given limits and object source.
    pub fn new(limits: Limits, objects: Arc<dyn ObjectSource>) -> Self {
        CallContext {
            limits,
            objects,
            instance: None,
            cpu: None,
        }
    }

    /// The same context for instance `name`, so a plugin's output is attributed to the
    /// operator's name for it, never to the name it declares.
    pub fn for_instance(mut self, name: &str) -> Self {
        self.instance = Some(name.into());
        self
    }
}

/// The outcome of one reconcile call, with what the plugin logged on the way (whatever the
/// outcome, so a failing plugin's output is not lost).
#[derive(Debug)]
pub struct CallReport {
    /// The checked actions, or why the call failed.
    pub outcome: Result<Vec<Action>, CallError>,
    /// What the plugin logged (imports, stdout, stderr), as kept by the log gate.
    pub logs: Vec<PluginLog>,
    /// Log lines the plugin wrote in this call that were dropped (per-call limit or the
    /// plugin's log rate).
    pub dropped_logs: u64,
    /// How long the call took, instantiation included.
    pub elapsed: Duration,
}

/// A plugin ready to be called: compiled, linked, contract-checked and described.
pub struct Plugin {
    pub(super) engine: Engine,
    /// Keeps the compiled code on the runtime's shelf for other loads of the same bytes.
    pub(super) _code: Arc<super::shared_code::SharedCode>,
    /// The component linked for the contract version it was built for.
    pub(super) pre: ContractPre,
    pub(super) metadata: PluginMetadata,
    pub(super) name: Arc<str>,
    pub(super) digest: String,
    pub(super) cache_outcome: CacheOutcome,
    /// The plugin's log rate, shared by all its calls.
    pub(super) log_rate: Arc<LogRate>,
    /// The runtime's count of instantiations retried after a transient OS error.
    pub(super) retries: Counter,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("metadata", &self.metadata)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// What the plugin said about itself when it loaded.
    pub fn metadata(&self) -> &PluginMetadata {
        &self.metadata
    }

    /// The name the plugin declares in its metadata: informational (shown beside the
    /// instance name), never used to pick a policy, a queue or a field manager.
    pub fn declared_name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the `.wasm` file, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The contract version the plugin was built for.
    pub fn contract_version(&self) -> &'static str {
        self.pre.version().as_str()
    }

    /// Charges a `log` action of `len` bytes to the plugin's log rate (the one its `log`
    /// import, stdout and stderr share): false when the rate is spent, and the line is
    /// dropped and counted.
    pub fn admit_log_action(&self, len: usize) -> bool {
        self.log_rate.admit_line(len)
    }

    /// Adds `dropped` log actions to the plugin's drops not yet reported: all of them, to be
    /// reported now, when no report was made in the last
    /// [`DROP_REPORT_INTERVAL`](super::log_gate::DROP_REPORT_INTERVAL).
    pub fn report_dropped_logs(&self, dropped: u64) -> Option<u64> {
        self.log_rate.report_dropped(dropped)
    }

    /// Log lines of this plugin dropped since it loaded (per-call limit or log rate).
    pub fn dropped_logs(&self) -> u64 {
        self.log_rate.dropped_total()
    }

    /// Whether loading used the precompiled cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache_outcome
    }

    /// Reconciles one key in a fresh sandbox. Never panics and never hangs past the limit.
    pub async fn reconcile(&self, request: &ReconcileRequest, ctx: &CallContext) -> CallReport {
        let limits = ctx.limits;
        let clock = CallClock::start(limits.timeout);
        let key = request.target.key();
        let who = CallIdentity {
            plugin: self.log_name(ctx),
            key: key.as_str().into(),
            log_rate: self.log_rate.clone(),
            cpu: ctx.cpu.clone(),
        };
        let export = Reconcile {
            request,
            output: limits.output,
        };
        let settled = call::run_fresh(
            &self.engine,
            clock,
            &self.pre,
            &limits,
            ctx.objects.clone(),
            who,
            export,
            &self.retries,
        )
        .await;
        CallReport {
            outcome: settled.outcome.and_then(|answer| answer),
            logs: settled.logs,
            dropped_logs: settled.dropped,
            elapsed: clock.started.elapsed(),
        }
    }

    /// The name a call's output is logged under: the instance's, else the declared one.
    pub(super) fn log_name(&self, ctx: &CallContext) -> Arc<str> {
        ctx.instance.clone().unwrap_or_else(|| self.name.clone())
    }

    /// Calls the metadata export once, in the same sandbox as reconciles (and the same log
    /// rate the plugin will have), and checks what it says before anything else uses it.
    pub(crate) async fn call_metadata(
        engine: &Engine,
        pre: &ContractPre,
        ctx: &CallContext,
        log_rate: Arc<LogRate>,
        origin: &str,
        retries: &Counter,
    ) -> Result<PluginMetadata, LoadError> {
        let limits = ctx.limits;
        let who = CallIdentity {
            plugin: origin.into(),
            key: "metadata".into(),
            log_rate,
            cpu: None,
        };
        let metadata = call::run_fresh(
            engine,
            CallClock::start(limits.timeout),
            pre,
            &limits,
            ctx.objects.clone(),
            who,
            call::Metadata,
            retries,
        )
        .await
        .outcome
        .map_err(|source| LoadError::Metadata {
            origin: origin.to_string(),
            source,
        })?;
        let invalid = |message| LoadError::InvalidMetadata {
            origin: origin.to_string(),
            message,
        };
        // Sizes first: nothing downstream (routing, watches, audit) sees unbounded metadata.
        PluginMetadata::check_owned_count(metadata.owns.len()).map_err(invalid)?;
        metadata.validate().map_err(invalid)?;
        Ok(metadata)
    }
}
