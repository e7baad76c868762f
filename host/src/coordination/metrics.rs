//! The coordination metrics: whether this replica leads, how often that changed, the ring
//! it sees, the keys it caches, owns and moved.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

/// Where a write was found no longer held and was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Withheld {
    /// When the write budget released it.
    Budget,
    /// While its request was being sent (checked on every poll, dropped at the deadline).
    Transport,
}

impl Withheld {
    /// The `stage` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Withheld::Budget => "budget",
            Withheld::Transport => "transport",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    stage: String,
}

/// Writes not sent because the key was no longer held, for the whole process: the
/// pipeline that refuses them has no gate of its own.
static WITHHELD: LazyLock<Family<StageLabels, Counter>> = LazyLock::new(Family::default);

/// Counts one write not sent at `stage` because its key was no longer held.
pub fn count_withheld(stage: Withheld) {
    let stage = stage.as_str().to_string();
    WITHHELD.get_or_create(&StageLabels { stage }).inc();
}

/// Shared handles on the coordination metrics; clones update the same series.
#[derive(Debug, Clone, Default)]
pub struct CoordinationMetrics {
    /// 1 while this replica leads (leader election), else 0.
    pub leader: Gauge,
    /// Times this replica became leader or stopped leading.
    pub transitions: Counter,
    /// Members in the ring this replica sees (sharding).
    pub members: Gauge,
    /// Keys this replica may reconcile now, over every running plugin's cache: set by the
    /// controller each time the metrics are read, so it is exact at every scrape.
    pub keys_owned: Gauge,
    /// Keys in this replica's caches, owned or not (counted with `keys_owned`): every
    /// replica caches every key, so where the replicas' `keys_owned` add up to less, some
    /// keys are owned by none.
    pub keys: Gauge,
    /// Keys this replica gained or gave up on ring or leadership changes.
    pub keys_moved: Counter,
}

impl CoordinationMetrics {
    /// Registers the series of `mode` (leader or ring ones; the key counts for both).
    pub fn register(&self, registry: &mut Registry, sharding: bool) {
        if sharding {
            registry.register(
                "kubeplug_ring_members",
                "Members of the sharding ring this replica sees",
                self.members.clone(),
            );
        } else {
            registry.register(
                "kubeplug_leader",
                "Whether this replica holds the leader Lease (1) or not (0)",
                self.leader.clone(),
            );
            registry.register(
                "kubeplug_leader_transitions",
                "Times this replica became leader or stopped leading",
                self.transitions.clone(),
            );
        }
        registry.register(
            "kubeplug_ring_keys_owned",
            "Keys this replica may reconcile now",
            self.keys_owned.clone(),
        );
        registry.register(
            "kubeplug_ring_keys",
            "Keys in this replica's caches, owned by it or not",
            self.keys.clone(),
        );
        // Both stages from the start, at 0: the series exist before the first write withheld.
        for stage in [Withheld::Budget, Withheld::Transport] {
            drop(WITHHELD.get_or_create(&StageLabels {
                stage: stage.as_str().to_string(),
            }));
        }
        registry.register(
            "kubeplug_writes_withheld",
            "Writes not sent because this replica no longer held their key (stage: when the budget released them, or while their request was sent)",
            WITHHELD.clone(),
        );
        registry.register(
            "kubeplug_ring_keys_moved",
            "Keys this replica gained or gave up",
            self.keys_moved.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn leader_mode_exports_the_key_counts_and_both_withheld_stages_from_the_start() {
        let mut registry = Registry::default();
        let metrics = CoordinationMetrics::default();
        metrics.register(&mut registry, false);
        metrics.keys.set(7);
        metrics.keys_owned.set(5);
        let text = encode(&registry);
        for line in [
            "kubeplug_leader 0",
            "kubeplug_ring_keys 7",
            "kubeplug_ring_keys_owned 5",
            "kubeplug_writes_withheld_total{stage=\"budget\"}",
            "kubeplug_writes_withheld_total{stage=\"transport\"}",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(line)),
                "{line} in {text}"
            );
        }
        assert!(!text.contains("kubeplug_ring_members"), "{text}");
    }

    #[test]
    fn sharding_exports_the_ring_and_the_key_counts() {
        let mut registry = Registry::default();
        let metrics = CoordinationMetrics::default();
        metrics.register(&mut registry, true);
        metrics.members.set(3);
        metrics.keys.set(300);
        let text = encode(&registry);
        assert!(text.contains("kubeplug_ring_members 3"), "{text}");
        assert!(text.contains("kubeplug_ring_keys 300"), "{text}");
        assert!(!text.contains("kubeplug_leader "), "{text}");
    }
}
