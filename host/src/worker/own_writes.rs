//! What a call's writes leave its key waiting for: the cache must show the call's own
//! writes before the key is reconciled again (else the next call acts on objects as they
//! were before them), and a write refused because its object moved on waits for the cache
//! to show the newer version (see [`Expectations`](super::expectations::Expectations)).

use super::expectations::Expected;
use super::running::RunningPlugin;
use super::trigger::Trigger;
use crate::actions::{CallOutcome, Change};
use crate::cluster::ObjKey;
use crate::contract::{ObjectRef, Reason};
use std::time::Duration;
use tokio::time::Instant;

/// How soon a key whose write was refused looks at the cache again (see
/// [`Expectations::recheck_after`](super::expectations::Expectations::recheck_after) for
/// later looks).
const EXPECTATION_RECHECK: Duration = Duration::from_millis(20);

impl RunningPlugin {
    /// Waits for what [`own_writes`] says the call's writes left the key waiting for.
    pub(super) fn expect_own_writes(
        &self,
        key: &ObjKey,
        target: &ObjectRef,
        outcome: &CallOutcome,
    ) {
        let now = Instant::now();
        for expected in own_writes(key, target, outcome) {
            self.expectations.expect(key, expected, now);
        }
    }

    /// A fenced write of the call on `object` was refused: the object moved past `fenced_at`
    /// since the plugin decided. The key is not retried with backoff; it is reconciled again
    /// (as a change) once the cache shows a newer version of `object`, or after
    /// 2 s at the latest (see [`Expectations`](super::expectations::Expectations)). The
    /// call's own writes are already awaited.
    pub(super) fn conflicted(&self, key: &ObjKey, object: &ObjectRef, fenced_at: &str) {
        let name = &*self.name;
        self.metrics.count_conflict(name);
        self.queue.forget(key);
        self.expectations
            .expect(key, Expected::passed(object, fenced_at), Instant::now());
        self.remember(key, Trigger::only(Reason::Changed));
        self.queue.add_after(key.clone(), EXPECTATION_RECHECK);
        tracing::info!(record = "reconcile", result = "conflict", plugin = name, %key, object = %crate::contract::text::shown(&object.to_string()), fenced_at, "a write was refused: the object changed after the version the plugin decided on; reconciling again once the cache shows the newer one");
    }
}

/// What the cache must show before `key` (whose object is `target`) is reconciled again
/// after a call that came to `outcome`: the key's object at the version its last patch in
/// this call left it at, if the call patched it, and each other object the call deleted
/// (having read it) gone or past the version it was deleted at: otherwise the next call,
/// queued by the first deletion's event, could still find a later one in the cache and
/// delete it again (a CustomCluster going from 3 Pods to 1 sent 3 deletes for 2 Pods).
/// Likewise each object it created in the key's namespace (where an owner's children
/// live, and which a host watching one namespace caches) until the cache holds it: else
/// the next call could miss it and create another.
fn own_writes(key: &ObjKey, target: &ObjectRef, outcome: &CallOutcome) -> Vec<Expected> {
    let mut expected = Vec::new();
    if let Some(rv) = outcome.patched(target) {
        expected.push(Expected::reached(target, rv));
    }
    for write in &outcome.writes {
        if let (Change::Deleted, Some(version)) = (write.change, &write.decided_on)
            && write.object != *target
        {
            expected.push(Expected::passed(&write.object, version));
        }
        if let (Change::Created, Some(version)) = (write.change, &write.resource_version)
            && write.object.namespace == key.namespace
            && !write.object.name.is_empty()
        {
            expected.push(Expected::created(&write.object, version));
        }
    }
    expected
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Write;

    fn object(kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    fn write(
        change: Change,
        object: ObjectRef,
        resource_version: Option<&str>,
        decided_on: Option<&str>,
    ) -> Write {
        Write {
            change,
            object,
            resource_version: resource_version.map(str::to_string),
            decided_on: decided_on.map(str::to_string),
        }
    }

    /// The key's object is awaited at its last patch's version; another object the call
    /// deleted (having read it) past the version it was deleted at; an object created in
    /// the key's namespace until the cache holds it.
    #[test]
    fn the_call_waits_for_its_last_patch_its_deletes_and_its_creates() {
        let key = ObjKey::new(Some("ns"), "web");
        let target = object("ConfigMap", Some("ns"), "web");
        let pod = object("Pod", Some("ns"), "web-1");
        let child = object("Secret", Some("ns"), "web-creds");
        let outcome = CallOutcome {
            writes: vec![
                write(Change::Patched, target.clone(), Some("10"), Some("9")),
                write(Change::Deleted, pod.clone(), None, Some("7")),
                write(Change::Patched, target.clone(), Some("12"), Some("10")),
                write(Change::Created, child.clone(), Some("13"), None),
            ],
            ..CallOutcome::default()
        };
        assert_eq!(
            own_writes(&key, &target, &outcome),
            vec![
                Expected::reached(&target, "12"),
                Expected::passed(&pod, "7"),
                Expected::created(&child, "13"),
            ]
        );
    }

    /// Nothing is awaited for what the cache cannot show or the next call cannot trip on:
    /// the key's own object deleted, a delete not fenced on a read version, a create
    /// elsewhere than the key's namespace, a create without a name or a version.
    #[test]
    fn what_the_cache_cannot_show_is_not_awaited() {
        let key = ObjKey::new(Some("ns"), "web");
        let target = object("ConfigMap", Some("ns"), "web");
        let outcome = CallOutcome {
            writes: vec![
                write(Change::Deleted, target.clone(), None, Some("9")),
                write(Change::Deleted, object("Pod", Some("ns"), "p"), None, None),
                write(
                    Change::Created,
                    object("Pod", Some("other"), "p"),
                    Some("3"),
                    None,
                ),
                write(
                    Change::Created,
                    object("Namespace", None, "team"),
                    Some("4"),
                    None,
                ),
                write(
                    Change::Created,
                    object("Pod", Some("ns"), ""),
                    Some("5"),
                    None,
                ),
                write(Change::Created, object("Pod", Some("ns"), "q"), None, None),
            ],
            ..CallOutcome::default()
        };
        assert_eq!(own_writes(&key, &target, &outcome), vec![]);
    }
}
