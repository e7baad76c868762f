//! One call's actions, from the plugin's answer to the API server: scopes from discovery,
//! the policy check (all-or-nothing), dry-run, the write budget, execution in order
//! stopping at the first failure, and an audit record per action. Patches and deletes are
//! [fenced](super::fence) with the versions of the call's [`Fence`], which follows the
//! call's own successful writes. The worker hands a call's actions here and acts on the
//! [`CallOutcome`]: what was written and at which resourceVersion, when to look again, and
//! whether and how the call failed.

use super::executor::{Executor, describe, written_object};
use super::fence::{Fence, fenced_object};
use super::inflight::{Answers, InFlightLimit};
use super::outcome::ActionError;
use crate::cluster::ResolveError;
use crate::contract::text::shown;
use crate::contract::{Action, Effect, KindRef, ObjectRef, Scope, WriteVerb, names};
use crate::coordination::{Hold, Withheld as Stage, count_withheld};
use crate::coordination::{LostHold, WhileHeld};
use crate::policy::{
    AuditRecord, AuditSink, Decision, Mode, PluginIdentity, Policy, WriteBudget, check_call,
    is_write, kind_of,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The shortest `requeue-after` honoured: a shorter one (0 included) waits this long, so a
/// plugin cannot turn its key into a busy loop.
pub const MIN_REQUEUE_AFTER: Duration = Duration::from_secs(1);
/// The most distinct kinds one call's writes may act on: each is resolved through
/// discovery before the policy check.
pub const MAX_KINDS_PER_CALL: usize = 16;

/// Runs calls' actions through an [`Executor`], recording each in an [`AuditSink`].
pub struct Pipeline {
    executor: Executor,
    audit: AuditSink,
}

/// A plugin's log rate as its `log` actions meet it.
pub trait LogActions: Sync {
    /// Whether a log action of `len` bytes may be written now; a refused one is counted.
    fn admit(&self, len: usize) -> bool;
    /// Adds a call's `dropped` log actions to the plugin's unreported drops: how many to
    /// report in one host warning now, if one is due (at most one every few seconds).
    fn report_dropped(&self, dropped: u64) -> Option<u64>;
}

impl LogActions for crate::plugin::Plugin {
    fn admit(&self, len: usize) -> bool {
        self.admit_log_action(len)
    }

    fn report_dropped(&self, dropped: u64) -> Option<u64> {
        self.report_dropped_logs(dropped)
    }
}

/// Who made a call, for which key, and under what.
pub struct Call<'a> {
    /// The plugin instance's name (its field manager, its log and metric label).
    pub plugin: &'a str,
    /// The key reconciled.
    pub key: &'a str,
    /// Who the audit records name.
    pub identity: &'a Arc<PluginIdentity>,
    /// What the operator granted it, and whether it enforces or only records.
    pub policy: &'a Policy,
    /// Awaited before each API write.
    pub budget: &'a WriteBudget,
    /// The plugin's writes in flight: each write, once it has its budget token, takes a
    /// slot of the host-wide cap from here until it is answered.
    pub writes: &'a InFlightLimit,
    /// Its log-action gate: the plugin's log rate, which its `log` import shares.
    pub logs: &'a dyn LogActions,
    /// `true` once the plugin is being removed: later actions are skipped and a write
    /// waiting for the budget gives up.
    pub stopped: watch::Receiver<bool>,
    /// Until when this replica holds the key (leads, or owns it in the ring, with its
    /// lease renewed in time): asked after any wait for the write budget and then on every
    /// poll of the request until it is answered ([`WhileHeld`]), so a replica that lost the
    /// key meanwhile, or whose lease could expire before the request leaves, sends nothing.
    pub holds: &'a (dyn Fn() -> Hold + Sync),
    /// The resourceVersions the call's patches and deletes carry as preconditions (the
    /// versions the plugin decided on); advanced by the call's own successful writes.
    pub fence: Fence,
}

