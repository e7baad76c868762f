//! Read-your-writes for the cache, as client-go's controller "expectations": what the cache
//! must show before a key is reconciled again, each wait bounded in time.
//!
//! - After a worker patches an object and the API server answers with resourceVersion W,
//!   that key waits until the cache holds W or later ([`Until::Reached`]). Otherwise a key
//!   re-queued while the write was in flight (by a status update, say) would be reconciled
//!   against an object from before the write and written again.
//! - After a [fenced](crate::actions::fence) write carrying version F is refused with 409
//!   Conflict, the key waits until the cache holds a version of that object *newer* than F
//!   ([`Until::Passed`]): reconciling earlier would decide on the same stale object again.
//! - After a worker creates an object that the API server answers at version C, the key
//!   waits until the cache holds that object, at C or later ([`Until::Created`]): otherwise
//!   the next call could miss the new child in the cache and create another (with
//!   `generateName`, a second one; with a fixed name, an `AlreadyExists` round trip).
//!
//! The object waited on is named by kind and key, so a conflict on a child waits for the
//! child's cache. resourceVersions are compared as numbers when both are (they are etcd
//! revisions on real API servers and on the embedded one), for equality otherwise. The watch
//! ends a wait: when the cache shows the version, when the object is gone, or, for a created
//! one, when it appears or the watch covering it has delivered a version at or past the
//! create's without it (it was deleted since; a relist counts, at the newest version it
//! holds). Otherwise the wait ends at its deadline: long for a create, as client-go's (5
//! minutes: a watch being re-established must not let the key create the same children
//! again, and nothing would refuse the second create), short for the rest ([`FENCED_WAIT`]:
//! the next call's patches and deletes are fenced on the versions it read, so acting on a
//! cache still behind costs a refused write, not a second one; and a 409 answering a write
//! that would have succeeded announces a newer version that never comes). A created object
//! of a kind not cached at all is not awaited (the plugin cannot read that kind, so cannot
//! miss it).

use crate::cluster::ObjKey;
use crate::contract::{KindRef, ObjectRef};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long a key waits for the cache to show a patch or deletion of its call, or the newer
/// version a refused write was fenced on (the writes of its next call are fenced).
const FENCED_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting key looks again at first; later ones look less often, up to
/// [`RECHECK_MAX`] (the watch's own events re-queue the owner of a child they show).
const RECHECK_MIN: Duration = Duration::from_millis(20);
/// The longest pause between two looks of a waiting key.
const RECHECK_MAX: Duration = Duration::from_secs(1);

/// How far the cache must have moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// To the version or later: a write of ours left the object there.
    Reached,
    /// Past the version: a write fenced on it was refused, the object has moved on.
    Passed,
    /// In the cache, at the version or later: a create of ours made it.
    Created,
}

/// One object version the cache must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    /// The object's kind (whose cache is looked at).
    pub kind: KindRef,
    /// Its namespace and name.
    pub object: ObjKey,
    /// The version measured against.
    pub version: String,
    /// Whether it must be reached or passed.
    pub until: Until,
}

impl Expected {
    /// `object` must be at `version` or later.
    pub(crate) fn reached(object: &ObjectRef, version: &str) -> Self {
        Self::of(object, version, Until::Reached)
    }

    /// `object` must be past `version`.
    pub(crate) fn passed(object: &ObjectRef, version: &str) -> Self {
        Self::of(object, version, Until::Passed)
    }

    /// `object`, which a create made at `version`, must be cached at it or later.
    pub(crate) fn created(object: &ObjectRef, version: &str) -> Self {
        Self::of(object, version, Until::Created)
    }

    fn of(object: &ObjectRef, version: &str, until: Until) -> Self {
        Expected {
            kind: object.kind_ref(),
            object: ObjKey::new(object.namespace.as_deref(), &object.name),
            version: version.to_string(),
            until,
        }
    }

