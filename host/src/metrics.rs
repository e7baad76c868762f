//! The host's one Prometheus registry: built where the host is put together
//! ([`crate::app`]) and shared by the parts that register metrics (the controller's queues
//! and audit, the reloader) and the part that serves them (`/metrics`).

use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};

/// A shared metrics registry; clones share it.
#[derive(Clone, Default)]
pub struct MetricsRegistry(Arc<Mutex<Registry>>);

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRegistry")
    }
}

impl MetricsRegistry {
    /// Registers metrics with `register`.
    pub fn register(&self, register: impl FnOnce(&mut Registry)) {
        register(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Every registered metric in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.0.lock().unwrap_or_else(|p| p.into_inner());
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