/// What a call's actions came to.
#[derive(Debug, Default)]
pub struct CallOutcome {
    /// The objects changed, in order.
    pub writes: Vec<Write>,
    /// When to reconcile the key again: the shortest `requeue-after` of the call, at least
    /// [`MIN_REQUEUE_AFTER`].
    pub requeue_after: Option<Duration>,
    /// The first failure; the actions after it were skipped.
    pub failure: Option<CallFailure>,
    /// What the API server's answers to the call's writes said (round trips, push-back),
    /// for the plugin's [limit of writes in flight](super::inflight).
    pub answers: Answers,
    /// Every action's audit record, in order (the decision ledger keeps them).
    pub decisions: Vec<AuditRecord>,
}

impl CallOutcome {
    /// The resourceVersion the last patch of `object` (or of its subresource) left it at.
    pub fn patched(&self, object: &ObjectRef) -> Option<&str> {
        self.writes
            .iter()
            .rev()
            .find(|w| w.change == Change::Patched && &w.object == object)
            .and_then(|w| w.resource_version.as_deref())
    }
}

/// The name of an object a create made: the one the API server answered (a `generateName`
/// create learns it only there) when it is an object name of its kind, else the one the
/// manifest asked for (the answer is checked like any input before it names an object).
fn created_name(asked: &ObjectRef, answered: Option<&str>) -> String {
    let kind = asked.kind_ref();
    match answered {
        Some(name) if names::object_name(kind.group(), &kind.kind, name).is_ok() => {
            name.to_string()
        }
        _ => asked.name.clone(),
    }
}

/// How a write changed its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Patched (the object or a subresource).
    Patched,
    /// Created.
    Created,
    /// Deleted.
    Deleted,
}

impl Change {
    /// `patched`, `created` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Patched => "patched",
            Change::Created => "created",
            Change::Deleted => "deleted",
        }
    }
}

/// One object a call changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// How.
    pub change: Change,
    /// Which object: as the plugin named it, or as the API server named a created one.
    pub object: ObjectRef,
    /// Its resourceVersion afterwards, when the API server returned the object.
    pub resource_version: Option<String>,
    /// The version the write was [fenced](super::fence) at (the one the plugin decided on),
    /// if it was.
    pub decided_on: Option<String>,
}

/// Why a call's actions stopped.
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    /// Discovery could not say where a kind's objects live (not: the kind is unknown), so
    /// no write was checked or sent. Retried with backoff.
    #[error("discovery failed, no write sent")]
    Discovery(#[source] ResolveError),
    /// This replica no longer held the key when a write was due (its lease lapsed, or the
    /// key moved): nothing more was sent. The key is not retried here; whoever holds it
    /// now reconciles it, and this replica queues it again if it gains it back.
    #[error("this replica no longer holds the key: no write sent")]
    NotHeld,
    /// A fenced write was refused with 409 Conflict: the object moved past the version the
    /// plugin decided on. Not retried with backoff: the key is reconciled again once the
    /// cache shows a newer version of `object` (or after a short bounded wait).
    #[error("{action} of {target} conflicted: the object moved past resourceVersion {fenced_at}")]
    Conflict {
        /// `patch` or `delete`.
        action: &'static str,
        /// The object it acted on (plugin-provided: shown escaped).
        target: String,
        /// The object, as the plugin named it.
        object: ObjectRef,
        /// The version the write carried.
        fenced_at: String,
        /// The API server's answer.
        #[source]
        source: ActionError,
    },
    /// A write failed at the API server or was refused before sending.
    #[error("{action} of {target} failed")]
    Action {
        /// `patch`, `create`, `delete` or `event`.
        action: &'static str,
        /// The object it acted on (plugin-provided: shown escaped).
        target: String,
        /// Why.
        #[source]
        source: ActionError,
    },
}

impl CallFailure {
    /// Whether retrying the key with backoff may help; otherwise it waits for the object
    /// to change.
    pub fn is_transient(&self) -> bool {
        match self {
            CallFailure::Discovery(_) => true,
            CallFailure::NotHeld | CallFailure::Conflict { .. } => false,
            CallFailure::Action { source, .. } => source.is_transient(),
        }
    }
}

