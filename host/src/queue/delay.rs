//! Keys waiting for a delayed add: a timer heap with one entry per key, mirroring client-go's
//! delaying queue (`waitingForQueue`): when a key is scheduled again, the earlier instant wins.
//!
//! The heap has no decrease-key: moving a key earlier pushes a new entry and the old one is
//! skipped when it surfaces (it no longer matches the key's current sequence number).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

use tokio::time::Instant;

/// One scheduled add; ordered so the `BinaryHeap` (a max-heap) pops the earliest first, and
/// keys due at the same instant in the order they were scheduled.
struct Entry<K> {
    ready_at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K> Eq for Entry<K> {}

impl<K> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Entry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.ready_at, other.seq).cmp(&(self.ready_at, self.seq))
    }
}

/// Keys scheduled for a later add, at most one live instant per key.
pub(super) struct Waiting<K> {
    heap: BinaryHeap<Entry<K>>,
    /// The live entry of each key: its instant and sequence number.
    live: HashMap<K, (Instant, u64)>,
    next_seq: u64,
}

impl<K: Clone + Eq + Hash> Waiting<K> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Schedules `key` at `ready_at` unless it is already due no later. Returns whether the
    /// earliest deadline moved earlier, i.e. whether the timer must be re-armed.
    pub(super) fn schedule(&mut self, key: K, ready_at: Instant) -> bool {
        if let Some(&(current, _)) = self.live.get(&key)
            && current <= ready_at
        {
            return false;
        }
        let earliest = self.next_deadline();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.live.insert(key.clone(), (ready_at, seq));
        self.heap.push(Entry { ready_at, seq, key });
        earliest.is_none_or(|earliest| ready_at < earliest)
    }

    /// Removes and returns the keys due at `now`, earliest first.
    pub(super) fn pop_ready(&mut self, now: Instant) -> Vec<K> {
        let mut ready = Vec::new();
        while let Some(entry) = self.heap.peek()
            && entry.ready_at <= now
        {
            let Some(entry) = self.heap.pop() else { break };
            if self.is_live(&entry) {
                self.live.remove(&entry.key);
                ready.push(entry.key);
            }
        }
        ready
    }

    /// The instant of the earliest live entry, dropping superseded entries on the way.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(entry) = self.heap.peek() {
            if self.is_live(entry) {
                return Some(entry.ready_at);
            }
            self.heap.pop();
        }
        None
    }

    /// Forgets every waiting key (on shutdown).
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.live.clear();
    }

    fn is_live(&self, entry: &Entry<K>) -> bool {
        self.live.get(&entry.key).map(|&(_, seq)| seq) == Some(entry.seq)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    #[test]
    fn pops_in_deadline_order_then_schedule_order() {
        let t0 = Instant::now();
        let mut waiting = Waiting::new();
        assert!(waiting.schedule("late", at(t0, 30)));
        assert!(waiting.schedule("early", at(t0, 10)));
        assert!(!waiting.schedule("tie-1", at(t0, 20)));
        assert!(!waiting.schedule("tie-2", at(t0, 20)));
        assert_eq!(waiting.next_deadline(), Some(at(t0, 10)));
        assert!(waiting.pop_ready(at(t0, 9)).is_empty());
        assert_eq!(
            waiting.pop_ready(at(t0, 30)),
            ["early", "tie-1", "tie-2", "late"]
        );
        assert_eq!(waiting.next_deadline(), None);
        assert_eq!(waiting.live.len(), 0);
    }

    #[test]
    fn earlier_schedule_wins_and_later_one_is_ignored() {
        let t0 = Instant::now();
        let mut waiting = Waiting::new();
        waiting.schedule("a", at(t0, 100));
        assert!(!waiting.schedule("a", at(t0, 200)));
        assert!(waiting.schedule("a", at(t0, 40)));
        assert_eq!(waiting.live.len(), 1);
        assert_eq!(waiting.next_deadline(), Some(at(t0, 40)));
        assert_eq!(waiting.pop_ready(at(t0, 40)), ["a"]);
        // The superseded entry at 100 ms is not delivered again.
        assert!(waiting.pop_ready(at(t0, 1000)).is_empty());
        assert_eq!(waiting.next_deadline(), None);
    }

    #[test]
    fn clear_forgets_everything() {
        let t0 = Instant::now();
        let mut waiting = Waiting::new();
        waiting.schedule(1, at(t0, 1));
        waiting.schedule(2, at(t0, 2));
        waiting.clear();
        assert_eq!(waiting.live.len(), 0);
        assert!(waiting.pop_ready(at(t0, 10)).is_empty());
    }
}
