//! Keys changing hands between replicas: when the gate's scope changes (this replica became
//! leader, or the ring changed) or the gate reopens after a lapse, every cached key it owns
//! is queued at once — the caches are warm, so a takeover reconciles without relisting, and
//! keys turned away while the gate was closed (or during a change too brief to be seen) are
//! not lost. Keys it lost are simply no longer let through. Counts the keys moved for the
//! metrics; the keys owned are counted when the metrics are read ([`owned_keys`]), so the
//! gauge is exact at every scrape and nothing walks the caches while nobody looks.

use crate::contract::Reason;
use crate::coordination::{Gate, Scope};
use crate::worker::RunningPlugins;
use std::collections::HashSet;
use std::sync::Arc;

/// Follows `gate` until the controller stops.
pub(super) async fn follow(gate: Gate, running: RunningPlugins) {
    let mut changes = gate.subscribe();
    let mut before = changes.borrow_and_update().clone();
    while changes.changed().await.is_ok() {
        let after = changes.borrow_and_update().clone();
        if after == before {
            continue;
        }
        let moved = hand_over(&running, &before.scope, &after.scope);
        gate.metrics().keys_moved.inc_by(moved.gained + moved.lost);
        tracing::info!(
            reopened = after.reopened != before.reopened,
            gained = moved.gained,
            lost = moved.lost,
            owned = moved.owned,
            "keys changed hands"
        );
        before = after;
    }
}

/// The distinct keys `scope` lets this replica reconcile, and the distinct keys cached, over
/// every running plugin's cache (read at scrape time for `kubeplug_ring_keys_owned` and
/// `kubeplug_ring_keys`: over all replicas, a key cached but owned by none is unowned).
pub(super) fn owned_keys(running: &RunningPlugins, scope: &Arc<Scope>) -> (u64, u64) {
    let counted = tally(running, scope, scope, false);
    (counted.owned, counted.cached)
}

/// What a scope change did to this replica's keys.
#[derive(Debug, Default, PartialEq, Eq)]
struct Moved {
    gained: u64,
    lost: u64,
    owned: u64,
    cached: u64,
}

/// Queues every cached key `after` allows (as added when `before` did not allow it, as a
/// resync otherwise), for every running plugin; counts what moved.
fn hand_over(running: &RunningPlugins, before: &Arc<Scope>, after: &Arc<Scope>) -> Moved {
    tally(running, before, after, true)
}

fn tally(running: &RunningPlugins, before: &Arc<Scope>, after: &Arc<Scope>, queue: bool) -> Moved {
    let mut moved = Moved::default();
    let mut owned = HashSet::new();
    let mut cached = HashSet::new();
    for plugin in running.snapshot().iter() {
        for key in plugin.current().primary.keys() {
            cached.insert(key.clone());
            let (was, is) = (before.allows(&key), after.allows(&key));
            if is && !was {
                moved.gained += 1;
            } else if was && !is {
                moved.lost += 1;
            }
            if is {
                if queue {
                    let reason = if was { Reason::Resync } else { Reason::Added };
                    plugin.enqueue(key.clone(), reason);
                }
                owned.insert(key);
            }
        }
    }
    moved.owned = owned.len() as u64;
    moved.cached = cached.len() as u64;
    moved
}
