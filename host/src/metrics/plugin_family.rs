//! A metric family labelled by plugin (plus labels of its own) whose series are exported
//! per plugin, or summed per namespace past the [`SeriesLimit`]: recorded per plugin always
//! (the host reads its own counts per plugin), summed only when encoded.
//!
//! Counters and histograms stay monotonic for a scraper: a namespace's series also carries
//! what its plugins that stopped had counted (kept while the namespace has a plugin
//! running), so a plugin going away never takes its counts out of the sum. A series that
//! switches form is a new series to Prometheus (the old one goes stale), never a counter
//! going backwards within one series.

use super::buckets::{BucketHistogram, HistogramValue};
use super::series_limit::{SeriesLimit, namespace_label, namespace_of};
use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// A kind of series a [`PluginFamily`] holds: read as a value that can be summed and encoded.
pub trait PluginMetric: std::fmt::Debug + Send + Sync + 'static {
    /// The series' state at one moment.
    type Value: Clone + std::fmt::Debug + Send;
    /// The OpenMetrics type.
    const TYPE: MetricType;
    /// Whether the value only grows (counters, histograms): a stopped plugin's is kept in
    /// its namespace's sum.
    const CUMULATIVE: bool;
    /// The state now.
    fn value(&self) -> Self::Value;
    /// Adds `other` to `into`.
    fn sum(into: &mut Self::Value, other: &Self::Value);
    /// Writes `value` as one series.
    fn encode_value(value: &Self::Value, encoder: MetricEncoder) -> std::fmt::Result;
}

impl PluginMetric for Counter {
    type Value = u64;
    const TYPE: MetricType = MetricType::Counter;
    const CUMULATIVE: bool = true;
    fn value(&self) -> u64 {
        self.get()
    }
    fn sum(into: &mut u64, other: &u64) {
        *into += other;
    }
    fn encode_value(value: &u64, encoder: MetricEncoder) -> std::fmt::Result {
        ConstCounter::new(*value).encode(encoder)
    }
}

impl PluginMetric for Gauge {
    type Value = i64;
    const TYPE: MetricType = MetricType::Gauge;
    const CUMULATIVE: bool = false;
    fn value(&self) -> i64 {
        self.get()
    }
    fn sum(into: &mut i64, other: &i64) {
        *into = into.saturating_add(*other);
    }
    fn encode_value(value: &i64, encoder: MetricEncoder) -> std::fmt::Result {
        ConstGauge::new(*value).encode(encoder)
    }
}

impl PluginMetric for Gauge<f64, AtomicU64> {
    type Value = f64;
    const TYPE: MetricType = MetricType::Gauge;
    const CUMULATIVE: bool = false;
    fn value(&self) -> f64 {
        self.get()
    }
    fn sum(into: &mut f64, other: &f64) {
        *into += other;
    }
    fn encode_value(value: &f64, encoder: MetricEncoder) -> std::fmt::Result {
        ConstGauge::new(*value).encode(encoder)
    }
}

impl PluginMetric for BucketHistogram {
    type Value = HistogramValue;
    const TYPE: MetricType = MetricType::Histogram;
    const CUMULATIVE: bool = true;
    fn value(&self) -> HistogramValue {
        BucketHistogram::value(self)
    }
    fn sum(into: &mut HistogramValue, other: &HistogramValue) {
        into.add(other);
    }
    fn encode_value(value: &HistogramValue, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(value.sum, value.count, &value.buckets, None)
    }
}

/// The label set of a family with no label but the plugin's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut LabelSetEncoder) -> std::fmt::Result {
        Ok(())
    }
}

/// The plugin's label (or its namespace's), then the family's own.
struct Labels<'a, L> {
    key: &'static str,
    plugin: &'a str,
    rest: &'a L,
}

impl<L: EncodeLabelSet> EncodeLabelSet for Labels<'_, L> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        (self.key, self.plugin).encode(encoder.encode_label())?;
        self.rest.encode(encoder)
    }
}

/// Series by plugin, then by the family's own labels.
type ByPlugin<L, M> = HashMap<String, HashMap<L, Arc<M>>>;
/// Summed values by namespace, then by the family's own labels.
type ByNamespace<L, V> = HashMap<String, HashMap<L, V>>;

/// Series per plugin of one metric, with label sets `L` beside the plugin's; clones share
/// them. Until [`limit_by`](Self::limit_by) every series is exported per plugin.
#[derive(Debug)]
pub struct PluginFamily<L, M: PluginMetric> {
    inner: Arc<Inner<L, M>>,
}

