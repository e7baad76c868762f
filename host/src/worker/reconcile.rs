//! One reconcile, in two halves: the plugin's (wait for the caches and the key's own
//! writes, call the plugin in its tenant's slot, handle a failed call) and the host's (run
//! the decided actions through the pipeline, record them, and tell the queue what becomes
//! of the key).

use super::ledger_entry::Seen;
use super::metrics::ReconcileResult;
use super::revision::Revision;
use super::running::{RunningPlugin, lock};
use super::trigger::Queued;
use crate::actions::{Answers, Call, CallFailure, CallOutcome, Fence};
use crate::cluster::{CachedObject, CallObjects, ObjKey};
use crate::contract::{Action, ObjectRef, ReconcileRequest};
use crate::coordination::Pass;
use crate::plugin::CallContext;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A call the plugin answered, waiting to be acted on.
pub(super) struct Decided {
    /// The revision the call ran on (its policy, budget and identity act on it).
    pub revision: Arc<Revision>,
    /// What the plugin was handed.
    pub request: ReconcileRequest,
    /// What queued the key.
    pub queued: Queued,
    /// The object handed to the plugin.
    pub cached: Option<Arc<CachedObject>>,
    /// What the call read, whose versions fence its writes.
    pub reads: Arc<CallObjects>,
    /// What the plugin decided.
    pub actions: Vec<Action>,
    /// How long the plugin took.
    pub elapsed: Duration,
}

impl RunningPlugin {
    /// The plugin's half of one reconcile: waits for the caches and the key's expectations,
    /// calls the plugin, and handles a failed call. `None` when there
    /// is nothing to act on (the key was re-queued or forgotten as the failure asks).
    pub(super) async fn decide(&self, key: &ObjKey) -> Option<Decided> {
        let name = &*self.name;
        // This call runs on the revision current now, whatever is swapped in meanwhile.
        let revision = self.current();
        for cache in &revision.caches {
            cache.wait_synced().await;
        }
        if !self
            .expectations
            .satisfied(key, Instant::now(), |kind, object| {
                revision.cached(kind, object)
            })
        {
            // Our last write, or the version our refused write was fenced on, is not in the
            // cache yet: reconciling now would act on the old object.
            let recheck = self.expectations.recheck_after(key, Instant::now());
            self.queue.add_after(key.clone(), recheck);
            return None;
        }
        // Sandboxes are a host-wide pool: each tenant gets its share while others wait, so a
        // tenant whose calls spend their whole budget delays its own plugins, not another's.
        // Taken before the object is read: a call that waited for its slot acts on the object
        // as it is when the call starts, not as it was before the wait (its writes would be
        // refused as conflicts).
        let slot = self.calls.acquire().await;
        let cached = revision.primary.get(key);
        let (request, queued) = self.request(&revision, key, cached.as_deref());
        // The call reads through a record of its own: its writes to what it read are fenced
        // with the versions it saw.
        let reads = Arc::new(CallObjects::new(revision.objects.clone()));
        let ctx = CallContext {
            objects: reads.clone(),
            cpu: Some(self.cpu.clone()),
            ..revision.ctx.clone()
        };
        let (plugin, req) = (revision.plugin.clone(), request.clone());
        // A task of its own on the runtime (guest code yields at every epoch tick, so a call
        // never holds a runtime thread for longer than one), so a panic in the call is
        // caught here as a failed task.
        let report = tokio::spawn(async move { plugin.reconcile(&req, &ctx).await }).await;
        drop(slot);
        // A call that failed is recorded with what it saw and why.
        let failed = |error: String| {
            let seen = Seen {
                revision: &revision,
                request: &request,
                queued: &queued,
                cached: cached.as_deref(),
                reads: &reads,
            };
            self.record(seen, None, Some(error));
        };
        let report = match report {
            Ok(report) => report,
            Err(err) => {
                tracing::error!(record = "reconcile", result = "error", plugin = name, %key, "plugin call task failed: {err}");
                failed(format!("plugin call task failed: {err}"));
                self.metrics.count(name, ReconcileResult::HostError);
                self.queue.add_rate_limited(key.clone());
                return None;
            }
        };
        self.metrics.observe_call(name, report.elapsed);
        if let Err(err) = &report.outcome {
            self.metrics.count(name, ReconcileResult::of_call(err));
        }
        if let Err(err) = &report.outcome {
            failed(err.to_string());
        }
        let actions = match report.outcome {
            Ok(actions) => actions,
            Err(err) if err.is_transient() => {
                tracing::warn!(record = "reconcile", result = err.kind(), plugin = name, %key, attempt = request.attempt, error = err.kind(), "reconcile failed, will retry: {err}");
                self.queue.add_rate_limited(key.clone());
                return None;
            }
            Err(err) => {
                tracing::error!(record = "reconcile", result = err.kind(), plugin = name, %key, error = err.kind(), "reconcile failed, not retried until the object changes: {err}");
                self.queue.forget(key);
                return None;
            }
        };
        Some(Decided {
            revision,
            request,
            queued,
            cached,
            reads,
            actions,
            elapsed: report.elapsed,
        })
    }

