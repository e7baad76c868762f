//! Workqueues, one per plugin, between the router and the plugin workers: client-go's
//! rate-limited workqueue (dedup, one worker per key, requeue of keys re-added while being
//! processed, per-key exponential backoff combined with a shared token bucket, delayed adds)
//! with its `workqueue_*` Prometheus metrics.
//!
//! A worker loop:
//! ```no_run
//! # async fn reconcile(_key: &String) -> Result<Option<std::time::Duration>, ()> { Ok(None) }
//! # async fn worker(queue: kubeplug::queue::WorkQueue<String>) {
//! while let Some(key) = queue.get().await {
//!     match reconcile(&key).await {
//!         Ok(None) => queue.forget(&key),
//!         Ok(Some(requeue_after)) => {
//!             queue.forget(&key);
//!             queue.add_after(key.clone(), requeue_after);
//!         }
//!         Err(_) => queue.add_rate_limited(key.clone()),
//!     }
//!     queue.done(&key);
//! }
//! # }
//! ```
//!
//! Deliberate differences from client-go:
//! - keys go straight to the worker that has waited longest in `get` (FIFO among workers), and
//!   a dropped `get` puts its key back (cancel-safe);
//! - `add_after` on a key already waiting in the queue does nothing (client-go would run it
//!   once more later);
//! - `workqueue_retries_total` counts `add_rate_limited` only, not every `add_after`;
//! - one background task per queue serves both delayed adds and the in-flight gauges.

mod background;
mod config;
mod delay;
mod fair;
mod metrics;
mod rate_limit;
mod workqueue;

pub use config::{ConfigError, QueueConfig, RateLimitConfig};
pub use fair::{FairPermit, FairSlots, TenantSlots};
pub use metrics::QueueMetrics;
pub use rate_limit::{
    BucketRateLimiter, ItemExponentialRateLimiter, MaxOfRateLimiter, RateLimiter,
};
pub use workqueue::{QueueError, QueueKey, WorkQueue};
