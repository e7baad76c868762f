//! A loaded plugin and its calls: each call instantiates the pre-linked component in a fresh
//! store with the call's limits, runs it, and turns the outcome into actions or a typed error.

use super::bindings::v0_1_0::{self, kubeplug::plugin::types};
use super::compile_cache::CacheOutcome;
use super::error::{CallError, LoadError};
use super::limits::Limits;
use super::log_gate::{LogRate, cap_line};
use super::objects::ObjectSource;
use super::sandbox::{CallIdentity, PluginLog, SandboxState, log_level};
use super::trap;
use crate::contract::text::{shown_max, truncate_with_marker};
use crate::contract::validate::parse_json;
use crate::contract::{
    Action, EventType, KindRef, ObjectRef, OutputLimits, OutputViolation, PatchType,
    PluginMetadata, Reason, ReconcileRequest, validate_actions,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Engine, Store};

/// What a call may use and read.
#[derive(Clone)]
pub struct CallContext {
    pub limits: Limits,
    pub objects: Arc<dyn ObjectSource>,
    /// The instance the call is for: its output is logged under this name. `None`: the
    /// name the plugin declares (offline use only).
    pub instance: Option<Arc<str>>,
}

impl CallContext {
    /// A context with the given limits and object source.
    pub fn new(limits: Limits, objects: Arc<dyn ObjectSource>) -> Self {
        CallContext {
            limits,
            objects,
            instance: None,
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
    pub outcome: Result<Vec<Action>, CallError>,
    pub logs: Vec<PluginLog>,
    /// Log lines the plugin wrote in this call that were dropped (per-call limit or the
    /// plugin's log rate).
    pub dropped_logs: u64,
    pub elapsed: Duration,
}

/// A plugin ready to be called: compiled, linked, contract-checked and described.
pub struct Plugin {
    pub(super) engine: Engine,
    pub(super) pre: v0_1_0::PluginPre<SandboxState>,
    pub(super) metadata: PluginMetadata,
    pub(super) name: Arc<str>,
    pub(super) digest: String,
    pub(super) contract: &'static str,
    pub(super) cache_outcome: CacheOutcome,
    pub(super) max_memory: usize,
    pub(super) epoch_tick: Duration,
    /// The plugin's log rate, shared by all its calls.
    pub(super) log_rate: Arc<LogRate>,
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
        self.contract
    }

    /// Charges a `log` action of `len` bytes to the plugin's log rate (the one its `log`
    /// import, stdout and stderr share): false when the rate is spent, and the line is
    /// dropped and counted.
    pub fn admit_log_action(&self, len: usize) -> bool {
        self.log_rate.admit_line(len)
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
        let started = Instant::now();
        let limits = self.clamp(ctx.limits);
        let deadline = started + limits.timeout;
        let key = request.target.key();
        let name = self.log_name(ctx);
        let mut store = new_store(
            &self.engine,
            self.epoch_tick,
            &limits,
            ctx.objects.clone(),
            CallIdentity {
                plugin: name.clone(),
                key: key.as_str().into(),
                log_rate: self.log_rate.clone(),
                deadline,
            },
        );
        let wit_request = to_wit(request);
        let result = tokio::time::timeout_at(deadline.into(), async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            instance
                .kubeplug_plugin_reconciler()
                .call_reconcile(&mut store, &wit_request)
                .await
        })
        .await;
        let settled = settle(&mut store, result, &limits, &name, &key);
        CallReport {
            outcome: into_actions(settled.outcome, limits.output),
            logs: settled.logs,
            dropped_logs: settled.dropped,
            elapsed: started.elapsed(),
        }
    }

    /// The name a call's output is logged under: the instance's, else the declared one.
    pub(super) fn log_name(&self, ctx: &CallContext) -> Arc<str> {
        ctx.instance.clone().unwrap_or_else(|| self.name.clone())
    }

    pub(super) fn clamp(&self, mut limits: Limits) -> Limits {
        limits.memory_bytes = limits.memory_bytes.min(self.max_memory);
        limits
    }

