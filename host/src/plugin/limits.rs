//! Per-call resource limits: the runtime's full set ([`Limits`]), and the bounds an operator
//! sets ([`CallLimits`], [`CallLimitOverrides`]), checked against the runtime's caps when they
//! are built, so `kubeplug run`, `kubeplug eval` and policy documents accept the same values
//! and refuse the others with the same message.

use crate::contract::OutputLimits;
use std::time::Duration;

/// What one reconcile call may use. The operator's policy sets these per plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory of the call's sandbox, in bytes.
    pub memory_bytes: usize,
    /// Wall-clock time for the whole call, including instantiation.
    pub timeout: Duration,
    /// Bounds on the returned actions.
    pub output: OutputLimits,
    /// Bytes kept of each of stdout, stderr and the `log` import per call; more is dropped.
    pub log_bytes: usize,
    /// Bytes the `get`/`list` imports may return in one call, together; a read that would
    /// return more is refused (an error to the plugin).
    pub read_bytes: usize,
}

/// Memory of one call's sandbox unless configured, in MiB.
pub const DEFAULT_MEMORY_MIB: u64 = 64;
/// Time limit of one plugin call unless configured, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;
/// The most memory the runtime gives one call's sandbox, in MiB: the size of a slot of the
/// pooling allocator, which is built from this constant alone. A larger limit could never be
/// used, so it is refused rather than lowered.
pub const MAX_MEMORY_MIB: u64 = 1024;
/// The longest plugin call the host allows, in milliseconds (ten minutes).
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// The most actions one call may be allowed to return.
pub const MAX_ACTIONS: u64 = 100_000;

impl Default for Limits {
    fn default() -> Self {
        CallLimits::default().apply(Limits {
            memory_bytes: 0,
            timeout: Duration::ZERO,
            output: OutputLimits::default(),
            log_bytes: 64 << 10,
            read_bytes: 16 << 20,
        })
    }
}

/// One of the bounds of a call an operator sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallBound {
    /// Linear memory of the call's sandbox, in MiB.
    Memory,
    /// Wall-clock time of the call, in milliseconds.
    Timeout,
    /// Actions the call may return.
    Actions,
}

impl CallBound {
    /// The largest value the host accepts.
    pub fn cap(self) -> u64 {
        match self {
            CallBound::Memory => MAX_MEMORY_MIB,
            CallBound::Timeout => MAX_TIMEOUT_MS,
            CallBound::Actions => MAX_ACTIONS,
        }
    }

    /// What the cap is, in words (for errors).
    fn cap_reason(self) -> String {
        let cap = self.cap();
        match self {
            CallBound::Memory => {
                format!("{cap} MiB is the most memory the runtime gives one call's sandbox")
            }
            CallBound::Timeout => format!("{cap} ms is the longest call the host allows"),
            CallBound::Actions => format!("{cap} is the most actions a call may be allowed"),
        }
    }

    /// Checks `value` against this bound: at least 1, at most [`cap`](Self::cap).
    fn check(self, value: u64) -> Result<u64, LimitError> {
        match (1..=self.cap()).contains(&value) {
            true => Ok(value),
            false => Err(LimitError { bound: self, value }),
        }
    }
}

/// A call bound outside the range the host accepts. The message names the cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value} is not between 1 and {}: {}", .bound.cap(), .bound.cap_reason())]
pub struct LimitError {
    /// The bound refused.
    pub bound: CallBound,
    /// The value given.
    pub value: u64,
}

/// The bounds of one call an operator sets (memory, timeout, actions), each checked against
/// the runtime's caps when set: a value that exists is a value the runtime honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    memory_mib: u64,
    timeout_ms: u64,
    max_actions: u64,
}

impl Default for CallLimits {
    /// 64 MiB, 1000 ms, 1000 actions.
    fn default() -> Self {
        CallLimits {
            memory_mib: DEFAULT_MEMORY_MIB,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_actions: OutputLimits::default().max_actions as u64,
        }
    }
}

impl CallLimits {
    /// These limits with `mib` MiB of memory (1 to [`MAX_MEMORY_MIB`]).
    pub fn with_memory_mib(self, mib: u64) -> Result<Self, LimitError> {
        Ok(CallLimits {
            memory_mib: CallBound::Memory.check(mib)?,
            ..self
        })
    }

    /// These limits with a timeout of `ms` milliseconds (1 to [`MAX_TIMEOUT_MS`]).
    pub fn with_timeout_ms(self, ms: u64) -> Result<Self, LimitError> {
        Ok(CallLimits {
            timeout_ms: CallBound::Timeout.check(ms)?,
            ..self
        })
    }

