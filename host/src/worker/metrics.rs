//! Reconcile metrics: how long each plugin call takes (`kubeplug_reconcile_duration_seconds`,
//! per plugin), how each reconcile ended (`kubeplug_reconcile_total{plugin,result}`), fenced
//! writes refused because the object had moved on (`kubeplug_write_conflicts_total{plugin}`),
//! the objects each watch's cache holds (`kubeplug_cache_objects{kind}`), and each plugin's
//! calls with writes in flight and their adaptive limit (`kubeplug_writes_in_flight{plugin}`,
//! `kubeplug_writes_in_flight_limit{plugin}`, read at scrape time).

use crate::actions::CallFailure;
use crate::plugin::CallError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

/// Plugin call durations, in seconds: 100 µs to 10 s (the default call timeout is 1 s).
const CALL_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0, 10.0,
];

/// How one reconcile ended: the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// The call returned actions and every one of them went through.
    Success,
    /// The plugin reported an error (transient or permanent).
    Error,
    /// The call ran past its deadline.
    Timeout,
    /// The plugin tried to grow its memory past its limit.
    Oom,
    /// The plugin panicked.
    Panic,
    /// The plugin overflowed its stack.
    StackOverflow,
    /// Any other trap.
    Trap,
    /// The plugin's actions broke a bound or were malformed.
    InvalidOutput,
    /// The plugin could not be instantiated.
    InstantiateError,
    /// The plugin's actions were refused by or failed at the API server (or discovery).
    ApiError,
    /// The host's task running the call failed.
    HostError,
    /// A write was due after this replica stopped holding the key: nothing more was sent.
    NotHeld,
    /// A fenced write was refused (409 Conflict): the object had moved past the version the
    /// plugin decided on.
    Conflict,
}

