//! The request a plugin is handed for a key: the object as the cache holds it, the version
//! it last reconciled successfully (when the plugin asks for it), the attempt, and why it
//! runs now (the latest of what queued it; a key the queue handed out again by itself runs
//! as a retry after a failure or as a requeue the plugin asked for).

use super::revision::Revision;
use super::running::{RunningPlugin, lock};
use super::trigger::{Queued, Trigger};
use crate::cluster::{CachedObject, ObjKey};
use crate::contract::{KindRef, ObjectRef, Reason, ReconcileRequest};
use std::sync::Arc;

impl RunningPlugin {
    /// The request for `key` on `revision`, with `cached` as the object, and what queued the
    /// key since its last call (taken: the next call starts from nothing).
    pub(super) fn request(
        &self,
        revision: &Revision,
        key: &ObjKey,
        cached: Option<&CachedObject>,
    ) -> (ReconcileRequest, Queued) {
        let requeues = self.queue.num_requeues(key);
        let queued = why_queued(
            lock(&self.reasons).remove(key),
            requeues,
            self.ledger.is_some(),
        );
        let meta = revision.plugin.metadata();
        let previous = if meta.wants_previous {
            lock(&self.last_ok).get(key).cloned()
        } else {
            None
        };
        let request = request_for(
            &meta.reconciles,
            key,
            cached.map(|o| o.json.clone()),
            previous,
            &queued,
            requeues,
            revision.config.clone(),
        );
        (request, queued)
    }
}

/// What queued a key, given what the workers remembered (`None`: nothing did) and how often
/// the queue has requeued it: a key nothing queued was handed out again by the queue
/// itself, after a failure's backoff (`requeues` > 0) or a requeue-after.
fn why_queued(remembered: Option<Queued>, requeues: u32, ledger: bool) -> Queued {
    let mut queued = remembered.unwrap_or_default();
    if queued.triggers.is_empty() {
        let reason = match requeues > 0 {
            true => Reason::Retry,
            false => Reason::Requeue,
        };
        queued.add(Trigger::only(reason).kept(ledger));
    }
    queued
}

/// The request reconciling `key` of `kind`, the `requeues`-th requeue of the key, told the
/// latest reason of `queued`.
fn request_for(
    kind: &KindRef,
    key: &ObjKey,
    object: Option<Arc<str>>,
    previous: Option<Arc<str>>,
    queued: &Queued,
    requeues: u32,
    config: Option<Arc<str>>,
) -> ReconcileRequest {
    ReconcileRequest {
        target: ObjectRef {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        },
        object,
        previous,
        reason: queued.reason().unwrap_or(Reason::Requeue),
        attempt: requeues + 1,
        config,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued_by(reasons: &[Reason]) -> Queued {
        let mut queued = Queued::default();
        for reason in reasons {
            queued.add(Trigger::only(*reason).kept(false));
        }
        queued
    }

    /// A key nothing queued was handed out by the queue itself: a retry once it has been
    /// requeued after a failure, else a requeue-after; the ledger gets a record of it only
    /// when there is a ledger.
    #[test]
    fn a_key_the_queue_handed_out_itself_runs_as_a_retry_or_a_requeue() {
        let first = why_queued(None, 0, false);
        assert_eq!((first.reason(), first.count), (Some(Reason::Requeue), 1));
        assert!(first.triggers[0].record.is_none());
        let retry = why_queued(Some(Queued::default()), 2, true);
        assert_eq!((retry.reason(), retry.count), (Some(Reason::Retry), 1));
        assert_eq!(retry.triggers[0].record.as_ref().unwrap().reason, "retry");
    }

    /// What queued the key is what the plugin is told (the latest), however often the
    /// queue requeued it: nothing is added in its name.
    #[test]
    fn what_queued_a_key_is_kept_as_it_was() {
        let queued = why_queued(
            Some(queued_by(&[Reason::Resync, Reason::Changed])),
            3,
            false,
        );
        assert_eq!(queued.count, 2);
        assert_eq!(queued.reason(), Some(Reason::Changed));
    }

    /// The target is the key in the kind the plugin reconciles; the attempt counts the
    /// requeues from 1; what the plugin is handed passes through untouched.
    #[test]
    fn the_request_names_the_key_in_the_reconciled_kind() {
        let kind = KindRef::new("apps/v1", "Deployment");
        let key = ObjKey::new(Some("ns"), "web");
        let object: Arc<str> = r#"{"kind":"Deployment"}"#.into();
        let previous: Arc<str> = r#"{"kind":"Deployment","old":true}"#.into();
        let config: Arc<str> = r#"{"replicas":2}"#.into();
        let queued = queued_by(&[Reason::Changed, Reason::Resync]);
        let request = request_for(
            &kind,
            &key,
            Some(object.clone()),
            Some(previous.clone()),
            &queued,
            2,
            Some(config.clone()),
        );
        assert_eq!(
            request.target,
            ObjectRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("ns".into()),
                name: "web".into(),
            }
        );
        assert_eq!(request.attempt, 3);
        assert_eq!(request.reason, Reason::Resync);
        assert_eq!(request.object, Some(object));
        assert_eq!(request.previous, Some(previous));
        assert_eq!(request.config, Some(config));
        let cluster = request_for(
            &KindRef::new("v1", "Namespace"),
            &ObjKey::new(None, "team-a"),
            None,
            None,
            &Queued::default(),
            0,
            None,
        );
        assert_eq!(cluster.target.namespace, None);
        assert_eq!((cluster.attempt, cluster.reason), (1, Reason::Requeue));
    }
}