impl Pipeline {
    /// A pipeline executing through `executor` and auditing to `audit`.
    pub fn new(executor: Executor, audit: AuditSink) -> Self {
        Pipeline { executor, audit }
    }

    /// Checks the call's actions against the policy (all-or-nothing), then runs what may
    /// run: in dry-run only logs and requeues; in enforce every action in order, each API
    /// write after a token of the plugin's write budget, stopping at the first failure.
    /// Every action gets an audit record.
    pub async fn run(&self, mut call: Call<'_>, actions: &[Action]) -> CallOutcome {
        let mut fence = std::mem::take(&mut call.fence);
        let mut scopes = self.kind_scopes(actions).await;
        // Discovery failing (not a kind it does not know) fails the call's writes as
        // transient: the key is retried.
        let unavailable = scopes
            .iter()
            .find(|(_, s)| matches!(s, Err(ResolveError::Unavailable { .. })))
            .map(|(k, _)| k.clone())
            .and_then(|k| scopes.remove(&k))
            .and_then(Result::err);
        let scope_of = |kind: &KindRef| match scopes.get(kind) {
            Some(Ok(scope)) => Ok(*scope),
            Some(Err(e)) => Err(e.to_string()),
            None => Err(format!("more than {MAX_KINDS_PER_CALL} kinds in one call")),
        };
        let checks = match unavailable {
            // Nothing is checked (or sent) without the scopes: the writes fail below.
            Some(_) => vec![Ok(()); actions.len()],
            None => check_call(&call.policy.grants, actions, &scope_of),
        };
        let mut unavailable = unavailable.map(CallFailure::Discovery);
        let dry_run = call.policy.mode == Mode::DryRun;
        let mut outcome = CallOutcome::default();
        let mut dropped_logs = 0u64;
        for (action, check) in actions.iter().zip(checks) {
            let failed = outcome.failure.is_some();
            let decision = match check {
                Err(denial) => Decision::Denied(denial),
                Ok(()) if is_write(action) && unavailable.is_some() && !failed => {
                    let failure = unavailable.take().expect("checked above");
                    let decision = Decision::Failed {
                        error: source_text(&failure),
                        transient: true,
                    };
                    outcome.failure = Some(failure);
                    decision
                }
                Ok(()) if dry_run && is_write(action) && !failed => Decision::DryRun,
                Ok(()) if failed || *call.stopped.borrow() => Decision::Skipped,
                Ok(()) => match action {
                    Action::Log { level, message } => {
                        if call.logs.admit(message.len()) {
                            crate::telemetry::plugin_log(call.plugin, call.key, *level, message);
                            Decision::Executed
                        } else {
                            dropped_logs += 1;
                            Decision::Skipped
                        }
                    }
                    Action::RequeueAfter { after_ms } => {
                        // A plugin asking again at once on every call would spin its workers.
                        let delay = Duration::from_millis(*after_ms).max(MIN_REQUEUE_AFTER);
                        outcome.requeue_after =
                            Some(outcome.requeue_after.map_or(delay, |d| d.min(delay)));
                        Decision::Executed
                    }
                    Action::Patch { .. }
                    | Action::Create { .. }
                    | Action::Delete { .. }
                    | Action::Event { .. } => {
                        self.write(&call, action, &scopes, &mut fence, &mut outcome)
                            .await
                    }
                },
            };
            if let (
                Action::Event {
                    regarding,
                    event_type,
                    reason,
                    message,
                    ..
                },
                Decision::Executed,
            ) = (action, &decision)
            {
                report_event(
                    call.plugin,
                    call.key,
                    regarding,
                    *event_type,
                    reason,
                    message,
                );
            }
            let record = AuditRecord::new(call.identity, call.key, action, decision);
            outcome.decisions.push(record.clone());
            self.audit.record(record);
        }
        self.audit.record_call(call.identity, call.key, actions);
        if let Some(dropped) = call.logs.report_dropped(dropped_logs) {
            tracing::warn!(
                plugin = call.plugin,
                dropped,
                "log actions dropped since the last report: the plugin's log rate is spent"
            );
        }
        outcome
    }