    /// These limits with at most `n` actions per call (1 to [`MAX_ACTIONS`]).
    pub fn with_max_actions(self, n: u64) -> Result<Self, LimitError> {
        Ok(CallLimits {
            max_actions: CallBound::Actions.check(n)?,
            ..self
        })
    }

    /// Linear memory of the call's sandbox, in bytes.
    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }

    /// Wall-clock time of the call.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Actions the call may return.
    pub fn max_actions(&self) -> usize {
        self.max_actions as usize
    }

    /// `base` with these limits' memory, timeout and action bound.
    pub fn apply(&self, mut base: Limits) -> Limits {
        base.memory_bytes = self.memory_bytes();
        base.timeout = self.timeout();
        base.output.max_actions = self.max_actions();
        base
    }
}

impl From<CallLimits> for Limits {
    /// The default limits with these bounds.
    fn from(limits: CallLimits) -> Self {
        limits.apply(Limits::default())
    }
}

/// Some of the bounds of [`CallLimits`], each checked the same way, to lay over another set
/// (a policy's over the host's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallLimitOverrides {
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    max_actions: Option<u64>,
}

impl CallLimitOverrides {
    /// The bounds given, checked as [`CallLimits`] checks them.
    pub fn new(
        memory_mib: Option<u64>,
        timeout_ms: Option<u64>,
        max_actions: Option<u64>,
    ) -> Result<Self, LimitError> {
        Ok(CallLimitOverrides {
            memory_mib: memory_mib.map(|v| CallBound::Memory.check(v)).transpose()?,
            timeout_ms: timeout_ms
                .map(|v| CallBound::Timeout.check(v))
                .transpose()?,
            max_actions: max_actions
                .map(|v| CallBound::Actions.check(v))
                .transpose()?,
        })
    }

    /// `base` with the bounds these override.
    pub fn apply(&self, mut base: Limits) -> Limits {
        if let Some(mib) = self.memory_mib {
            base.memory_bytes = (mib as usize) << 20;
        }
        if let Some(ms) = self.timeout_ms {
            base.timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.max_actions {
            base.output.max_actions = n as usize;
        }
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_accepts_its_cap_and_refuses_one_more_naming_the_cap() {
        let ok = CallLimits::default()
            .with_memory_mib(MAX_MEMORY_MIB)
            .and_then(|l| l.with_timeout_ms(MAX_TIMEOUT_MS))
            .and_then(|l| l.with_max_actions(MAX_ACTIONS))
            .unwrap();
        assert_eq!(ok.memory_bytes(), 1 << 30);
        assert_eq!(ok.timeout(), Duration::from_secs(600));
        assert_eq!(ok.max_actions(), 100_000);
        let d = CallLimits::default();
        for (err, message) in [
            (
                d.with_memory_mib(MAX_MEMORY_MIB + 1),
                "1025 is not between 1 and 1024: 1024 MiB is the most memory the runtime gives one call's sandbox",
            ),
            (
                d.with_timeout_ms(MAX_TIMEOUT_MS + 1),
                "600001 is not between 1 and 600000: 600000 ms is the longest call the host allows",
            ),
            (
                d.with_max_actions(MAX_ACTIONS + 1),
                "100001 is not between 1 and 100000: 100000 is the most actions a call may be allowed",
            ),
        ] {
            assert_eq!(err.unwrap_err().to_string(), message);
        }
        for zero in [
            d.with_memory_mib(0),
            d.with_timeout_ms(0),
            d.with_max_actions(0),
        ] {
            assert!(
                zero.unwrap_err()
                    .to_string()
                    .starts_with("0 is not between 1 and")
            );
        }
    }

    #[test]
    fn overrides_are_checked_alike_and_replace_only_what_they_set() {
        let err = CallLimitOverrides::new(Some(MAX_MEMORY_MIB + 1), None, None).unwrap_err();
        assert_eq!(err.bound, CallBound::Memory);
        assert!(err.to_string().contains("1024 MiB"), "{err}");
        let at_caps = CallLimitOverrides::new(
            Some(MAX_MEMORY_MIB),
            Some(MAX_TIMEOUT_MS),
            Some(MAX_ACTIONS),
        );
        assert!(at_caps.is_ok());
        let only_timeout = CallLimitOverrides::new(None, Some(200), None).unwrap();
        let l = only_timeout.apply(Limits::default());
        assert_eq!(
            l,
            Limits {
                timeout: Duration::from_millis(200),
                ..Limits::default()
            }
        );
    }

    #[test]
    fn the_default_limits_are_the_default_call_limits() {
        let l = Limits::default();
        assert_eq!(
            (l.memory_bytes, l.timeout, l.output.max_actions),
            (64 << 20, Duration::from_millis(1000), 1000)
        );
        assert_eq!(Limits::from(CallLimits::default()), l);
    }
}
