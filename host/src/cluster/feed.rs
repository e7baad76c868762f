//! The router's feed: the watches' changes and the plugins joining, in one order. A cache is
//! changed and its changes are sent under its ordering lock, and a joining plugin reads the
//! cache's keys and sends its join under the same lock, so each object reaches a new plugin
//! exactly once: in the keys it joins with, or as a change routed after it joined.

use super::{Change, KindCache, ObjKey};
use tokio::sync::mpsc::UnboundedSender;

/// What the router takes, in the order the caches changed.
pub enum Routed {
    /// A watch saw a change.
    Change(Change),
    /// A plugin joins: run once every change sent before it has been routed and before any
    /// sent after it, with the keys its primary cache held when it was sent.
    Join(Box<dyn FnOnce() + Send>),
}

/// The sending end of the router's feed.
pub type Feed = UnboundedSender<Routed>;

impl KindCache {
    /// Sends `join` to the router with every key cached now, ordered with the changes the
    /// watches send: changes to the keys it gets were sent before it, later changes after.
    /// Returns whether the router still runs.
    pub fn join(&self, feed: &Feed, join: impl FnOnce(Vec<ObjKey>) + Send + 'static) -> bool {
        let _order = self.order();
        let keys = self.keys();
        feed.send(Routed::Join(Box::new(move || join(keys))))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{CacheWriter, CachedObject};
    use crate::contract::KindRef;
    use std::sync::{Arc, Mutex};

    fn object(name: &str) -> CachedObject {
        CachedObject {
            key: ObjKey::new(Some("ns"), name),
            json: "{}".into(),
            resource_version: "1".into(),
            labels: Default::default(),
            controller: None,
            manager: None,
        }
    }

    #[test]
    fn a_join_gets_what_was_cached_and_the_feed_carries_only_later_changes_after_it() {
        let (feed, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut writer = CacheWriter::new(KindRef::deployment());
        let cache = writer.reader();
        let send = |writer: &mut CacheWriter, name: &str| {
            let _order = cache.order();
            let change = writer.upsert(object(name)).unwrap();
            feed.send(Routed::Change(change)).unwrap();
        };
        send(&mut writer, "before");
        let joined = Arc::new(Mutex::new(Vec::new()));
        let into = joined.clone();
        assert!(cache.join(&feed, move |keys| *into.lock().unwrap() = keys));
        send(&mut writer, "after");
        let mut order = Vec::new();
        while let Ok(routed) = rx.try_recv() {
            match routed {
                Routed::Change(c) => order.push(c.object.key.name.clone()),
                Routed::Join(run) => {
                    run();
                    order.push("join".into());
                }
            }
        }
        assert_eq!(order, ["before", "join", "after"]);
        let keys: Vec<String> = joined
            .lock()
            .unwrap()
            .iter()
            .map(|k| k.name.clone())
            .collect();
        assert_eq!(keys, ["before"]);
    }
}