    /// Calls the metadata export once, in the same sandbox as reconciles (and the same log
    /// rate the plugin will have), and checks what it says before anything else uses it.
    pub(crate) async fn call_metadata(
        engine: &Engine,
        pre: &v0_1_0::PluginPre<SandboxState>,
        epoch_tick: Duration,
        ctx: &CallContext,
        log_rate: Arc<LogRate>,
        origin: &str,
    ) -> Result<PluginMetadata, LoadError> {
        let limits = ctx.limits;
        let deadline = Instant::now() + limits.timeout;
        let mut store = new_store(
            engine,
            epoch_tick,
            &limits,
            ctx.objects.clone(),
            CallIdentity {
                plugin: origin.into(),
                key: "metadata".into(),
                log_rate,
                deadline,
            },
        );
        let result = tokio::time::timeout_at(deadline.into(), async {
            let instance = pre.instantiate_async(&mut store).await?;
            instance
                .kubeplug_plugin_reconciler()
                .call_metadata(&mut store)
                .await
        })
        .await;
        let m = settle(&mut store, result, &limits, origin, "metadata")
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
        PluginMetadata::check_owned_count(m.owns.len()).map_err(invalid)?;
        let metadata = PluginMetadata {
            name: m.name,
            version: m.version,
            reconciles: kind_ref(m.reconciles),
            owns: m.owns.into_iter().map(kind_ref).collect(),
            wants_previous: m.wants_previous,
        };
        metadata.validate().map_err(invalid)?;
        Ok(metadata)
    }
}

/// The epoch deadline, in ticks, for a call that may take `timeout`.
pub(super) fn epoch_ticks(timeout: Duration, tick: Duration) -> u64 {
    timeout.as_nanos().div_ceil(tick.as_nanos().max(1)) as u64 + 1
}

/// The plugin's answer as checked actions, or the error it reported.
pub(super) fn into_actions(
    outcome: Result<Result<Vec<types::Action>, types::ReconcileError>, CallError>,
    output: OutputLimits,
) -> Result<Vec<Action>, CallError> {
    outcome.and_then(|r| match r {
        Ok(actions) => from_wit(actions, output).map_err(CallError::from),
        Err(types::ReconcileError::Transient(m)) => Err(CallError::Transient(cap_error(&m))),
        Err(types::ReconcileError::Permanent(m)) => Err(CallError::Permanent(cap_error(&m))),
    })
}

/// The most bytes kept of a plugin's error message (the rest is cut, with a marker), so that
/// logs, retries and audit records downstream only ever carry this much.
pub const MAX_ERROR_BYTES: usize = 4096;

/// A plugin's error message, cut to [`MAX_ERROR_BYTES`].
pub(super) fn cap_error(message: &str) -> String {
    truncate_with_marker(message, MAX_ERROR_BYTES, "…(truncated)").into_owned()
}

pub(super) fn new_store(
    engine: &Engine,
    tick: Duration,
    limits: &Limits,
    objects: Arc<dyn ObjectSource>,
    who: CallIdentity,
) -> Store<SandboxState> {
    let state = SandboxState::new(limits, objects, who);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    // Deadline in epoch ticks, set before instantiation (which runs guest code); reaching
    // it traps. Host imports check the same deadline themselves (the epoch cannot interrupt
    // host code), and the wall-clock timeout around the call catches waits.
    store.set_epoch_deadline(epoch_ticks(limits.timeout, tick));
    store
}

/// A settled call: its typed outcome and what the plugin logged.
pub(super) struct Settled<R> {
    pub(super) outcome: Result<R, CallError>,
    pub(super) logs: Vec<PluginLog>,
    pub(super) dropped: u64,
}