impl ReconcileResult {
    /// Every result, for removing a plugin's series.
    pub const ALL: [ReconcileResult; 13] = [
        Self::Success,
        Self::Error,
        Self::Timeout,
        Self::Oom,
        Self::Panic,
        Self::StackOverflow,
        Self::Trap,
        Self::InvalidOutput,
        Self::InstantiateError,
        Self::ApiError,
        Self::HostError,
        Self::NotHeld,
        Self::Conflict,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Oom => "oom",
            Self::Panic => "panic",
            Self::StackOverflow => "stack-overflow",
            Self::Trap => "trap",
            Self::InvalidOutput => "invalid-output",
            Self::InstantiateError => "instantiate-error",
            Self::ApiError => "api-error",
            Self::HostError => "host-error",
            Self::NotHeld => "not-held",
            Self::Conflict => "conflict",
        }
    }

    /// The result of a call that failed.
    pub fn of_call(err: &CallError) -> Self {
        match err {
            CallError::Timeout { .. } => Self::Timeout,
            CallError::OutOfMemory { .. } => Self::Oom,
            CallError::Panic { .. } => Self::Panic,
            CallError::StackOverflow => Self::StackOverflow,
            CallError::Trap { .. } => Self::Trap,
            CallError::InvalidOutput(_) => Self::InvalidOutput,
            CallError::Transient(_) | CallError::Permanent(_) => Self::Error,
            CallError::Instantiate { .. } => Self::InstantiateError,
        }
    }

    /// The result of a call whose actions ran, stopping at `failure` if any.
    pub fn of_actions(failure: Option<&CallFailure>) -> Self {
        match failure {
            None => Self::Success,
            Some(CallFailure::NotHeld) => Self::NotHeld,
            Some(CallFailure::Conflict { .. }) => Self::Conflict,
            Some(_) => Self::ApiError,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    plugin: String,
    result: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

type DurationFamily = Family<PluginLabels, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// The reconcile and cache metric families; clones share them.
#[derive(Debug, Clone)]
pub struct ReconcileMetrics {
    duration: DurationFamily,
    total: Family<ResultLabels, Counter>,
    conflicts: Family<PluginLabels, Counter>,
    cache_objects: Family<KindLabels, Gauge>,
    writes_in_flight: Family<PluginLabels, Gauge>,
    writes_limit: Family<PluginLabels, Gauge>,
}

/// How many reconciles a plugin has run, and how many of them did not succeed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileCounts {
    /// Every reconcile that ran to an end.
    pub total: u64,
    /// Those whose result is not success.
    pub errors: u64,
}

impl ReconcileMetrics {
    /// Creates the families and registers them in `registry` (once per registry).
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = ReconcileMetrics {
            duration: Family::new_with_constructor(call_histogram),
            total: Family::default(),
            conflicts: Family::default(),
            cache_objects: Family::default(),
            writes_in_flight: Family::default(),
            writes_limit: Family::default(),
        };
        registry.register_with_unit(
            "kubeplug_reconcile_duration",
            "How long each plugin call took (the wasm call, not its actions)",
            Unit::Seconds,
            metrics.duration.clone(),
        );
        registry.register(
            "kubeplug_reconcile",
            "Reconciles by plugin and result (success, error, timeout, oom, panic, trap, invalid-output, api-error...)",
            metrics.total.clone(),
        );
        registry.register(
            "kubeplug_write_conflicts",
            "Fenced writes refused with 409 Conflict: the object had moved past the version the plugin decided on",
            metrics.conflicts.clone(),
        );
        registry.register(
            "kubeplug_cache_objects",
            "Objects in each watched kind's cache",
            metrics.cache_objects.clone(),
        );
        registry.register(
            "kubeplug_writes_in_flight",
            "Calls of each plugin whose writes are at the API server now",
            metrics.writes_in_flight.clone(),
        );
        registry.register(
            "kubeplug_writes_in_flight_limit",
            "Each plugin's adaptive limit of calls with writes in flight (grows while the API server answers fast, halves on 429/5xx)",
            metrics.writes_limit.clone(),
        );
        metrics
    }

    /// Records one plugin call's duration.
    pub fn observe_call(&self, plugin: &str, elapsed: Duration) {
        self.duration
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one reconcile's result.
    pub fn count(&self, plugin: &str, result: ReconcileResult) {
        self.total
            .get_or_create(&result_labels(plugin, result))
            .inc();
    }

    /// Creates the counters of a plugin that just started at 0 (its write conflicts), so
    /// the series is there before its first conflict: dashboards and rules see 0, and
    /// `rate()` sees the first increment.
    pub fn start_plugin(&self, plugin: &str) {
        drop(self.conflicts.get_or_create(&PluginLabels {
            plugin: plugin.to_owned(),
        }));
    }

    /// Counts one fenced write of `plugin` refused with 409 Conflict.
    pub fn count_conflict(&self, plugin: &str) {
        self.conflicts
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    /// What `plugin` has run so far.
    pub fn counts(&self, plugin: &str) -> ReconcileCounts {
        let mut counts = ReconcileCounts::default();
        for result in ReconcileResult::ALL {
            if let Some(c) = self.total.get(&result_labels(plugin, result)) {
                let n = c.get();
                counts.total += n;
                if result != ReconcileResult::Success {
                    counts.errors += n;
                }
            }
        }
        counts
    }

    /// Removes the series of `plugin`, so a removed plugin stops being reported.
    pub fn remove_plugin(&self, plugin: &str) {
        let labels = PluginLabels {
            plugin: plugin.to_owned(),
        };
        self.duration.remove(&labels);
        self.conflicts.remove(&labels);
        for result in ReconcileResult::ALL {
            self.total.remove(&result_labels(plugin, result));
        }
    }

    /// Sets the cache gauges to `counts` (kind, objects); kinds no longer watched disappear.
    pub fn set_cache_objects(&self, counts: impl IntoIterator<Item = (String, usize)>) {
        self.cache_objects.clear();
        for (kind, objects) in counts {
            self.cache_objects
                .get_or_create(&KindLabels { kind })
                .set(i64::try_from(objects).unwrap_or(i64::MAX));
        }
    }
}

impl ReconcileMetrics {
    /// Sets the write gauges to `writes` (plugin, calls with writes in flight, limit);
    /// plugins no longer running disappear.
    pub fn set_writes(&self, writes: impl IntoIterator<Item = (String, usize, usize)>) {
        self.writes_in_flight.clear();
        self.writes_limit.clear();
        for (plugin, in_flight, limit) in writes {
            let labels = PluginLabels { plugin };
            let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            self.writes_in_flight
                .get_or_create(&labels)
                .set(gauge(in_flight));
            self.writes_limit.get_or_create(&labels).set(gauge(limit));
        }
    }
}

fn result_labels(plugin: &str, result: ReconcileResult) -> ResultLabels {
    ResultLabels {
        plugin: plugin.to_owned(),
        result: result.as_str().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricsRegistry;

    fn setup() -> (MetricsRegistry, ReconcileMetrics) {
        let registry = MetricsRegistry::default();
        let mut metrics = None;
        registry.register(|r| metrics = Some(ReconcileMetrics::new(r)));
        (registry, metrics.expect("registered"))
    }

    #[test]
    fn counts_results_and_durations_per_plugin_and_forgets_removed_plugins() {
        let (registry, m) = setup();
        m.count("a", ReconcileResult::Success);
        m.count("a", ReconcileResult::Success);
        m.count(
            "a",
            ReconcileResult::of_call(&CallError::Timeout {
                limit: Duration::from_secs(1),
            }),
        );
        m.count(
            "b",
            ReconcileResult::of_call(&CallError::Transient("x".into())),
        );
        m.observe_call("a", Duration::from_millis(3));
        m.count_conflict("a");
        let text = registry.encode();
        for line in [
            "kubeplug_write_conflicts_total{plugin=\"a\"} 1",
            "kubeplug_reconcile_total{plugin=\"a\",result=\"success\"} 2",
            "kubeplug_reconcile_total{plugin=\"a\",result=\"timeout\"} 1",
            "kubeplug_reconcile_total{plugin=\"b\",result=\"error\"} 1",
            "kubeplug_reconcile_duration_seconds_count{plugin=\"a\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert_eq!(
            m.counts("a"),
            ReconcileCounts {
                total: 3,
                errors: 1
            }
        );
        m.remove_plugin("a");
        let text = registry.encode();
        assert!(!text.contains("plugin=\"a\""), "{text}");
        assert!(text.contains("plugin=\"b\""), "{text}");
        assert_eq!(m.counts("a"), ReconcileCounts::default());
    }

    #[test]
    fn a_started_plugin_has_its_conflicts_at_zero_until_removed() {
        let (registry, m) = setup();
        m.start_plugin("a");
        let text = registry.encode();
        assert!(
            text.contains("kubeplug_write_conflicts_total{plugin=\"a\"} 0"),
            "{text}"
        );
        m.count_conflict("a");
        m.start_plugin("a");
        let text = registry.encode();
        assert!(
            text.contains("kubeplug_write_conflicts_total{plugin=\"a\"} 1"),
            "starting again does not reset it: {text}"
        );
        m.remove_plugin("a");
        assert!(!registry.encode().contains("plugin=\"a\""));
    }

    #[test]
    fn cache_gauges_follow_the_watched_kinds() {
        let (registry, m) = setup();
        m.set_cache_objects([
            ("apps/v1/Deployment".to_string(), 3),
            ("v1/Pod".to_string(), 0),
        ]);
        m.set_cache_objects([("apps/v1/Deployment".to_string(), 4)]);
        let text = registry.encode();
        assert!(
            text.contains("kubeplug_cache_objects{kind=\"apps/v1/Deployment\"} 4"),
            "{text}"
        );
        assert!(!text.contains("v1/Pod"), "{text}");
    }
}
