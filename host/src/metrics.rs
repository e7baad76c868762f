//! The host's one Prometheus registry: built where the host is put together
//! ([`crate::app`]) and shared by the parts that register metrics (the controller's queues
//! and audit, the reloader) and the part that serves them (`/metrics`), with the limit past
//! which series labelled by plugin are summed per namespace ([`SeriesLimit`]).

mod buckets;
mod plugin_family;
mod series_limit;

pub use buckets::{BucketHistogram, HistogramValue};
pub use plugin_family::{NoLabels, PluginFamily, PluginMetric};
pub use series_limit::{
    DEFAULT_PER_PLUGIN_LIMIT, SeriesLimit, namespace_label, namespace_of, per_plugin_view,
};

use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};

/// A shared metrics registry and its series limit; clones share them.
#[derive(Clone, Default)]
pub struct MetricsRegistry {
    registry: Arc<Mutex<Registry>>,
    limit: SeriesLimit,
}

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRegistry")
    }
}

impl MetricsRegistry {
    /// An empty registry whose plugins keep series of their own while at most `limit`
    /// namespaced ones run ([`SeriesLimit::new`]).
    pub fn with_per_plugin_limit(limit: usize) -> Self {
        MetricsRegistry {
            registry: Arc::default(),
            limit: SeriesLimit::new(limit),
        }
    }

    /// The limit the families labelled by plugin follow (and the plugins running, counted).
    pub fn series_limit(&self) -> &SeriesLimit {
        &self.limit
    }

    /// Registers metrics with `register`.
    pub fn register(&self, register: impl FnOnce(&mut Registry)) {
        register(&mut self.registry.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Every registered metric in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn clones_share_one_registry() {
        let registry = MetricsRegistry::default();
        let counter = Counter::<u64>::default();
        registry
            .clone()
            .register(|r| r.register("kubeplug_test", "a test counter", counter.clone()));
        counter.inc();
        assert!(
            registry.encode().contains("kubeplug_test_total 1"),
            "{}",
            registry.encode()
        );
    }
}