/// Maps the raw outcome to a typed one and collects the plugin's output (its stdout and
/// stderr lines are written to the host log here, through the log gate). Dropped lines are
/// reported once per call, as a host line.
pub(super) fn settle<R>(
    store: &mut Store<SandboxState>,
    result: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
    limits: &Limits,
    plugin: &str,
    key: &str,
) -> Settled<R> {
    let state = store.data_mut();
    let taken = state.take_logs();
    if taken.dropped > 0 {
        tracing::warn!(
            plugin = shown_max(plugin, 256).to_string().as_str(),
            key = shown_max(key, 512).to_string().as_str(),
            dropped = taken.dropped,
            "plugin log lines dropped: over the per-call log limit or the plugin's log rate"
        );
    }
    let outcome = match result {
        Err(_elapsed) => Err(CallError::Timeout {
            limit: limits.timeout,
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(trap::classify(
            &err,
            state.limiter.refused,
            limits.memory_bytes,
            &taken.stderr,
            limits.timeout,
        )),
    };
    Settled {
        outcome,
        logs: taken.logs,
        dropped: taken.dropped,
    }
}

fn kind_ref(k: types::KindRef) -> KindRef {
    KindRef {
        api_version: k.api_version,
        kind: k.kind,
    }
}

pub(super) fn to_wit(req: &ReconcileRequest) -> types::Request {
    types::Request {
        target: ref_to_wit(&req.target),
        object: req.object.as_deref().map(str::to_string),
        previous: req.previous.as_deref().map(str::to_string),
        reason: match req.reason {
            Reason::Added => types::Reason::Added,
            Reason::Changed => types::Reason::Changed,
            Reason::Deleted => types::Reason::Deleted,
            Reason::Resync => types::Reason::Resync,
            Reason::Retry => types::Reason::Retry,
            Reason::Requeue => types::Reason::Requeue,
        },
        attempt: req.attempt,
        config: req.config.as_deref().map(str::to_string),
    }
}

fn ref_to_wit(r: &ObjectRef) -> types::ObjectRef {
    types::ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    }
}

fn ref_from_wit(r: types::ObjectRef) -> ObjectRef {
    ObjectRef {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    }
}

/// Bytes of text an action carries, for the output size limit.
fn text_len(a: &types::Action) -> usize {
    let r = |r: &types::ObjectRef| {
        r.api_version.len()
            + r.kind.len()
            + r.name.len()
            + r.namespace.as_ref().map_or(0, String::len)
    };
    match a {
        types::Action::Patch(p) => {
            r(&p.target) + p.body.len() + p.subresource.as_ref().map_or(0, String::len)
        }
        types::Action::Create(m) => m.len(),
        types::Action::Delete(t) => r(t),
        types::Action::Event(e) => {
            r(&e.regarding) + e.reason.len() + e.message.len() + e.action.len()
        }
        types::Action::Log(l) => l.message.len(),
        types::Action::RequeueAfter(_) => 8,
    }
}

/// Converts and checks a plugin's actions: count and size before any parsing.
fn from_wit(
    actions: Vec<types::Action>,
    limits: OutputLimits,
) -> Result<Vec<Action>, OutputViolation> {
    if actions.len() > limits.max_actions {
        return Err(OutputViolation::TooManyActions {
            count: actions.len(),
            limit: limits.max_actions,
        });
    }
    let bytes: usize = actions.iter().map(text_len).sum();
    if bytes > limits.max_bytes {
        return Err(OutputViolation::TooLarge {
            bytes,
            limit: limits.max_bytes,
        });
    }
    let converted = actions
        .into_iter()
        .enumerate()
        .map(|(index, a)| {
            Ok(match a {
                types::Action::Patch(p) => Action::Patch {
                    body: parse_json(index, "patch", &p.body)?,
                    target: ref_from_wit(p.target),
                    patch_type: match p.patch_type {
                        types::PatchType::Merge => PatchType::Merge,
                        types::PatchType::Json => PatchType::Json,
                        types::PatchType::Strategic => PatchType::Strategic,
                        types::PatchType::Apply => PatchType::Apply,
                    },
                    subresource: p.subresource,
                },
                types::Action::Create(m) => Action::Create {
                    manifest: parse_json(index, "create", &m)?,
                },
                types::Action::Delete(t) => Action::Delete {
                    target: ref_from_wit(t),
                },
                types::Action::Event(e) => Action::Event {
                    regarding: ref_from_wit(e.regarding),
                    event_type: match e.event_type {
                        types::EventType::Normal => EventType::Normal,
                        types::EventType::Warning => EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                    event_action: if e.action.is_empty() {
                        "Reconcile".into()
                    } else {
                        e.action
                    },
                },
                types::Action::Log(l) => Action::Log {
                    level: log_level(l.level),
                    message: cap_line(&l.message),
                },
                types::Action::RequeueAfter(ms) => Action::RequeueAfter { after_ms: ms },
            })
        })
        .collect::<Result<Vec<_>, OutputViolation>>()?;
    validate_actions(&converted, limits)?;
    Ok(converted)
}
