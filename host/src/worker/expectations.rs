//! Read-your-writes for the cache, as client-go's controller "expectations": after a worker
//! patches an object and the API server answers with resourceVersion W, that key is not
//! reconciled again until the cache holds W or later. Otherwise a key re-queued while the
//! write was in flight (by a status update, say) would be reconciled against an object from
//! before the write and written again. resourceVersions are compared as numbers when both are
//! (they are etcd revisions on real API servers and on the embedded one), for equality
//! otherwise; the wait is bounded either way.

use crate::cluster::ObjKey;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

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

    /// Records that a write left `key` at `resource_version`.
    pub(crate) fn expect(&self, key: &ObjKey, resource_version: &str, now: Instant) {
        self.lock()
            .insert(key.clone(), (resource_version.to_string(), now + self.wait));
    }

    /// Whether `key` may be reconciled, given the resourceVersion the cache holds now.
    pub(crate) fn satisfied(&self, key: &ObjKey, cached: Option<&str>, now: Instant) -> bool {
        let mut pending = self.lock();
        match pending.get(key) {
            Some((written, deadline))
                if cached.is_some_and(|c| !reached(c, written)) && now < *deadline =>
            {
                false
            }
            Some(_) => {
                pending.remove(key);
                true
            }
            None => true,
        }
    }
}

/// Whether the cached resourceVersion is the written one or later.
fn reached(cached: &str, written: &str) -> bool {
    match (cached.parse::<u64>(), written.parse::<u64>()) {
        (Ok(c), Ok(w)) => c >= w,
        _ => cached == written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_the_cache_holds_the_written_version() {
        let e = Expectations::new(Duration::from_secs(2));
        let key = ObjKey::new(Some("ns"), "web");
        let t0 = Instant::now();
        assert!(e.satisfied(&key, Some("5"), t0), "nothing expected yet");
        e.expect(&key, "7", t0);
        assert!(
            !e.satisfied(&key, Some("5"), t0),
            "cache from before the write"
        );
        assert!(
            !e.satisfied(&key, Some("6"), t0),
            "a status update from before the write"
        );
        assert!(e.satisfied(&key, Some("7"), t0), "the written version");
        assert!(
            e.satisfied(&key, Some("5"), t0),
            "expectation cleared once met"
        );
        e.expect(&key, "7", t0);
        assert!(e.satisfied(&key, Some("9"), t0), "a later version");
    }

    #[test]
    fn gives_up_after_the_deadline_and_on_deletion() {
        let e = Expectations::new(Duration::from_secs(2));
        let key = ObjKey::new(Some("ns"), "web");
        let t0 = Instant::now();
        e.expect(&key, "7", t0);
        assert!(e.satisfied(&key, Some("5"), t0 + Duration::from_secs(3)));
        e.expect(&key, "7", t0);
        assert!(e.satisfied(&key, None, t0), "object gone");
    }

    #[test]
    fn opaque_versions_compare_for_equality() {
        let e = Expectations::new(Duration::from_secs(2));
        let key = ObjKey::new(None, "x");
        let t0 = Instant::now();
        e.expect(&key, "abc", t0);
        assert!(!e.satisfied(&key, Some("abb"), t0));
        assert!(e.satisfied(&key, Some("abc"), t0));
    }
}