    /// Whether a watch that delivered every change up to `seen` without the object shows
    /// it gone: only a created object is awaited while absent, until the watch passes the
    /// create.
    fn gone_by(&self, seen: Option<u64>) -> bool {
        match (self.until, seen, self.version.parse::<u64>()) {
            (Until::Reached | Until::Passed, _, _) => true,
            (Until::Created, Some(seen), Ok(created)) => seen >= created,
            (Until::Created, _, _) => false,
        }
    }

    /// Whether a cached object at `cached` shows it.
    fn shown_by(&self, cached: &str) -> bool {
        match (
            cached.parse::<u64>(),
            self.version.parse::<u64>(),
            self.until,
        ) {
            (Ok(c), Ok(v), Until::Reached | Until::Created) => c >= v,
            (Ok(c), Ok(v), Until::Passed) => c > v,
            (_, _, Until::Reached | Until::Created) => cached == self.version,
            (_, _, Until::Passed) => cached != self.version,
        }
    }
}

/// What the host's caches hold of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cached {
    /// Its kind is not cached: its versions are never seen.
    Unwatched,
    /// Not in the cache; the watch covering it has delivered every change up to `seen`.
    Gone {
        /// The newest (numeric) resourceVersion the watch has delivered, if any.
        seen: Option<u64>,
    },
    /// At this resourceVersion.
    At(String),
}

/// Keys waiting for the cache to show the effects of their last writes, each wait with the
/// time it began.
pub(crate) struct Expectations {
    pending: Mutex<HashMap<ObjKey, Vec<(Expected, Instant)>>>,
    wait: Duration,
}

impl Expectations {
    /// Expectations that give up on a created object after `wait`, on the rest after
    /// [`FENCED_WAIT`] (or `wait` if shorter).
    pub(crate) fn new(wait: Duration) -> Self {
        Expectations {
            pending: Mutex::default(),
            wait,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjKey, Vec<(Expected, Instant)>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `key` waits for `expected` (replacing an earlier wait on the same object).
    pub(crate) fn expect(&self, key: &ObjKey, expected: Expected, now: Instant) {
        let mut pending = self.lock();
        let waits = pending.entry(key.clone()).or_default();
        waits.retain(|(e, _)| e.kind != expected.kind || e.object != expected.object);
        waits.push((expected, now));
    }

    /// When a key still waiting should look again: soon at first, then less often the longer
    /// it has waited (a tenth of it, at most [`RECHECK_MAX`]), so keys waiting out a broken
    /// watch do not spin.
    pub(crate) fn recheck_after(&self, key: &ObjKey, now: Instant) -> Duration {
        let oldest = self
            .lock()
            .get(key)
            .and_then(|waits| waits.iter().map(|(_, since)| *since).min());
        let waited = oldest.map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        (waited / 10).clamp(RECHECK_MIN, RECHECK_MAX)
    }

    /// Whether `key` may be reconciled, given what the caches hold now (`cached` looks an
    /// object up by kind and key; asked only for keys that wait). Waits that ended are
    /// dropped.
    pub(crate) fn satisfied(
        &self,
        key: &ObjKey,
        now: Instant,
        cached: impl Fn(&KindRef, &ObjKey) -> Cached,
    ) -> bool {
        let mut pending = self.lock();
        let Some(waits) = pending.get_mut(key) else {
            return true;
        };
        let fenced = self.wait.min(FENCED_WAIT);
        waits.retain(|(expected, since)| {
            let wait = match expected.until {
                Until::Created => self.wait,
                Until::Reached | Until::Passed => fenced,
            };
            now < *since + wait
                && match cached(&expected.kind, &expected.object) {
                    Cached::Unwatched => expected.until != Until::Created,
                    Cached::Gone { seen } => !expected.gone_by(seen),
                    Cached::At(rv) => !expected.shown_by(&rv),
                }
        });
        if waits.is_empty() {
            pending.remove(key);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        }
    }

    fn key() -> ObjKey {
        ObjKey::new(Some("ns"), "web")
    }

    /// A cache holding only `web`, at `rv` (or nothing).
    fn at(rv: Option<&str>) -> impl Fn(&KindRef, &ObjKey) -> Cached {
        move |kind, object| match rv {
            _ if *kind != web().kind_ref() => Cached::Unwatched,
            Some(rv) if *object == key() => Cached::At(rv.to_string()),
            _ => Cached::Gone { seen: None },
        }
    }

    #[test]
    fn waits_until_the_cache_holds_the_written_version() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        assert!(
            e.satisfied(&key(), t0, at(Some("5"))),
            "nothing expected yet"
        );
        e.expect(&key(), Expected::reached(&web(), "7"), t0);
        assert!(
            !e.satisfied(&key(), t0, at(Some("5"))),
            "cache from before the write"
        );
        assert!(
            !e.satisfied(&key(), t0, at(Some("6"))),
            "a status update from before the write"
        );
        assert!(
            e.satisfied(&key(), t0, at(Some("7"))),
            "the written version"
        );
        assert!(
            e.satisfied(&key(), t0, at(Some("5"))),
            "expectation cleared once met"
        );
        e.expect(&key(), Expected::reached(&web(), "7"), t0);
        assert!(e.satisfied(&key(), t0, at(Some("9"))), "a later version");
    }

    #[test]
    fn a_refused_version_waits_for_a_newer_one() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        e.expect(&key(), Expected::passed(&web(), "7"), t0);
        assert!(!e.satisfied(&key(), t0, at(Some("7"))), "the same version");
        assert!(e.satisfied(&key(), t0, at(Some("8"))), "a newer one");
    }

