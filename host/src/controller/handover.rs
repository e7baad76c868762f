//! Keys changing hands between replicas: when the gate's scope changes (this replica became
//! leader, or the ring changed) or the gate reopens after a lapse, every cached key it owns
//! is queued at once — the caches are warm, so a takeover reconciles without relisting, and
//! keys turned away while the gate was closed (or during a change too brief to be seen) are
//! not lost. Keys it lost are simply no longer let through. Counts keys owned and moved
//! for the metrics.

use crate::contract::Reason;
use crate::coordination::{Gate, Scope};
use crate::worker::RunningPlugins;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often the owned-keys gauge is recounted while nothing changes (objects come and go).
const RECOUNT: Duration = Duration::from_secs(5);

/// Follows `gate` until the controller stops.
pub(super) async fn follow(gate: Gate, running: RunningPlugins) {
    let mut changes = gate.subscribe();
    let mut before = changes.borrow_and_update().clone();
    loop {
        let changed = tokio::time::timeout(RECOUNT, changes.changed()).await;
        if matches!(changed, Ok(Err(_))) {
            return;
        }
        let after = changes.borrow_and_update().clone();
        let moved = match after == before {
            // Nothing changed: only the owned-keys gauge is recounted.
            true => count(&running, &after.scope),
            false => hand_over(&running, &before.scope, &after.scope),
        };
        let metrics = gate.metrics();
        metrics.keys_owned.set(moved.owned as i64);
        metrics.keys_moved.inc_by(moved.gained + moved.lost);
        if after != before {
            tracing::info!(
                reopened = after.reopened != before.reopened,
                gained = moved.gained,
                lost = moved.lost,
                owned = moved.owned,
                "keys changed hands"
            );
        }
        before = after;
    }
}

/// What a scope change did to this replica's keys.
#[derive(Debug, Default, PartialEq, Eq)]
struct Moved {
    gained: u64,
    lost: u64,
    owned: u64,
}

/// Queues every cached key `after` allows (as added when `before` did not allow it, as a
/// resync otherwise), for every running plugin; counts what moved.
fn hand_over(running: &RunningPlugins, before: &Arc<Scope>, after: &Arc<Scope>) -> Moved {
    tally(running, before, after, true)
}

/// Counts the keys `scope` allows, queueing nothing.
fn count(running: &RunningPlugins, scope: &Arc<Scope>) -> Moved {
    tally(running, scope, scope, false)
}

fn tally(running: &RunningPlugins, before: &Arc<Scope>, after: &Arc<Scope>, queue: bool) -> Moved {
    let mut moved = Moved::default();
    let mut owned = HashSet::new();
    for plugin in running.snapshot().iter() {
        for key in plugin.current().primary.keys() {
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
    moved
}