    /// One allowed API write in enforce mode: a token of the budget (or a stop), the gate,
    /// then the executor, fenced with the version `fence` holds for its object. Records what
    /// it changed or why it failed in `outcome`, and what it left its object at in `fence`.
    async fn write(
        &self,
        call: &Call<'_>,
        action: &Action,
        scopes: &HashMap<KindRef, Result<Scope, ResolveError>>,
        fence: &mut Fence,
        outcome: &mut CallOutcome,
    ) -> Decision {
        let mut stopped = call.stopped.clone();
        let waiting = super::waiting::Waiting::enter(call.plugin);
        let waited = tokio::select! {
            waited = call.budget.acquire() => waited,
            _ = stopped.wait_for(|s| *s) => {
                // A removal does not wait out a slow budget; nothing of the call failed.
                return Decision::Skipped;
            }
        };
        // A slot of the host-wide cap, only now that the write may go: see
        // [`InFlightLimit::sending`].
        let sending = tokio::select! {
            slot = call.writes.sending() => slot,
            _ = stopped.wait_for(|s| *s) => return Decision::Skipped,
        };
        drop(waiting);
        if !waited.is_zero() {
            tracing::debug!(
                plugin = call.plugin,
                key = call.key,
                waited_ms = waited.as_millis() as u64,
                "write waited for the plugin's write budget"
            );
        }
        // The last moment before sending: the lease may have lapsed (a pause, a stall) or the
        // key moved while the call ran or the budget held the write back.
        if !(call.holds)().at(tokio::time::Instant::now()) {
            count_withheld(Stage::Budget);
            tracing::debug!(
                plugin = call.plugin,
                key = call.key,
                action = action.kind(),
                "write not sent: this replica no longer holds the key"
            );
            outcome.failure = Some(CallFailure::NotHeld);
            return Decision::NotHeld;
        }
        // The check allowed it, so its kind's scope is known.
        let scope = kind_of(action).and_then(|k| scopes.get(&k)?.as_ref().ok().copied());
        let fenced_at = fenced_object(action)
            .and_then(|o| fence.version_of(o))
            .map(str::to_string);
        let result = match scope {
            Some(scope) => {
                let sent = tokio::time::Instant::now();
                let request = self.executor.execute(
                    call.plugin,
                    call.policy.principal.as_ref(),
                    action,
                    scope,
                    fenced_at.as_deref(),
                );
                // Checked again on every poll, up to the one that hands it to the connection.
                let result = match WhileHeld::new(request, call.holds).await {
                    Ok(result) => result,
                    Err(LostHold { polled }) => {
                        count_withheld(Stage::Transport);
                        let target = describe(action, call.key);
                        tracing::warn!(plugin = call.plugin, key = call.key, action = action.kind(), target = %shown(&target), maybe_sent = polled, waited_ms = sent.elapsed().as_millis() as u64, "write dropped: this replica stopped holding the key, or its lease could expire, before the request was answered; left to whoever holds the key now");
                        outcome.failure = Some(CallFailure::NotHeld);
                        return Decision::NotHeld;
                    }
                };
                outcome.answers.answered(sent.elapsed());
                if let Err(err) = &result
                    && let Some(retry_after) = err.push_back()
                {
                    outcome.answers.pushed_back(retry_after);
                }
                result
            }
            None => Err(ActionError::NotAWrite),
        };
        drop(sending);
        let target = describe(action, call.key);
        match result {
            Ok(sent) => {
                tracing::debug!(plugin = call.plugin, key = call.key, action = action.kind(), target = %shown(&target), fenced_at = fenced_at.as_deref(), decision = sent.decision.as_str(), "action done");
                let Some(mut object) = written_object(action) else {
                    return sent.decision;
                };
                let change = match action.effect() {
                    Effect::Write(WriteVerb::Patch) => Change::Patched,
                    Effect::Write(WriteVerb::Create) => Change::Created,
                    Effect::Write(WriteVerb::Delete) => Change::Deleted,
                    Effect::Write(WriteVerb::Event) | Effect::Log | Effect::Requeue => {
                        return sent.decision;
                    }
                };
                if change == Change::Created {
                    object.name = created_name(&object, sent.name.as_deref());
                }
                // Later writes of the call to this object carry what this one left it at.
                match (&sent.decision, change, &sent.resource_version) {
                    (Decision::Executed, Change::Deleted, _) => fence.forget(&object),
                    (Decision::Executed, _, Some(rv)) => fence.advance(&object, rv),
                    (Decision::AlreadyDone { .. }, Change::Patched | Change::Deleted, _) => {
                        fence.forget(&object)
                    }
                    _ => {}
                }
                if sent.decision == Decision::Executed {
                    outcome.writes.push(Write {
                        change,
                        object,
                        resource_version: sent.resource_version,
                        decided_on: fenced_at,
                    });
                }
                sent.decision
            }
            Err(ActionError::Conflict { fenced_at, source }) => {
                tracing::debug!(plugin = call.plugin, key = call.key, action = action.kind(), target = %shown(&target), fenced_at = %fenced_at, "write refused: the object changed after the version the plugin decided on; reconciled again on the newer one");
                let source = ActionError::Conflict {
                    fenced_at: fenced_at.clone(),
                    source,
                };
                let error = source.to_string();
                let target = shown(&target).to_string();
                // Only patches and deletes are fenced, and they name their object.
                outcome.failure = Some(match fenced_object(action) {
                    Some(object) => CallFailure::Conflict {
                        action: action.kind(),
                        target,
                        object: object.clone(),
                        fenced_at,
                        source,
                    },
                    None => CallFailure::Action {
                        action: action.kind(),
                        target,
                        source,
                    },
                });
                Decision::Failed {
                    error,
                    transient: false,
                }
            }
            Err(source) => {
                let transient = source.is_transient();
                let error = source.to_string();
                tracing::warn!(plugin = call.plugin, key = call.key, action = action.kind(), target = %shown(&target), transient, "action failed: {}", shown(&error));
                outcome.failure = Some(CallFailure::Action {
                    action: action.kind(),
                    target: shown(&target).to_string(),
                    source,
                });
                Decision::Failed { error, transient }
            }
        }
    }