    /// The host's half: executes a decided call's actions, and tells the queue what to do
    /// with the key. Returns what the API server's answers said (for the write limit).
    pub(super) async fn act(&self, key: &ObjKey, pass: &Pass, decided: Decided) -> Answers {
        let name = &*self.name;
        let Decided {
            revision,
            request,
            queued,
            cached,
            reads,
            actions,
            elapsed,
        } = decided;
        let call = Call {
            plugin: name,
            key: &key.to_string(),
            identity: &revision.identity,
            policy: &revision.policy,
            budget: &revision.budget,
            writes: &self.writes,
            logs: revision.plugin.as_ref(),
            stopped: self.stopped.subscribe(),
            holds: &|| pass.hold(),
            fence: Fence::decided_on(
                &request.target,
                cached.as_ref().map(|o| o.resource_version.as_str()),
                &actions,
                |wanted| reads.first_versions(wanted),
            ),
        };
        let outcome = self.pipeline.run(call, &actions).await;
        let failure = outcome.failure.as_ref().map(ToString::to_string);
        self.record(
            Seen {
                revision: &revision,
                request: &request,
                queued: &queued,
                cached: cached.as_deref(),
                reads: &reads,
            },
            Some((&actions, &outcome)),
            failure,
        );
        self.metrics
            .count(name, ReconcileResult::of_actions(outcome.failure.as_ref()));
        // Wait for our own writes to show before reconciling it again, whatever became of
        // the call's later actions: a retry after a failed status patch must still see the
        // children the call created before it.
        self.expect_own_writes(key, &request.target, &outcome);
        match next(&outcome) {
            Next::Conflicted { object, fenced_at } => self.conflicted(key, object, fenced_at),
            Next::Retry => self.queue.add_rate_limited(key.clone()),
            Next::Forget => self.queue.forget(key),
            Next::Reconciled { requeue_after } => {
                self.queue.forget(key);
                if revision.plugin.metadata().wants_previous {
                    let mut last = lock(&self.last_ok);
                    match &request.object {
                        Some(o) => last.insert(key.clone(), o.clone()),
                        None => last.remove(key),
                    };
                }
                if let Some(delay) = requeue_after {
                    self.queue.add_after(key.clone(), delay);
                }
            }
        }
        match &request.object {
            // As the change logger this grew from said it, for every plugin.
            None => {
                tracing::info!(record = "reconcile", result = "deleted", plugin = name, %key, "{} {key} has been deleted", request.target.kind)
            }
            Some(_) => {
                tracing::debug!(record = "reconcile", result = "success", plugin = name, %key, actions = actions.len(), elapsed_us = elapsed.as_micros() as u64, "reconciled")
            }
        }
        outcome.answers
    }
}

/// What becomes of a key once its call's actions ran.
#[derive(Debug, PartialEq)]
enum Next<'a> {
    /// A fenced write on `object` was refused: reconciled again once the cache shows the
    /// object past `fenced_at`.
    Conflicted {
        /// The object the refused write was on.
        object: &'a ObjectRef,
        /// The version the write was fenced at.
        fenced_at: &'a str,
    },
    /// A failure that may pass: retried with backoff.
    Retry,
    /// A failure that will not pass by retrying: not retried until the object changes.
    Forget,
    /// Every action ran: its backoff is forgotten, and it comes back after `requeue_after`
    /// if the plugin asked.
    Reconciled {
        /// When the plugin asked to see the key again.
        requeue_after: Option<Duration>,
    },
}

/// What `outcome` makes of the key.
fn next(outcome: &CallOutcome) -> Next<'_> {
    match &outcome.failure {
        Some(CallFailure::Conflict {
            object, fenced_at, ..
        }) => Next::Conflicted { object, fenced_at },
        Some(f) if f.is_transient() => Next::Retry,
        Some(_) => Next::Forget,
        None => Next::Reconciled {
            requeue_after: outcome.requeue_after,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::{ActionError, WriteError};

    fn web() -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        }
    }

    fn failed(failure: CallFailure) -> CallOutcome {
        CallOutcome {
            failure: Some(failure),
            requeue_after: Some(Duration::from_secs(5)),
            ..CallOutcome::default()
        }
    }

    /// A call whose actions all ran is done with (its requeue-after kept); a conflict waits
    /// for the cache on the refused object, not for a backoff; a failure that retrying
    /// cannot mend is forgotten, a passing one retried, whatever requeue-after was asked.
    #[test]
    fn what_an_outcome_makes_of_the_key() {
        let asked = CallOutcome {
            requeue_after: Some(Duration::from_secs(5)),
            ..CallOutcome::default()
        };
        assert_eq!(
            next(&asked),
            Next::Reconciled {
                requeue_after: Some(Duration::from_secs(5))
            }
        );
        assert_eq!(
            next(&CallOutcome::default()),
            Next::Reconciled {
                requeue_after: None
            }
        );
        let conflict = failed(CallFailure::Conflict {
            action: "patch",
            target: web().to_string(),
            object: web(),
            fenced_at: "41".into(),
            source: ActionError::NotAWrite,
        });
        assert_eq!(
            next(&conflict),
            Next::Conflicted {
                object: &web(),
                fenced_at: "41"
            }
        );
        assert_eq!(next(&failed(CallFailure::NotHeld)), Next::Forget);
        let refused = failed(CallFailure::Action {
            action: "patch",
            target: web().to_string(),
            source: ActionError::NotAWrite,
        });
        assert_eq!(next(&refused), Next::Forget);
        let unavailable = kube::core::Status::failure("down", "ServiceUnavailable")
            .with_code(503)
            .boxed();
        let passing = failed(CallFailure::Action {
            action: "patch",
            target: web().to_string(),
            source: WriteError::Api(kube::Error::Api(unavailable)).into(),
        });
        assert_eq!(next(&passing), Next::Retry);
    }
}
