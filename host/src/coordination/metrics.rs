//! The coordination metrics: whether this replica leads, how often that changed, the ring
//! it sees, and the keys it owns and moved.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
            "kubeplug_ring_keys_moved",
            "Keys this replica gained or gave up",
            self.keys_moved.clone(),
        );
    }
}
