//! A plugin's write budget: a token bucket of API writes per second with a burst. A write
//! beyond the budget waits for a token (it is never dropped); each plugin has its own
//! bucket, awaited in that plugin's workers, so a busy plugin never slows another.

use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Writes per second and burst when a policy does not say.
pub const DEFAULT_WRITES_PER_SECOND: f64 = 5.0;
/// See [`DEFAULT_WRITES_PER_SECOND`].
pub const DEFAULT_WRITE_BURST: u32 = 10;
/// The largest burst a policy may set.
pub const MAX_WRITE_BURST: u32 = 100_000;

/// A write rate the host refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteRateError {
    /// The sustained rate is zero, negative, infinite or not a number.
    #[error("{0} is not a positive number")]
    Rate(f64),
    /// The burst is outside its range.
    #[error("{0} is not between 1 and {MAX_WRITE_BURST}")]
    Burst(u32),
}

/// The rate of a write budget, checked when built: sustained writes per second (positive
/// and finite, or [`UNLIMITED`](Self::UNLIMITED)) and the burst above it (1 to
/// [`MAX_WRITE_BURST`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteRate {
    pub(super) per_second: f64,
    pub(super) burst: u32,
}

impl WriteRate {
    /// No budget: writes never wait (trusted, single-tenant hosts and tests).
    pub const UNLIMITED: WriteRate = WriteRate {
        per_second: f64::INFINITY,
        burst: DEFAULT_WRITE_BURST,
    };

    /// `per_second` sustained writes with a burst of `burst`, checked.
    pub fn new(per_second: f64, burst: u32) -> Result<Self, WriteRateError> {
        if !(1..=MAX_WRITE_BURST).contains(&burst) {
            return Err(WriteRateError::Burst(burst));
        }
        if !(per_second > 0.0 && per_second.is_finite()) {
            return Err(WriteRateError::Rate(per_second));
        }
        Ok(WriteRate { per_second, burst })
    }

    /// Sustained writes per second.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Writes allowed at once above the sustained rate.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// A fresh, full budget at this rate.
    pub fn budget(&self) -> WriteBudget {
        WriteBudget::new(self.per_second, self.burst)
    }
}

impl Default for WriteRate {
    /// [`DEFAULT_WRITES_PER_SECOND`] with a burst of [`DEFAULT_WRITE_BURST`].
    fn default() -> Self {
        WriteRate {
            per_second: DEFAULT_WRITES_PER_SECOND,
            burst: DEFAULT_WRITE_BURST,
        }
    }
}

/// An async token bucket.
#[derive(Debug)]
pub struct WriteBudget {
    rate: f64,
    burst: f64,
    /// Tokens left and when they were counted. Held across the wait so that waiters are
    /// served one after another.
    state: Mutex<(f64, Instant)>,
}

impl WriteBudget {
    /// A full bucket of `burst` tokens refilled at `per_second` (at least one token); an
    /// infinite rate never waits.
    pub fn new(per_second: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        WriteBudget {
            rate: per_second,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes one token, waiting until one is available; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        if self.rate.is_infinite() {
            return Duration::ZERO;
        }
        let start = Instant::now();
        let mut state = self.state.lock().await;
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.rate).min(self.burst);
        *last = now;
        if *tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - *tokens) / self.rate);
            tokio::time::sleep(wait).await;
            *tokens = 1.0;
            *last = now + wait;
        }
        *tokens -= 1.0;
        start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_write_rate_is_checked_when_built() {
        let at_cap = WriteRate::new(0.5, MAX_WRITE_BURST).unwrap();
        assert_eq!((at_cap.per_second(), at_cap.burst()), (0.5, 100_000));
        assert_eq!(
            WriteRate::new(1.0, MAX_WRITE_BURST + 1)
                .unwrap_err()
                .to_string(),
            "100001 is not between 1 and 100000"
        );
        assert!(WriteRate::new(1.0, 0).is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = WriteRate::new(bad, 1).unwrap_err();
            assert!(
                err.to_string().ends_with("is not a positive number"),
                "{err}"
            );
        }
        assert_eq!(
            WriteRate::default(),
            WriteRate::new(DEFAULT_WRITES_PER_SECOND, DEFAULT_WRITE_BURST).unwrap()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn burst_is_free_then_writes_wait_at_the_rate() {
        let b = WriteBudget::new(2.0, 3);
        for _ in 0..3 {
            assert_eq!(b.acquire().await, Duration::ZERO);
        }
        assert_eq!(b.acquire().await, Duration::from_millis(500));
        assert_eq!(b.acquire().await, Duration::from_millis(500));
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Refilled to the burst, no more.
        for _ in 0..3 {
            assert_eq!(b.acquire().await, Duration::ZERO);
        }
        assert_eq!(b.acquire().await, Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_writers_share_one_bucket_and_none_is_dropped() {
        let b = Arc::new(WriteBudget::new(10.0, 1));
        let start = Instant::now();
        let tasks: Vec<_> = (0..21)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.acquire().await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // One from the burst, twenty at 10/s.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_infinite_rate_never_waits() {
        let b = WriteBudget::new(f64::INFINITY, 1);
        for _ in 0..100 {
            assert_eq!(b.acquire().await, Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn separate_buckets_do_not_slow_each_other() {
        let busy = WriteBudget::new(1.0, 1);
        let other = WriteBudget::new(1.0, 1);
        busy.acquire().await;
        let slow = busy.acquire();
        let fast = other.acquire();
        let (s, f) = tokio::join!(slow, fast);
        assert_eq!((s, f), (Duration::from_secs(1), Duration::ZERO));
    }
}
