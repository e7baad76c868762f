//! Why a key was queued: each change, resync or requeue that queued it since its last call
//! (the queue keeps a key once however often it is added, so several may merge into one
//! call). The decision ledger records them; the plugin sees only the latest reason. What the
//! ledger keeps of a change (its versions, who made it, the fields it changed) is taken when
//! it is queued, and the objects are let go: a queued key must not hold its object's
//! superseded versions alive until its call (a cold start queues every key again by the
//! watch event of its own patch, and those versions were 15 KiB a key in the e2e bench).

use crate::cluster::CachedObject;
use crate::contract::Reason;
use crate::ledger::TriggerRecord;
use std::sync::{Arc, OnceLock};

/// The most triggers kept per queued key (the newest); the rest are only counted.
pub(crate) const MAX_TRIGGERS: usize = 8;

/// One thing that queued a key.
#[derive(Debug, Clone)]
pub(crate) struct Trigger {
    /// What happened.
    pub reason: Reason,
    /// The other object whose change queued the key (an owned child: `Pod ns/name`).
    pub via: Option<String>,
    /// The object before the change (a change or a deletion).
    pub before: Option<Arc<CachedObject>>,
    /// The object after it (an addition or a change).
    pub after: Option<Arc<CachedObject>>,
    /// The changed object's kind (`Secret`: its values are never recorded), when a change.
    pub kind: Option<String>,
    /// The fields the change changed, computed once for every plugin it queues (shared by
    /// their triggers) and only when a ledger records one.
    pub changed: Arc<OnceLock<Vec<String>>>,
}

impl Trigger {
    /// A trigger that says only why (a resync, a requeue, a new revision).
    pub(crate) fn only(reason: Reason) -> Trigger {
        Trigger {
            reason,
            via: None,
            before: None,
            after: None,
            kind: None,
            changed: Arc::default(),
        }
    }

    /// What is kept of it until the call: its reason and, when a ledger records it, its
    /// record; never the objects.
    pub(crate) fn kept(self, ledger: bool) -> Kept {
        Kept {
            reason: self.reason,
            record: ledger.then(|| self.record()),
        }
    }

    /// The trigger as the ledger keeps it: the change's versions, who made it and the fields
    /// it changed, with values only when the changed object is known not to be a Secret (an
    /// owned Secret's change queues its owner: the changed object's kind decides, not the
    /// owner's).
    fn record(&self) -> TriggerRecord {
        let values = self.kind.as_deref().is_some_and(|k| k != "Secret");
        let changed = match (&self.before, &self.after) {
            (Some(before), Some(after)) => self
                .changed
                .get_or_init(|| crate::ledger::changed_paths(&before.json, &after.json, values))
                .clone(),
            _ => Vec::new(),
        };
        // Who wrote the version that queued it (an addition's creator, a change's writer).
        let by = self
            .after
            .as_ref()
            .and_then(|o| o.manager.as_deref().map(str::to_string));
        TriggerRecord {
            reason: self.reason.as_str().to_string(),
            via: self.via.clone(),
            by,
            rv_before: self.before.as_ref().map(|o| o.resource_version.to_string()),
            rv_after: self.after.as_ref().map(|o| o.resource_version.to_string()),
            changed,
        }
    }
}

/// A trigger as a queued key keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    /// What happened.
    pub reason: Reason,
    /// What the ledger records of it (`None` without a ledger).
    pub record: Option<TriggerRecord>,
}

/// What queued a key since its last call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queued {
    /// The newest triggers, oldest first (at most [`MAX_TRIGGERS`]).
    pub triggers: Vec<Kept>,
    /// How many triggers queued it, kept or not.
    pub count: u32,
}

impl Queued {
    /// Adds `trigger`, dropping the oldest kept one past the bound.
    pub(crate) fn add(&mut self, trigger: Kept) {
        if self.triggers.len() == MAX_TRIGGERS {
            self.triggers.remove(0);
        }
        self.triggers.push(trigger);
        self.count = self.count.saturating_add(1);
    }

    /// The reason the plugin is told: the latest.
    pub(crate) fn reason(&self) -> Option<Reason> {
        self.triggers.last().map(|t| t.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_counts_all() {
        let mut q = Queued::default();
        for _ in 0..MAX_TRIGGERS {
            q.add(Trigger::only(Reason::Changed).kept(false));
        }
        q.add(Trigger::only(Reason::Resync).kept(true));
        assert_eq!(q.triggers.len(), MAX_TRIGGERS);
        assert_eq!(q.count, MAX_TRIGGERS as u32 + 1);
        assert_eq!(q.reason(), Some(Reason::Resync));
        assert_eq!(
            q.triggers[MAX_TRIGGERS - 1].record.as_ref().unwrap().reason,
            "resync"
        );
    }

    fn object(kind: &str, data: &str, rv: &str) -> Arc<CachedObject> {
        let json = serde_json::json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": rv},
            "data": {"password": data}});
        Arc::new(CachedObject::from_watched(
            serde_json::from_value(json).unwrap(),
        ))
    }

    /// An owned Secret's change queues its owner (a Deployment plugin's key): the Secret's
    /// values never reach the ledger, whatever kind the plugin reconciles.
    #[test]
    fn a_changed_secrets_values_are_never_recorded() {
        let change = |kind: &str| Trigger {
            reason: Reason::Changed,
            via: Some(format!("{kind} ns/s")),
            before: Some(object(kind, "b2xk", "1")),
            after: Some(object(kind, "bmV3", "2")),
            kind: Some(kind.to_string()),
            changed: Arc::default(),
        };
        let secret = change("Secret").kept(true).record.unwrap();
        assert_eq!(secret.changed, ["/data/password"]);
        let config = change("ConfigMap").kept(true).record.unwrap();
        assert_eq!(config.changed, ["/data/password \"b2xk\"→\"bmV3\""]);
    }
}
