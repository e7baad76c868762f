//! Read-your-writes for the cache, as client-go's controller "expectations": after a worker
//! writes because of an object at resourceVersion R, that key is not reconciled again until
//! the cache has moved past R. Otherwise a key re-queued while the write was in flight (a
//! status update, say) would be reconciled against the old object and written again.
//! The wait is bounded: a write that changed nothing leaves R in place.

use crate::cluster::ObjKey;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys waiting for the cache to show the effect of their last writes.
pub(crate) struct Expectations {
    pending: Mutex<HashMap<ObjKey, (String, Instant)>>,
    wait: Duration,
}

impl Expectations {
    /// Expectations that give up after `wait`.
    pub(crate) fn new(wait: Duration) -> Self {
        Expectations {
            pending: Mutex::default(),
            wait,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjKey, (String, Instant)>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that writes were made on seeing `key` at `resource_version`.
    pub(crate) fn expect_change(&self, key: &ObjKey, resource_version: &str, now: Instant) {
        self.lock()
            .insert(key.clone(), (resource_version.to_string(), now + self.wait));
    }

    /// Whether `key` may be reconciled, given the resourceVersion the cache holds now.
    pub(crate) fn satisfied(&self, key: &ObjKey, cached: Option<&str>, now: Instant) -> bool {
        let mut pending = self.lock();
        match pending.get(key) {
            Some((seen, deadline)) if cached == Some(seen.as_str()) && now < *deadline => false,
            Some(_) => {
                pending.remove(key);
                true
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_the_cache_moves_past_the_written_version() {
        let e = Expectations::new(Duration::from_secs(2));
        let key = ObjKey::new(Some("ns"), "web");
        let t0 = Instant::now();
        assert!(e.satisfied(&key, Some("5"), t0), "nothing expected yet");
        e.expect_change(&key, "5", t0);
        assert!(
            !e.satisfied(&key, Some("5"), t0),
            "cache still at the version written against"
        );
        assert!(e.satisfied(&key, Some("6"), t0), "cache moved on");
        assert!(
            e.satisfied(&key, Some("5"), t0),
            "expectation cleared once met"
        );
    }

    #[test]
    fn gives_up_after_the_deadline_and_on_deletion() {
        let e = Expectations::new(Duration::from_secs(2));
        let key = ObjKey::new(Some("ns"), "web");
        let t0 = Instant::now();
        e.expect_change(&key, "5", t0);
        assert!(e.satisfied(&key, Some("5"), t0 + Duration::from_secs(3)));
        e.expect_change(&key, "5", t0);
        assert!(e.satisfied(&key, None, t0), "object gone");
    }
}
