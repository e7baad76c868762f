//! Per-call resource limits.

use crate::contract::OutputLimits;
use std::time::Duration;

/// What one reconcile call may use. The operator's policy sets these per plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory of the instance, in bytes.
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

/// Memory of one plugin instance unless configured, in MiB.
pub const DEFAULT_MEMORY_MIB: usize = 64;
/// Time limit of one plugin call unless configured, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: DEFAULT_MEMORY_MIB << 20,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            output: OutputLimits::default(),
            log_bytes: 64 << 10,
            read_bytes: 16 << 20,
        }
    }
}
