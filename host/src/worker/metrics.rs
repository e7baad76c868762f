//! Reconcile metrics: how long each plugin call takes (`kubeplug_reconcile_duration_seconds`,
//! per plugin), how each reconcile ended (`kubeplug_reconcile_total{plugin,result}`), fenced
//! writes refused because the object had moved on (`kubeplug_write_conflicts_total{plugin}`),
//! the objects each watch's cache holds (`kubeplug_cache_objects{kind}`), and each plugin's
//! calls with writes in flight and their adaptive limit (`kubeplug_writes_in_flight{plugin}`,
//! `kubeplug_writes_in_flight_limit{plugin}`, read at scrape time).

use crate::actions::CallFailure;
use crate::metrics::{BucketHistogram, NoLabels, PluginFamily, SeriesLimit};
use crate::plugin::CallError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
    /// Every result, for summing a plugin's counts.
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

/// The label `kubeplug_reconcile_total` has beside the plugin's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

fn call_histogram() -> BucketHistogram {
    BucketHistogram::new(&CALL_BUCKETS)
}

/// The reconcile and cache metric families; clones share them. Those labelled by plugin
/// are summed per namespace past the registry's [`SeriesLimit`].
#[derive(Debug, Clone)]
pub struct ReconcileMetrics {
    duration: PluginFamily<NoLabels, BucketHistogram>,
    total: PluginFamily<ResultLabels, Counter>,
    conflicts: PluginFamily<NoLabels, Counter>,
    cache_objects: Family<KindLabels, Gauge>,
    writes_in_flight: PluginFamily<NoLabels, Gauge>,
    writes_limit: PluginFamily<NoLabels, Gauge>,
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
    /// Creates the families and registers them in `registry` (once per registry), those
    /// labelled by plugin following `limit`.
    pub fn new(registry: &mut Registry, limit: &SeriesLimit) -> Self {
        let metrics = ReconcileMetrics {
            duration: PluginFamily::new("plugin", call_histogram),
            total: PluginFamily::new("plugin", Counter::default),
            conflicts: PluginFamily::new("plugin", Counter::default),
            cache_objects: Family::default(),
            writes_in_flight: PluginFamily::new("plugin", Gauge::default),
            writes_limit: PluginFamily::new("plugin", Gauge::default),
        };
        metrics.duration.limit_by(limit);
        metrics.total.limit_by(limit);
        metrics.conflicts.limit_by(limit);
        metrics.writes_in_flight.limit_by(limit);
        metrics.writes_limit.limit_by(limit);
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
            .get_or_create(plugin, &NoLabels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one reconcile's result.
    pub fn count(&self, plugin: &str, result: ReconcileResult) {
        self.total
            .get_or_create(plugin, &ResultLabels::of(result))
            .inc();
    }

    /// Creates the counters of a plugin that just started at 0 (its write conflicts), so
    /// the series is there before its first conflict: dashboards and rules see 0, and
    /// `rate()` sees the first increment.
    pub fn start_plugin(&self, plugin: &str) {
        drop(self.conflicts.get_or_create(plugin, &NoLabels));
    }

    /// Counts one fenced write of `plugin` refused with 409 Conflict.
    pub fn count_conflict(&self, plugin: &str) {
        self.conflicts.get_or_create(plugin, &NoLabels).inc();
    }

    /// What `plugin` has run so far.
    pub fn counts(&self, plugin: &str) -> ReconcileCounts {
        let mut counts = ReconcileCounts::default();
        for result in ReconcileResult::ALL {
            if let Some(c) = self.total.get(plugin, &ResultLabels::of(result)) {
                let n = c.get();
                counts.total += n;
                if result != ReconcileResult::Success {
                    counts.errors += n;
                }
            }
        }
        counts
    }

    /// Removes the series of `plugin`, so a removed plugin stops being reported (its
    /// counts stay in its namespace's sum, see [`PluginFamily::remove`]).
    pub fn remove_plugin(&self, plugin: &str) {
        self.duration.remove(plugin);
        self.conflicts.remove(plugin);
        self.total.remove(plugin);
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
            let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            self.writes_in_flight
                .get_or_create(&plugin, &NoLabels)
                .set(gauge(in_flight));
            self.writes_limit
                .get_or_create(&plugin, &NoLabels)
                .set(gauge(limit));
        }
    }
}

impl ResultLabels {
    fn of(result: ReconcileResult) -> Self {
        ResultLabels {
            result: result.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricsRegistry;

    fn setup() -> (MetricsRegistry, ReconcileMetrics) {
        let registry = MetricsRegistry::default();
        let mut metrics = None;
        let limit = registry.series_limit().clone();
        registry.register(|r| metrics = Some(ReconcileMetrics::new(r, &limit)));
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
    fn a_thousand_plugins_in_ten_namespaces_make_ten_series_per_family() {
        let registry = MetricsRegistry::with_per_plugin_limit(100);
        let limit = registry.series_limit().clone();
        let mut metrics = None;
        registry.register(|r| metrics = Some(ReconcileMetrics::new(r, &limit)));
        let m = metrics.expect("registered");
        let plugins: Vec<String> = (0..1000).map(|i| format!("ns-{}/p-{i}", i % 10)).collect();
        for plugin in &plugins {
            limit.started(plugin);
            m.start_plugin(plugin);
            m.count(plugin, ReconcileResult::Success);
            m.observe_call(plugin, Duration::from_millis(1));
        }
        m.set_writes(plugins.iter().map(|p| (p.clone(), 1, 4)));
        let text = registry.encode();
        let series = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count()
        };
        for name in [
            "kubeplug_reconcile_total",
            "kubeplug_reconcile_duration_seconds_count",
            "kubeplug_write_conflicts_total",
            "kubeplug_writes_in_flight",
            "kubeplug_writes_in_flight_limit",
        ] {
            assert_eq!(series(name), 10, "{name} in\n{text}");
        }
        for line in [
            "kubeplug_reconcile_total{plugin=\"ns-3/*\",result=\"success\"} 100",
            "kubeplug_writes_in_flight_limit{plugin=\"ns-3/*\"} 400",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert_eq!(
            m.counts("ns-3/p-3"),
            ReconcileCounts {
                total: 1,
                errors: 0
            },
            "the host still reads each plugin's own counts"
        );
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
