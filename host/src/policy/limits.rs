//! A policy's limits, checked and resolved once, when its document is read: the overrides of
//! the host's call limits (bounded by the runtime's caps, as `kubeplug run`'s flags are) and
//! the write rate with its default filled in.

use super::budget::{WriteRate, WriteRateError};
use super::document::LimitsSpec;
use crate::plugin::{CallBound, CallLimitOverrides, Limits};

/// A field of `spec.limits` the host refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field spec.limits.{field}: {message}")]
pub struct LimitsFieldError {
    /// The field, as the document names it (`memoryMib`).
    pub field: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

/// What a policy sets on its plugin's calls and writes, resolved: built only from a checked
/// [`LimitsSpec`] (or as a default), so every value in it is one the host honours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyLimits {
    call: CallLimitOverrides,
    /// The budget of the policy's writes (a new revision with the same rate keeps the
    /// running one's budget).
    rate: WriteRate,
}

impl Default for PolicyLimits {
    /// The host's call limits and the default write rate.
    fn default() -> Self {
        PolicyLimits::new(CallLimitOverrides::default(), WriteRate::default())
    }
}

impl PolicyLimits {
    fn new(call: CallLimitOverrides, rate: WriteRate) -> Self {
        PolicyLimits { call, rate }
    }

    /// The host's call limits and no write budget.
    pub fn unlimited_writes() -> Self {
        PolicyLimits::new(CallLimitOverrides::default(), WriteRate::UNLIMITED)
    }

    /// The limits `spec` sets, checked: call limits within the runtime's caps, a positive
    /// write rate and a burst of 1 to 100000; absent ones the host's (or, for the write
    /// rate, 5 writes per second with a burst of 10).
    pub fn resolve(spec: &LimitsSpec) -> Result<Self, LimitsFieldError> {
        let call = CallLimitOverrides::new(
            spec.memory_mib.map(|v| v as u64),
            spec.timeout_ms,
            spec.max_actions.map(|v| v as u64),
        )
        .map_err(|e| LimitsFieldError {
            field: match e.bound {
                CallBound::Memory => "memoryMib",
                CallBound::Timeout => "timeoutMs",
                CallBound::Actions => "maxActions",
            },
            message: e.to_string(),
        })?;
        let default = WriteRate::default();
        let rate = WriteRate::new(
            spec.writes_per_second.unwrap_or(default.per_second()),
            spec.write_burst.unwrap_or(default.burst()),
        )
        .map_err(|e| LimitsFieldError {
            field: match e {
                WriteRateError::Rate(_) => "writesPerSecond",
                WriteRateError::Burst(_) => "writeBurst",
            },
            message: e.to_string(),
        })?;
        Ok(PolicyLimits::new(call, rate))
    }

    /// The host's per-call limits `host` with this policy's overrides.
    pub fn call_limits(&self, host: Limits) -> Limits {
        self.call.apply(host)
    }

    /// The policy's write rate.
    pub fn write_rate(&self) -> WriteRate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{MAX_ACTIONS, MAX_MEMORY_MIB, MAX_TIMEOUT_MS};

    fn spec(memory: u64, timeout: u64, actions: u64, burst: u32) -> LimitsSpec {
        LimitsSpec {
            memory_mib: Some(memory as usize),
            timeout_ms: Some(timeout),
            max_actions: Some(actions as usize),
            writes_per_second: Some(1.5),
            write_burst: Some(burst),
        }
    }

    #[test]
    fn values_at_the_caps_are_accepted_and_one_more_is_refused_naming_the_cap() {
        let at_caps = spec(MAX_MEMORY_MIB, MAX_TIMEOUT_MS, MAX_ACTIONS, 100_000);
        let l = PolicyLimits::resolve(&at_caps).unwrap();
        let call = l.call_limits(Limits::default());
        assert_eq!(
            (
                call.memory_bytes,
                call.timeout.as_millis(),
                call.output.max_actions
            ),
            (1 << 30, 600_000, 100_000)
        );
        assert_eq!(l.write_rate(), WriteRate::new(1.5, 100_000).unwrap());
        for (over, field, cap) in [
            (
                spec(MAX_MEMORY_MIB + 1, 1, 1, 1),
                "memoryMib",
                "1024 MiB is the most memory",
            ),
            (spec(1, MAX_TIMEOUT_MS + 1, 1, 1), "timeoutMs", "600000 ms"),
            (
                spec(1, 1, MAX_ACTIONS + 1, 1),
                "maxActions",
                "100000 is the most",
            ),
            (spec(1, 1, 1, 100_001), "writeBurst", "between 1 and 100000"),
        ] {
            let err = PolicyLimits::resolve(&over).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(cap), "{err}");
        }
    }

    #[test]
    fn the_write_rate_is_resolved_once_with_its_default() {
        let absent = PolicyLimits::resolve(&LimitsSpec::default()).unwrap();
        assert_eq!(absent, PolicyLimits::default());
        assert_eq!(absent.write_rate(), WriteRate::default());
        let explicit = LimitsSpec {
            writes_per_second: Some(5.0),
            write_burst: Some(10),
            ..LimitsSpec::default()
        };
        assert_eq!(PolicyLimits::resolve(&explicit).unwrap(), absent);
        assert_eq!(
            PolicyLimits::unlimited_writes().write_rate(),
            WriteRate::UNLIMITED
        );
    }
}
