//! Queue and rate-limit settings, with client-go's defaults
//! (`DefaultTypedControllerRateLimiter`: 5 ms → 1000 s per-key backoff, 10 qps / burst 100 bucket).

use std::time::Duration;

use thiserror::Error;

/// A setting that cannot produce a working queue.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// The token bucket rate must be a finite number of events per second above zero.
    #[error("token bucket qps must be finite and greater than zero, got {0}")]
    InvalidQps(f64),
    /// A bucket of zero tokens would never let a retry through.
    #[error("token bucket burst must be at least 1")]
    ZeroBurst,
    /// The in-flight gauges need a refresh period above zero.
    #[error("metrics update period must be greater than zero")]
    ZeroMetricsPeriod,
}

/// How failed keys are delayed before they are retried.
///
/// The delay for a key is the larger of its own exponential backoff and the wait for a token of
/// the bucket shared by all keys of the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitConfig {
    /// Backoff after a key's first failure; doubled on each further failure.
    pub base_delay: Duration,
    /// Upper bound of the per-key backoff.
    pub max_delay: Duration,
    /// Sustained retries per second across all keys of the queue.
    pub qps: f64,
    /// Retries allowed at once before `qps` spacing applies.
    pub burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

/// Settings of one workqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// Retry delays used by `add_rate_limited`.
    pub rate_limit: RateLimitConfig,
    /// How often `workqueue_unfinished_work_seconds` and
    /// `workqueue_longest_running_processor_seconds` are refreshed while keys are in flight
    /// (client-go uses 500 ms); they are also refreshed on every get and done.
    pub metrics_update_period: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            rate_limit: RateLimitConfig::default(),
            metrics_update_period: Duration::from_millis(500),
        }
    }
}

impl QueueConfig {
    /// Checks the settings the queue itself uses (the rate limiter checks its own).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.metrics_update_period.is_zero() {
            return Err(ConfigError::ZeroMetricsPeriod);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_client_go_controller_rate_limiter() {
        let config = QueueConfig::default();
        assert_eq!(config.rate_limit.base_delay, Duration::from_millis(5));
        assert_eq!(config.rate_limit.max_delay, Duration::from_secs(1000));
        assert_eq!(config.rate_limit.qps, 10.0);
        assert_eq!(config.rate_limit.burst, 100);
        assert_eq!(config.metrics_update_period, Duration::from_millis(500));
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn zero_metrics_period_is_rejected() {
        let config = QueueConfig {
            metrics_update_period: Duration::ZERO,
            ..QueueConfig::default()
        };
        assert_eq!(config.validate(), Err(ConfigError::ZeroMetricsPeriod));
    }
}
