//! Workqueue metrics under the names client-go exports (`workqueue_*`), one series per queue
//! labelled `name` (summed per namespace past the series limit: `name="ns/*"`), in families
//! shared by all queues of a registry.
//!
//! Deliberate difference: `workqueue_retries_total` counts `add_rate_limited` calls only;
//! client-go also counts every `AddAfter`, which here is a requested requeue, not a retry.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::metrics::{BucketHistogram, NoLabels, PluginFamily, SeriesLimit};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The label every workqueue series is labelled by: the queue's (plugin's) name, or
/// `ns/*` for a namespace's queues summed past the series limit.
const QUEUE_LABEL: &str = "name";

type SecondsGauge = Gauge<f64, AtomicU64>;
type Queues<M> = PluginFamily<NoLabels, M>;

/// Upper bounds of client-go's duration histograms (`ExponentialBuckets(10e-9, 10, 10)`),
/// written out so the `le` labels are exact decimals.
const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

fn duration_histogram() -> BucketHistogram {
    BucketHistogram::new(&DURATION_BUCKETS)
}

/// The longer of two "longest running" values: a namespace's is its longest queue's.
fn longest(into: &mut f64, other: &f64) {
    *into = into.max(*other);
}

/// The workqueue metric families. Create once per registry and pass to every queue; clones
/// share the same families. Past the registry's [`SeriesLimit`], namespaced queues are
/// exported summed per namespace (`workqueue_longest_running_processor_seconds`: the
/// longest of them).
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    depth: Queues<Gauge>,
    adds: Queues<Counter>,
    retries: Queues<Counter>,
    queue_duration: Queues<BucketHistogram>,
    work_duration: Queues<BucketHistogram>,
    unfinished_work: Queues<SecondsGauge>,
    longest_running: Queues<SecondsGauge>,
}

impl Default for QueueMetrics {
    /// Families that are recorded but not exported (for queues nobody scrapes, and tests).
    fn default() -> Self {
        Self {
            depth: PluginFamily::new(QUEUE_LABEL, Gauge::default),
            adds: PluginFamily::new(QUEUE_LABEL, Counter::default),
            retries: PluginFamily::new(QUEUE_LABEL, Counter::default),
            queue_duration: PluginFamily::new(QUEUE_LABEL, duration_histogram),
            work_duration: PluginFamily::new(QUEUE_LABEL, duration_histogram),
            unfinished_work: PluginFamily::new(QUEUE_LABEL, SecondsGauge::default),
            longest_running: PluginFamily::with_merge(QUEUE_LABEL, SecondsGauge::default, longest),
        }
    }
}

impl QueueMetrics {
    /// Creates the families and registers them in `registry` (once per registry), following
    /// `limit`.
    pub fn new(registry: &mut Registry, limit: &SeriesLimit) -> Self {
        let metrics = Self::default();
        metrics.depth.limit_by(limit);
        metrics.adds.limit_by(limit);
        metrics.retries.limit_by(limit);
        metrics.queue_duration.limit_by(limit);
        metrics.work_duration.limit_by(limit);
        metrics.unfinished_work.limit_by(limit);
        metrics.longest_running.limit_by(limit);
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
        QueueInstruments {
            depth: self.depth.get_or_create(name, &NoLabels),
            adds: self.adds.get_or_create(name, &NoLabels),
            retries: self.retries.get_or_create(name, &NoLabels),
            queue_duration: self.queue_duration.get_or_create(name, &NoLabels),
            work_duration: self.work_duration.get_or_create(name, &NoLabels),
            unfinished_work: self.unfinished_work.get_or_create(name, &NoLabels),
            longest_running: self.longest_running.get_or_create(name, &NoLabels),
        }
    }

    /// Removes the series of queue `name` from every family, so an unloaded plugin stops being
    /// reported. Call only once no queue of that name is in use any more.
    pub fn remove_queue(&self, name: &str) {
        self.depth.remove(name);
        self.adds.remove(name);
        self.retries.remove(name);
        self.queue_duration.remove(name);
        self.work_duration.remove(name);
        self.unfinished_work.remove(name);
        self.longest_running.remove(name);
    }
}

/// Handles to one queue's series, updated without touching the family maps.
#[derive(Debug, Clone)]
pub(super) struct QueueInstruments {
    depth: Arc<Gauge>,
    adds: Arc<Counter>,
    retries: Arc<Counter>,
    queue_duration: Arc<BucketHistogram>,
    work_duration: Arc<BucketHistogram>,
    unfinished_work: Arc<SecondsGauge>,
    longest_running: Arc<SecondsGauge>,
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
        let metrics = QueueMetrics::new(&mut registry, &SeriesLimit::default());
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
        let metrics = QueueMetrics::new(&mut registry, &SeriesLimit::default());
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