    #[test]
    fn gives_up_after_the_deadline_and_on_deletion() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        e.expect(&key(), Expected::reached(&web(), "7"), t0);
        assert!(e.satisfied(&key(), t0 + Duration::from_secs(3), at(Some("5"))));
        e.expect(&key(), Expected::passed(&web(), "7"), t0);
        assert!(e.satisfied(&key(), t0, at(None)), "object gone");
    }

    #[test]
    fn a_created_object_is_awaited_until_it_appears_unless_its_kind_is_not_cached() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let child = ObjectRef {
            name: "web-x7k2p".into(),
            ..web()
        };
        // A cache holding only `child` at `rv`, or nothing.
        let child_at = |rv: Option<&'static str>| {
            move |_: &KindRef, object: &ObjKey| match rv {
                Some(rv) if object.name == "web-x7k2p" => Cached::At(rv.to_string()),
                _ => Cached::Gone { seen: None },
            }
        };
        e.expect(&key(), Expected::created(&child, "7"), t0);
        assert!(
            !e.satisfied(&key(), t0, child_at(None)),
            "not in the cache yet"
        );
        assert!(
            !e.satisfied(&key(), t0, child_at(Some("6"))),
            "another object's version"
        );
        assert!(e.satisfied(&key(), t0, child_at(Some("7"))), "it appeared");
        e.expect(&key(), Expected::created(&child, "7"), t0);
        assert!(
            e.satisfied(&key(), t0 + Duration::from_secs(2), child_at(None)),
            "the deadline"
        );
        let secret = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            ..child
        };
        e.expect(&key(), Expected::created(&secret, "7"), t0);
        assert!(e.satisfied(&key(), t0, at(None)), "a kind never cached");
    }

    #[test]
    fn a_child_of_a_kind_never_cached_waits_out_the_deadline() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let child = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            ..web()
        };
        e.expect(&key(), Expected::passed(&child, "3"), t0);
        assert!(!e.satisfied(&key(), t0 + Duration::from_secs(1), at(Some("9"))));
        assert!(e.satisfied(&key(), t0 + Duration::from_secs(2), at(Some("9"))));
    }

    #[test]
    fn every_wait_of_a_key_must_end() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let pod = ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            ..web()
        };
        e.expect(&key(), Expected::reached(&web(), "7"), t0);
        e.expect(&key(), Expected::passed(&pod, "3"), t0);
        let cached = |rv: &'static str, pod_rv: &'static str| {
            move |kind: &KindRef, _: &ObjKey| match kind.kind.as_str() {
                "Pod" => Cached::At(pod_rv.to_string()),
                _ => Cached::At(rv.to_string()),
            }
        };
        assert!(!e.satisfied(&key(), t0, cached("6", "3")), "neither");
        assert!(
            !e.satisfied(&key(), t0, cached("7", "3")),
            "the pod did not move"
        );
        assert!(
            e.satisfied(&key(), t0, cached("7", "4")),
            "both, one after the other"
        );
    }

    #[test]
    fn a_created_object_deleted_before_the_cache_showed_it_ends_the_wait_once_the_watch_passes_it()
    {
        let e = Expectations::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let gone = |seen| move |_: &KindRef, _: &ObjKey| Cached::Gone { seen };
        e.expect(&key(), Expected::created(&web(), "7"), t0);
        assert!(
            !e.satisfied(&key(), t0, gone(None)),
            "the watch delivered nothing"
        );
        assert!(
            !e.satisfied(&key(), t0, gone(Some(6))),
            "not up to the create"
        );
        assert!(
            !e.satisfied(&key(), t0 + Duration::from_secs(60), gone(Some(6))),
            "a minute of a watch being re-established is waited out"
        );
        assert!(
            e.satisfied(&key(), t0, gone(Some(7))),
            "created, then deleted"
        );
        e.expect(&key(), Expected::created(&web(), "opaque"), t0);
        assert!(
            !e.satisfied(&key(), t0, gone(Some(9))),
            "nothing to compare"
        );
        assert!(e.satisfied(&key(), t0 + Duration::from_secs(300), gone(Some(9))));
    }

    #[test]
    fn only_a_create_is_waited_for_long() {
        let e = Expectations::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        e.expect(&key(), Expected::reached(&web(), "7"), t0);
        assert!(!e.satisfied(&key(), later, at(Some("5"))));
        assert!(
            e.satisfied(&key(), t0 + FENCED_WAIT, at(Some("5"))),
            "a patch"
        );
        e.expect(&key(), Expected::passed(&web(), "7"), t0);
        assert!(!e.satisfied(&key(), later, at(Some("7"))));
        assert!(
            e.satisfied(&key(), t0 + FENCED_WAIT, at(Some("7"))),
            "a conflict"
        );
        let secret = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            ..web()
        };
        e.expect(&key(), Expected::passed(&secret, "3"), t0);
        assert!(!e.satisfied(&key(), later, at(None)));
        assert!(
            e.satisfied(&key(), t0 + FENCED_WAIT, at(None)),
            "a kind never cached"
        );
        e.expect(&key(), Expected::created(&web(), "7"), t0);
        assert!(
            !e.satisfied(&key(), t0 + Duration::from_secs(299), at(None)),
            "a create"
        );
        assert!(e.satisfied(&key(), t0 + Duration::from_secs(300), at(None)));
    }

    #[test]
    fn a_waiting_key_looks_again_less_often_the_longer_it_waits() {
        let e = Expectations::new(Duration::from_secs(300));
        let t0 = Instant::now();
        assert_eq!(e.recheck_after(&key(), t0), RECHECK_MIN, "nothing expected");
        e.expect(&key(), Expected::created(&web(), "7"), t0);
        assert_eq!(e.recheck_after(&key(), t0), RECHECK_MIN);
        assert_eq!(
            e.recheck_after(&key(), t0 + Duration::from_secs(2)),
            Duration::from_millis(200)
        );
        assert_eq!(
            e.recheck_after(&key(), t0 + Duration::from_secs(60)),
            RECHECK_MAX
        );
    }

    #[test]
    fn opaque_versions_compare_for_equality() {
        let e = Expectations::new(Duration::from_secs(2));
        let t0 = Instant::now();
        e.expect(&key(), Expected::reached(&web(), "abc"), t0);
        assert!(!e.satisfied(&key(), t0, at(Some("abb"))));
        assert!(e.satisfied(&key(), t0, at(Some("abc"))));
        e.expect(&key(), Expected::passed(&web(), "abc"), t0);
        assert!(!e.satisfied(&key(), t0, at(Some("abc"))));
        assert!(e.satisfied(&key(), t0, at(Some("abd"))));
    }
}
