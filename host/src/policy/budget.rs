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
