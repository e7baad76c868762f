//! Retry delays, mirroring client-go's `workqueue` rate limiters: per-key exponential failure
//! backoff, a token bucket shared by all keys (reserving tokens like
//! `rate.Limiter.Reserve().Delay()`), and the max-of combination of both.
//!
//! The bucket reads `tokio::time::Instant`, so tests with paused time control it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::config::{ConfigError, RateLimitConfig};

/// Decides how long a failed key waits before it is retried.
pub trait RateLimiter<K>: Send + Sync {
    /// Delay before the key's next attempt; counts one more failure of the key.
    fn when(&self, key: &K) -> Duration;
    /// Stops tracking the key: its next failure starts from the first delay again.
    fn forget(&self, key: &K);
    /// Failures counted for the key since it was last forgotten.
    fn num_requeues(&self, key: &K) -> u32;
}

use crate::sync::lock;

/// Per-key exponential backoff: `base_delay * 2^failures`, capped at `max_delay`
/// (client-go's `ItemExponentialFailureRateLimiter`).
#[derive(Debug)]
pub struct ItemExponentialRateLimiter<K> {
    base_delay: Duration,
    max_delay: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K> ItemExponentialRateLimiter<K> {
    /// A limiter whose first delay is `base_delay` and whose delays never exceed `max_delay`.
    pub fn new(base_delay: Duration, max_delay: Duration) -> Self {
        Self {
            base_delay,
            max_delay,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `base_delay * 2^exponent`, capped at `max_delay`, without overflow.
    fn backoff(&self, exponent: u32) -> Duration {
        let max = self.max_delay.as_nanos();
        let nanos = if exponent >= 64 {
            u128::MAX
        } else {
            self.base_delay.as_nanos().saturating_mul(1u128 << exponent)
        };
        if nanos >= max {
            return self.max_delay;
        }
        const NANOS_PER_SEC: u128 = 1_000_000_000;
        // `nanos < max`, so both parts fit in a `Duration`.
        Duration::new(
            (nanos / NANOS_PER_SEC) as u64,
            (nanos % NANOS_PER_SEC) as u32,
        )
    }
}

impl<K> RateLimiter<K> for ItemExponentialRateLimiter<K>
where
    K: Clone + Eq + Hash + Send + Sync,
{
    fn when(&self, key: &K) -> Duration {
        let exponent = {
            let mut failures = lock(&self.failures);
            let count = failures.entry(key.clone()).or_insert(0);
            let exponent = *count;
            *count = count.saturating_add(1);
            exponent
        };
        self.backoff(exponent)
    }

    fn forget(&self, key: &K) {
        lock(&self.failures).remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

/// A token bucket shared by all keys: `burst` retries at once, then one every `1/qps` seconds
/// (client-go's `BucketRateLimiter`).
///
/// Every call reserves a token, even when none is left, so a burst of failures is spread out
/// at `qps` instead of all retrying together once the bucket refills. Implemented as a
/// theoretical-arrival-time counter, which gives the same delays as `rate.Limiter.Reserve()`.
#[derive(Debug)]
pub struct BucketRateLimiter {
    interval: Duration,
    burst_window: Duration,
    /// Instant at which the bucket is full again, given the tokens reserved so far.
    full_at: Mutex<Instant>,
}

impl BucketRateLimiter {
    /// A bucket starting full with `burst` tokens, refilled at `qps` tokens per second.
    pub fn new(qps: f64, burst: u32) -> Result<Self, ConfigError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(ConfigError::InvalidQps(qps));
        }
        if burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        let interval =
            Duration::try_from_secs_f64(1.0 / qps).map_err(|_| ConfigError::InvalidQps(qps))?;
        Ok(Self {
            interval,
            burst_window: interval.checked_mul(burst).unwrap_or(Duration::MAX),
            full_at: Mutex::new(Instant::now()),
        })
    }

    /// Takes one token and returns how long until it is available.
    fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut full_at = lock(&self.full_at);
        *full_at = (*full_at).max(now) + self.interval;
        // Tokens left after this reservation are `burst - (full_at - now) / interval`; when that
        // is negative, the caller waits until it climbs back to zero.
        (*full_at - now).saturating_sub(self.burst_window)
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// Combines limiters: the delay is the longest of theirs (client-go's `MaxOfRateLimiter`).
/// Every limiter sees every call, so each keeps its own count.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOfRateLimiter<K> {
    /// Combines the given limiters; with none, every delay is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when(key))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

impl<K> std::fmt::Debug for MaxOfRateLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl RateLimitConfig {
    /// The controller default: max of per-key exponential backoff and the shared bucket
    /// (client-go's `DefaultTypedControllerRateLimiter`, with these settings).
    pub fn build<K>(&self) -> Result<MaxOfRateLimiter<K>, ConfigError>
    where
        K: Clone + Eq + Hash + Send + Sync + 'static,
    {
        Ok(MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialRateLimiter::new(
                self.base_delay,
                self.max_delay,
            )),
            Box::new(BucketRateLimiter::new(self.qps, self.burst)?),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn exponential_doubles_per_failure_and_caps_at_max() {
        let limiter = ItemExponentialRateLimiter::new(ms(5), ms(100));
        let delays: Vec<_> = (0..7).map(|_| limiter.when(&"a")).collect();
        assert_eq!(
            delays,
            [ms(5), ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]
        );
        assert_eq!(limiter.num_requeues(&"a"), 7);
    }

    #[test]
    fn exponential_tracks_keys_separately_and_forget_resets() {
        let limiter = ItemExponentialRateLimiter::new(ms(5), Duration::from_secs(1000));
        assert_eq!(limiter.when(&"a"), ms(5));
        assert_eq!(limiter.when(&"a"), ms(10));
        assert_eq!(limiter.when(&"b"), ms(5));
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.num_requeues(&"b"), 1);
        assert_eq!(limiter.when(&"a"), ms(5));
    }

    #[test]
    fn exponential_saturates_after_many_failures() {
        let limiter = ItemExponentialRateLimiter::new(ms(5), Duration::from_secs(1000));
        let last = (0..200).map(|_| limiter.when(&"a")).last();
        assert_eq!(last, Some(Duration::from_secs(1000)));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_spaces_at_qps() {
        let limiter = BucketRateLimiter::new(10.0, 100).unwrap();
        for _ in 0..100 {
            assert_eq!(RateLimiter::<&str>::when(&limiter, &"a"), Duration::ZERO);
        }
        let reserved: Vec<_> = (0..3)
            .map(|_| RateLimiter::<&str>::when(&limiter, &"b"))
            .collect();
        assert_eq!(reserved, [ms(100), ms(200), ms(300)]);

        // One second refills ten tokens, but the three reserved above are still owed.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..7 {
            assert_eq!(RateLimiter::<&str>::when(&limiter, &"c"), Duration::ZERO);
        }
        assert_eq!(RateLimiter::<&str>::when(&limiter, &"c"), ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_up_to_burst_only() {
        let limiter = BucketRateLimiter::new(10.0, 2).unwrap();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(RateLimiter::<u8>::when(&limiter, &1), Duration::ZERO);
        assert_eq!(RateLimiter::<u8>::when(&limiter, &1), Duration::ZERO);
        assert_eq!(RateLimiter::<u8>::when(&limiter, &1), ms(100));
    }

    #[test]
    fn bucket_rejects_unusable_settings() {
        assert_eq!(
            BucketRateLimiter::new(0.0, 1).unwrap_err(),
            ConfigError::InvalidQps(0.0)
        );
        assert!(matches!(
            BucketRateLimiter::new(f64::NAN, 1),
            Err(ConfigError::InvalidQps(_))
        ));
        assert!(matches!(
            BucketRateLimiter::new(f64::MIN_POSITIVE, 1),
            Err(ConfigError::InvalidQps(_))
        ));
        assert_eq!(
            BucketRateLimiter::new(10.0, 0).unwrap_err(),
            ConfigError::ZeroBurst
        );
    }

    /// Returns a fixed delay and records what it was asked.
    #[derive(Default)]
    struct Fixed {
        delay: Duration,
        requeues: u32,
        forgotten: Arc<Mutex<Vec<&'static str>>>,
        calls: Arc<Mutex<u32>>,
    }

    impl RateLimiter<&'static str> for Fixed {
        fn when(&self, _key: &&'static str) -> Duration {
            *lock(&self.calls) += 1;
            self.delay
        }

        fn forget(&self, key: &&'static str) {
            lock(&self.forgotten).push(key);
        }

        fn num_requeues(&self, _key: &&'static str) -> u32 {
            self.requeues
        }
    }

    #[test]
    fn max_of_takes_longest_delay_and_asks_every_limiter() {
        let short = Fixed {
            delay: ms(5),
            requeues: 4,
            ..Fixed::default()
        };
        let long = Fixed {
            delay: ms(70),
            requeues: 1,
            ..Fixed::default()
        };
        let (short_calls, long_calls) = (short.calls.clone(), long.calls.clone());
        let (short_forgot, long_forgot) = (short.forgotten.clone(), long.forgotten.clone());
        let limiter = MaxOfRateLimiter::new(vec![Box::new(short), Box::new(long)]);

        assert_eq!(limiter.when(&"a"), ms(70));
        assert_eq!((*lock(&short_calls), *lock(&long_calls)), (1, 1));
        assert_eq!(limiter.num_requeues(&"a"), 4);
        limiter.forget(&"a");
        assert_eq!(*lock(&short_forgot), ["a"]);
        assert_eq!(*lock(&long_forgot), ["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn default_limiter_is_backoff_until_bucket_runs_dry() {
        let config = RateLimitConfig {
            qps: 1.0,
            burst: 2,
            ..RateLimitConfig::default()
        };
        let limiter = config.build::<&str>().unwrap();
        // Backoff dominates while tokens last, then the bucket's one-per-second spacing.
        assert_eq!(limiter.when(&"a"), ms(5));
        assert_eq!(limiter.when(&"a"), ms(10));
        assert_eq!(limiter.when(&"a"), Duration::from_secs(1));
        assert_eq!(limiter.when(&"b"), Duration::from_secs(2));
        assert_eq!(limiter.num_requeues(&"a"), 3);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
    }
}
