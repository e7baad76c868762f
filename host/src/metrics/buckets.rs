//! A histogram with fixed bounds whose buckets can be read back, so several plugins' can be
//! summed into one namespace's (`prometheus_client`'s histogram does not show its buckets).

use std::sync::atomic::{AtomicU64, Ordering};

/// Observations counted per bucket (non-cumulative), with their sum.
#[derive(Debug)]
pub struct BucketHistogram {
    /// Upper bounds, ascending, without `+Inf`.
    bounds: &'static [f64],
    /// One count per bound, then the `+Inf` bucket's.
    counts: Box<[AtomicU64]>,
    /// The sum of the observations, as `f64` bits.
    sum: AtomicU64,
}

/// A histogram's state: sum, count, and (upper bound, count in that bucket alone) per
/// bucket, `+Inf` last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramValue {
    /// The sum of the observations.
    pub sum: f64,
    /// How many observations.
    pub count: u64,
    /// Each bucket's own count, by upper bound.
    pub buckets: Vec<(f64, u64)>,
}

impl HistogramValue {
    /// Adds `other` (of the same bounds) to this one; an empty value takes `other`'s.
    pub fn add(&mut self, other: &HistogramValue) {
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        self.sum += other.sum;
        self.count += other.count;
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            mine.1 += theirs.1;
        }
    }
}

impl BucketHistogram {
    /// A histogram of upper bounds `bounds` (ascending; `+Inf` is added).
    pub fn new(bounds: &'static [f64]) -> Self {
        BucketHistogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Counts `v` in the first bucket whose bound is at least `v`.
    pub fn observe(&self, v: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// The state now (the count is the buckets' sum, so it always matches `+Inf`).
    pub fn value(&self) -> HistogramValue {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        HistogramValue {
            sum: f64::from_bits(self.sum.load(Ordering::Relaxed)),
            count: buckets.iter().map(|b| b.1).sum(),
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_values_add() {
        let h = BucketHistogram::new(&[0.1, 1.0]);
        h.observe(0.1);
        h.observe(0.5);
        h.observe(20.0);
        let v = h.value();
        assert_eq!(v.buckets, vec![(0.1, 1), (1.0, 1), (f64::INFINITY, 1)]);
        assert_eq!(v.count, 3);
        assert!((v.sum - 20.6).abs() < 1e-9, "{}", v.sum);
        let mut total = HistogramValue::default();
        total.add(&v);
        total.add(&v);
        assert_eq!(total.buckets[2], (f64::INFINITY, 2));
        assert_eq!(total.count, 6);
    }
}