impl<L, M: PluginMetric> Clone for PluginFamily<L, M> {
    fn clone(&self) -> Self {
        PluginFamily {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Inner<L, M: PluginMetric> {
    /// The plugin's label name (`plugin`; `name` for client-go's workqueue metrics).
    key: &'static str,
    new: fn() -> M,
    /// How two plugins' values make their namespace's (a sum; a maximum for a "longest").
    merge: fn(&mut M::Value, &M::Value),
    limit: OnceLock<SeriesLimit>,
    series: RwLock<ByPlugin<L, M>>,
    /// What stopped plugins had counted, per namespace (cumulative metrics only).
    retired: Mutex<ByNamespace<L, M::Value>>,
}

impl<L, M> PluginFamily<L, M>
where
    L: Clone + Eq + Hash + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    M: PluginMetric,
{
    /// A family whose plugin label is `key`, new series made by `new`, summed per namespace.
    pub fn new(key: &'static str, new: fn() -> M) -> Self {
        Self::with_merge(key, new, M::sum)
    }

    /// A family whose namespaces' values are made with `merge` (e.g. a maximum).
    pub fn with_merge(
        key: &'static str,
        new: fn() -> M,
        merge: fn(&mut M::Value, &M::Value),
    ) -> Self {
        PluginFamily {
            inner: Arc::new(Inner {
                key,
                new,
                merge,
                limit: OnceLock::new(),
                series: RwLock::new(HashMap::new()),
                retired: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Exports per namespace past `limit` from now on (the first limit given stays).
    pub fn limit_by(&self, limit: &SeriesLimit) {
        let _ = self.inner.limit.set(limit.clone());
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ByPlugin<L, M>> {
        self.inner.series.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ByPlugin<L, M>> {
        self.inner.series.write().unwrap_or_else(|p| p.into_inner())
    }

    fn retired(&self) -> std::sync::MutexGuard<'_, ByNamespace<L, M::Value>> {
        self.inner.retired.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The series of `plugin` with `labels`, created if new.
    pub fn get_or_create(&self, plugin: &str, labels: &L) -> Arc<M> {
        if let Some(m) = self.get(plugin, labels) {
            return m;
        }
        let mut series = self.write();
        let by_labels = series.entry(plugin.to_string()).or_default();
        by_labels
            .entry(labels.clone())
            .or_insert_with(|| Arc::new((self.inner.new)()))
            .clone()
    }

    /// The series of `plugin` with `labels`, if it exists.
    pub fn get(&self, plugin: &str, labels: &L) -> Option<Arc<M>> {
        self.read().get(plugin)?.get(labels).cloned()
    }

    /// Removes every series of `plugin`. A counter's or histogram's value stays in its
    /// namespace's sum while a plugin of that namespace runs.
    pub fn remove(&self, plugin: &str) {
        let Some(removed) = self.write().remove(plugin) else {
            return;
        };
        let Some(ns) = namespace_of(plugin).filter(|_| M::CUMULATIVE) else {
            return;
        };
        let mut retired = self.retired();
        match self.inner.limit.get() {
            Some(limit) if limit.namespace_runs(ns) => {
                let kept = retired.entry(ns.to_string()).or_default();
                for (labels, m) in removed {
                    let value = m.value();
                    match kept.get_mut(&labels) {
                        Some(sum) => M::sum(sum, &value),
                        None => {
                            kept.insert(labels, value);
                        }
                    }
                }
            }
            _ => {
                retired.remove(ns);
            }
        }
    }

    /// Removes every series (gauges set afresh at each scrape).
    pub fn clear(&self) {
        self.write().clear();
        self.retired().clear();
    }

    /// Encodes the series of every plugin as its own.
    fn encode_per_plugin(&self, encoder: &mut MetricEncoder) -> std::fmt::Result {
        for (plugin, by_labels) in self.read().iter() {
            self.encode_all(
                encoder,
                plugin,
                by_labels.iter().map(|(l, m)| (l, m.value())),
            )?;
        }
        Ok(())
    }

    fn encode_all<'l>(
        &self,
        encoder: &mut MetricEncoder,
        plugin: &str,
        values: impl Iterator<Item = (&'l L, M::Value)>,
    ) -> std::fmt::Result {
        for (rest, value) in values {
            let labels = Labels {
                key: self.inner.key,
                plugin,
                rest,
            };
            M::encode_value(&value, encoder.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// Encodes plugin files' series as their own and namespaced ones summed per namespace.
    fn encode_per_namespace(
        &self,
        encoder: &mut MetricEncoder,
        limit: &SeriesLimit,
    ) -> std::fmt::Result {
        let mut namespaces: ByNamespace<L, M::Value> = HashMap::new();
        for (plugin, by_labels) in self.read().iter() {
            let values = by_labels.iter().map(|(l, m)| (l, m.value()));
            match namespace_of(plugin) {
                None => self.encode_all(encoder, plugin, values)?,
                Some(ns) => {
                    let summed = namespaces.entry(ns.to_string()).or_default();
                    for (labels, value) in values {
                        match summed.get_mut(labels) {
                            Some(sum) => (self.inner.merge)(sum, &value),
                            None => {
                                summed.insert(labels.clone(), value);
                            }
                        }
                    }
                }
            }
        }
        if M::CUMULATIVE {
            let mut retired = self.retired();
            retired.retain(|ns, _| limit.namespace_runs(ns));
            for (ns, kept) in retired.iter() {
                let summed = namespaces.entry(ns.clone()).or_default();
                for (labels, value) in kept {
                    match summed.get_mut(labels) {
                        Some(sum) => M::sum(sum, value),
                        None => {
                            summed.insert(labels.clone(), value.clone());
                        }
                    }
                }
            }
        }
        for (ns, summed) in namespaces {
            let label = namespace_label(&ns);
            self.encode_all(encoder, &label, summed.iter().map(|(l, v)| (l, v.clone())))?;
        }
        Ok(())
    }
}

impl<L, M> TypedMetric for PluginFamily<L, M>
where
    M: PluginMetric,
{
    const TYPE: MetricType = M::TYPE;
}

impl<L, M> EncodeMetric for PluginFamily<L, M>
where
    L: Clone + Eq + Hash + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    M: PluginMetric,
{
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        match self.inner.limit.get().filter(|l| l.aggregated()) {
            Some(limit) => self.encode_per_namespace(&mut encoder, limit),
            None => self.encode_per_plugin(&mut encoder),
        }
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        self.read().is_empty() && self.retired().is_empty()
    }
}

#[cfg(test)]
mod tests;
