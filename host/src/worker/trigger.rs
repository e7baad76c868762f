//! Why a key was queued: each change, resync or requeue that queued it since its last call
//! (the queue keeps a key once however often it is added, so several may merge into one
//! call). The decision ledger records them; the plugin sees only the latest reason.

use crate::cluster::CachedObject;
use crate::contract::Reason;
use std::sync::Arc;

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
}

impl Trigger {
    /// A trigger that says only why (a resync, a requeue, a new revision).
    pub(crate) fn only(reason: Reason) -> Trigger {
        Trigger {
            reason,
            via: None,
            before: None,
            after: None,
        }
    }
}

/// What queued a key since its last call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queued {
    /// The newest triggers, oldest first (at most [`MAX_TRIGGERS`]).
    pub triggers: Vec<Trigger>,
    /// How many triggers queued it, kept or not.
    pub count: u32,
}

impl Queued {
    /// Adds `trigger`, dropping the oldest kept one past the bound.
    pub(crate) fn add(&mut self, trigger: Trigger) {
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
            q.add(Trigger::only(Reason::Changed));
        }
        q.add(Trigger::only(Reason::Resync));
        assert_eq!(q.triggers.len(), MAX_TRIGGERS);
        assert_eq!(q.count, MAX_TRIGGERS as u32 + 1);
        assert_eq!(q.reason(), Some(Reason::Resync));
    }
}
