//! Workqueue metrics under the names client-go exports (`workqueue_*`), one series per queue
//! labelled `name`, in `prometheus-client` families shared by all queues of a registry.
//!
//! Deliberate difference: `workqueue_retries_total` counts `add_rate_limited` calls only;
//! client-go also counts every `AddAfter`, which here is a requested requeue, not a retry.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The label set of every workqueue series: the queue's (plugin's) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct QueueLabels {
    /// Name of the queue, which is the name of the plugin it feeds.
    pub name: String,
}

type SecondsGauge = Gauge<f64, AtomicU64>;
type DurationFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// Upper bounds of client-go's duration histograms (`ExponentialBuckets(10e-9, 10, 10)`),
/// written out so the `le` labels are exact decimals.
const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The workqueue metric families. Create once per registry and pass to every queue; clones
/// share the same families.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: DurationFamily,
    work_duration: DurationFamily,
    unfinished_work: Family<QueueLabels, SecondsGauge>,
    longest_running: Family<QueueLabels, SecondsGauge>,
}

impl Default for QueueMetrics {
    /// Families that are recorded but not exported (for queues nobody scrapes, and tests).
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        }
    }
}

impl QueueMetrics {
    /// Creates the families and registers them in `registry` (once per registry).
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            metrics.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            metrics.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            metrics.retries.clone(),
        );
        registry.register_with_unit(
            "workqueue_queue_duration",
            "How long in seconds an item stays in workqueue before being requested",
            Unit::Seconds,
            metrics.queue_duration.clone(),
        );
        registry.register_with_unit(
            "workqueue_work_duration",
            "How long in seconds processing an item from workqueue takes",
            Unit::Seconds,
            metrics.work_duration.clone(),
        );
        registry.register_with_unit(
            "workqueue_unfinished_work",
            "How many seconds of work has been done that is in progress and hasn't been \
             observed by work_duration; large values indicate stuck workers",
            Unit::Seconds,
            metrics.unfinished_work.clone(),
        );
        registry.register_with_unit(
            "workqueue_longest_running_processor",
            "How many seconds has the longest running processor for workqueue been running",
            Unit::Seconds,
            metrics.longest_running.clone(),
        );
        metrics
    }

    /// The series of one queue; queues with the same name share them.
    pub(super) fn for_queue(&self, name: &str) -> QueueInstruments {
        let labels = QueueLabels {
            name: name.to_owned(),
        };
        QueueInstruments {
            depth: self.depth.get_or_create_owned(&labels),
            adds: self.adds.get_or_create_owned(&labels),
            retries: self.retries.get_or_create_owned(&labels),
            queue_duration: self.queue_duration.get_or_create_owned(&labels),
            work_duration: self.work_duration.get_or_create_owned(&labels),
            unfinished_work: self.unfinished_work.get_or_create_owned(&labels),
            longest_running: self.longest_running.get_or_create_owned(&labels),
        }
    }

    /// Removes the series of queue `name` from every family, so an unloaded plugin stops being
    /// reported. Call only once no queue of that name is in use any more.
    pub fn remove_queue(&self, name: &str) {
        let labels = QueueLabels {
            name: name.to_owned(),
        };
        self.depth.remove(&labels);
        self.adds.remove(&labels);
        self.retries.remove(&labels);
        self.queue_duration.remove(&labels);
        self.work_duration.remove(&labels);
        self.unfinished_work.remove(&labels);
        self.longest_running.remove(&labels);
    }
}

/// Handles to one queue's series, updated without touching the family maps.
#[derive(Debug, Clone)]
pub(super) struct QueueInstruments {
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished_work: SecondsGauge,
    longest_running: SecondsGauge,
}

impl QueueInstruments {
    /// A key entered the queue (was not already waiting in it).
    pub(super) fn added(&self) {
        self.adds.inc();
    }

    /// A failed key was requeued through the rate limiter.
    pub(super) fn retried(&self) {
        self.retries.inc();
    }

    /// Keys waiting to be handed out, including those re-added while being processed.
    pub(super) fn set_depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Time a key waited between its add and its hand-out.
    pub(super) fn observe_queue_duration(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// Time a worker held a key between hand-out and done.
    pub(super) fn observe_work_duration(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    /// Sum and maximum of the ages of the keys currently being processed.
    pub(super) fn set_in_flight(&self, total: Duration, longest: Duration) {
        self.unfinished_work.set(total.as_secs_f64());
        self.longest_running.set(longest.as_secs_f64());
    }
}

#[cfg(test)]
pub(super) mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    /// The registry in text form.
    pub(in crate::queue) fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).expect("encoding to a String cannot fail");
        text
    }

    /// Value of the sample whose name and labels are exactly `series`, if exported.
    pub(in crate::queue) fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
    }

    #[test]
    fn exports_client_go_names_per_queue() {
        let mut registry = Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        let a = metrics.for_queue("a");
        let b = metrics.clone().for_queue("b");
        a.added();
        a.added();
        b.added();
        a.retried();
        a.set_depth(3);
        a.observe_queue_duration(Duration::from_millis(2));
        a.observe_work_duration(Duration::from_secs(20));
        a.set_in_flight(Duration::from_millis(1500), Duration::from_secs(1));

        let text = scrape(&registry);
        let expected = [
            ("workqueue_adds_total{name=\"a\"}", 2.0),
            ("workqueue_adds_total{name=\"b\"}", 1.0),
            ("workqueue_retries_total{name=\"a\"}", 1.0),
            ("workqueue_depth{name=\"a\"}", 3.0),
            ("workqueue_queue_duration_seconds_count{name=\"a\"}", 1.0),
            (
                "workqueue_queue_duration_seconds_bucket{le=\"0.001\",name=\"a\"}",
                0.0,
            ),
            (
                "workqueue_queue_duration_seconds_bucket{le=\"0.01\",name=\"a\"}",
                1.0,
            ),
            (
                "workqueue_work_duration_seconds_bucket{le=\"10.0\",name=\"a\"}",
                0.0,
            ),
            (
                "workqueue_work_duration_seconds_bucket{le=\"+Inf\",name=\"a\"}",
                1.0,
            ),
            ("workqueue_unfinished_work_seconds{name=\"a\"}", 1.5),
            (
                "workqueue_longest_running_processor_seconds{name=\"a\"}",
                1.0,
            ),
        ];
        for (series, value) in expected {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(
            text.contains("le=\"1e-8\"") || text.contains("le=\"1.0e-8\""),
            "{text}"
        );
    }

    #[test]
    fn remove_queue_drops_its_series_only() {
        let mut registry = Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        metrics.for_queue("gone").added();
        metrics.for_queue("kept").added();
        metrics.remove_queue("gone");
        let text = scrape(&registry);
        assert_eq!(sample(&text, "workqueue_adds_total{name=\"gone\"}"), None);
        assert_eq!(
            sample(&text, "workqueue_adds_total{name=\"kept\"}"),
            Some(1.0)
        );
    }
}