    /// The scope of each kind the call's writes act on, from discovery (cached), for at
    /// most [`MAX_KINDS_PER_CALL`] distinct kinds; writes to kinds beyond are denied.
    async fn kind_scopes(
        &self,
        actions: &[Action],
    ) -> HashMap<KindRef, Result<Scope, ResolveError>> {
        let mut scopes = HashMap::new();
        for kind in actions.iter().filter_map(kind_of) {
            if scopes.len() >= MAX_KINDS_PER_CALL || scopes.contains_key(&kind) {
                continue;
            }
            let scope = self.executor.writer().scope(&kind).await;
            scopes.insert(kind, scope);
        }
        scopes
    }
}

/// What a failure's cause says (the audit keeps it as text).
fn source_text(failure: &CallFailure) -> String {
    std::error::Error::source(failure)
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;

/// Logs an Event a plugin emitted (and so streams it, as type `event`). Reason and note
/// were validated and capped with the action; the note is escaped again for the log.
fn report_event(
    plugin: &str,
    key: &str,
    regarding: &crate::contract::ObjectRef,
    event_type: crate::contract::EventType,
    reason: &str,
    message: &str,
) {
    let note = shown(message);
    let regarding = regarding.to_string();
    let regarding = shown(&regarding);
    let event_type = format!("{event_type:?}");
    tracing::info!(record = "event", plugin, key, event_type, reason = %shown(reason), %regarding, "{note}");
}
