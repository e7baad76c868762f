//! What the decision ledger records of one reconcile: what the plugin saw (the object's
//! version, what it read, what queued the key), and either its actions and what became of
//! them or why the call failed.

use super::revision::Revision;
use super::running::RunningPlugin;
use super::trigger::Queued;
use crate::actions::CallOutcome;
use crate::cluster::{CachedObject, CallObjects};
use crate::contract::{Action, ReconcileRequest};
use crate::ledger::{Entry, MAX_ACTIONS, ObjectId, Verdict, Written};

/// What a call saw, as the ledger records it.
pub(super) struct Seen<'a> {
    /// The revision the call ran on.
    pub revision: &'a Revision,
    /// What the plugin was handed.
    pub request: &'a ReconcileRequest,
    /// What queued the key.
    pub queued: &'a Queued,
    /// The object handed to the plugin.
    pub cached: Option<&'a CachedObject>,
    /// What the call read.
    pub reads: &'a CallObjects,
}

impl RunningPlugin {
    /// Records one reconcile in the ledger, if there is one: what the plugin saw, and either
    /// its actions and what became of them or why the call failed.
    pub(super) fn record(
        &self,
        seen: Seen<'_>,
        acted: Option<(&[Action], &CallOutcome)>,
        error: Option<String>,
    ) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        let Seen {
            revision,
            request,
            queued,
            cached,
            reads,
        } = seen;
        let target = &request.target;
        let Acted {
            verdicts: actions,
            writes,
            count,
        } = Acted::of(acted);
        let (read, read_count) = reads.summary(MAX_ACTIONS);
        ledger.offer(Entry {
            time: jiff::Timestamp::now(),
            object: ObjectId {
                kind: target.kind.clone(),
                namespace: target.namespace.clone().unwrap_or_default(),
                name: target.name.clone(),
            },
            plugin: self.name.to_string(),
            digest: revision.identity.digest.clone(),
            reason: request.reason.as_str().to_string(),
            attempt: request.attempt,
            resource_version: cached.map(|o| o.resource_version.to_string()),
            reads: read,
            read_count,
            triggers: queued
                .triggers
                .iter()
                .filter_map(|t| t.record.clone())
                .collect(),
            queued: queued.count,
            actions,
            action_count: count,
            writes,
            error,
        });
    }
}

/// What an entry keeps of a call's actions: the verdict of each of the first
/// [`MAX_ACTIONS`], the first [`MAX_ACTIONS`] writes, and how many actions the plugin
/// decided (an entry stays bounded whatever a plugin returns).
#[derive(Debug, Default, PartialEq)]
struct Acted {
    /// Each action's decision, in order.
    verdicts: Vec<Verdict>,
    /// The objects changed, in order.
    writes: Vec<Written>,
    /// The actions the plugin decided, kept or not.
    count: usize,
}

impl Acted {
    /// What is kept of `acted`, the call's actions and their outcome (`None`: the call
    /// failed before any action).
    fn of(acted: Option<(&[Action], &CallOutcome)>) -> Acted {
        let Some((actions, outcome)) = acted else {
            return Acted::default();
        };
        Acted {
            verdicts: outcome
                .decisions
                .iter()
                .take(MAX_ACTIONS)
                .map(Verdict::of)
                .collect(),
            writes: outcome
                .writes
                .iter()
                .take(MAX_ACTIONS)
                .map(|w| Written {
                    change: w.change.as_str().to_string(),
                    object: w.object.to_string(),
                    resource_version: w.resource_version.clone(),
                })
                .collect(),
            count: actions.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::{Change, Write};
    use crate::contract::ObjectRef;
    use crate::policy::{AuditRecord, Decision, PluginIdentity};
    use std::sync::Arc;

    fn pod(i: usize) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ns".into()),
            name: format!("p{i}"),
        }
    }

    /// A call that returned more actions than an entry keeps is recorded with the first
    /// verdicts and writes, in order, and the full count; a failed call with none.
    #[test]
    fn an_entry_keeps_the_first_actions_and_counts_them_all() {
        let identity = Arc::new(PluginIdentity {
            name: "p".into(),
            declared: "p".into(),
            version: "1".into(),
            digest: "d".into(),
        });
        let n = MAX_ACTIONS + 3;
        let actions: Vec<Action> = (0..n).map(|i| Action::Delete { target: pod(i) }).collect();
        let outcome = CallOutcome {
            decisions: actions
                .iter()
                .map(|a| AuditRecord::new(&identity, "ns/web", a, Decision::Executed))
                .collect(),
            writes: (0..n)
                .map(|i| Write {
                    change: Change::Deleted,
                    object: pod(i),
                    resource_version: Some(i.to_string()),
                    decided_on: None,
                })
                .collect(),
            ..CallOutcome::default()
        };
        let kept = Acted::of(Some((&actions, &outcome)));
        assert_eq!(kept.count, n);
        assert_eq!(kept.verdicts.len(), MAX_ACTIONS);
        assert_eq!(kept.writes.len(), MAX_ACTIONS);
        assert_eq!(kept.verdicts[1].target, pod(1).to_string());
        assert_eq!(kept.verdicts[1].decision, "executed");
        let last = &kept.writes[MAX_ACTIONS - 1];
        assert_eq!(
            (
                last.change.as_str(),
                last.object.clone(),
                last.resource_version.clone()
            ),
            (
                "deleted",
                pod(MAX_ACTIONS - 1).to_string(),
                Some((MAX_ACTIONS - 1).to_string())
            )
        );
        assert_eq!(Acted::of(None), Acted::default());
    }
}
