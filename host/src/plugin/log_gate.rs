//! How much of a plugin's logging reaches the host log: every line capped, every call's lines
//! bounded per source, and every plugin's lines over time rate-limited by a token bucket that
//! all its calls share (its metadata call at load too), with a count of what was dropped.
//! The host's own warning about drops is bounded too: at most one per plugin every
//! [`DROP_REPORT_INTERVAL`], or a plugin logging too much on every call would flood the host
//! log with one warning per call instead.

use super::sandbox::LogSource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of one plugin log line that are kept and written to the host log.
pub const MAX_LOG_LINE_BYTES: usize = crate::telemetry::PLUGIN_LOG_LINE_MAX;

/// What a line costs at least, of the call's room and of the plugin's rate: many tiny lines
/// cost the host log as much as their framing, not only their text.
pub const MIN_LINE_COST: usize = 256;

/// The least time between two host warnings about one plugin's dropped log lines; the
/// next warning counts every line dropped since the last.
pub const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// A plugin's log rate: a token bucket of bytes, shared by all the plugin's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRateConfig {
    /// Bytes of log lines per second, on average.
    pub bytes_per_second: u64,
    /// Bytes that may be written at once after a quiet period.
    pub burst_bytes: u64,
}

impl Default for LogRateConfig {
    fn default() -> Self {
        LogRateConfig {
            bytes_per_second: 64 << 10,
            burst_bytes: 256 << 10,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Drops not yet reported, and when the last report was made.
#[derive(Debug, Default)]
struct Unreported {
    dropped: u64,
    reported: Option<Instant>,
}

/// The log budget of one plugin across calls.
#[derive(Debug)]
pub(crate) struct LogRate {
    config: LogRateConfig,
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
    unreported: Mutex<Unreported>,
}

impl LogRate {
    /// A full bucket.
    pub(crate) fn new(config: LogRateConfig) -> Self {
        LogRate {
            config,
            bucket: Mutex::new(Bucket {
                tokens: config.burst_bytes as f64,
                last: Instant::now(),
            }),
            dropped: AtomicU64::new(0),
            unreported: Mutex::new(Unreported::default()),
        }
    }

    /// Takes `cost` bytes from the bucket, or nothing when there are not enough.
    fn take(&self, cost: usize) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(b.last).as_secs_f64() * self.config.bytes_per_second as f64;
        b.tokens = (b.tokens + refill).min(self.config.burst_bytes as f64);
        b.last = now;
        if b.tokens < cost as f64 {
            return false;
        }
        b.tokens -= cost as f64;
        true
    }

    /// Charges one line of `len` bytes that no call's gate sees (a `log` action, written
    /// after the call): false, and counted as dropped, when the rate is spent.
    pub(crate) fn admit_line(&self, len: usize) -> bool {
        if self.take(len.clamp(MIN_LINE_COST, MAX_LOG_LINE_BYTES)) {
            return true;
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Lines dropped since the plugin loaded (per-call limit or rate).
    pub(crate) fn dropped_total(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Adds a call's `dropped` lines to those not yet reported: all of them, to be written
    /// in one host warning now, when none was written in the last [`DROP_REPORT_INTERVAL`].
    pub(crate) fn report_dropped(&self, dropped: u64) -> Option<u64> {
        self.report_dropped_at(dropped, Instant::now())
    }

    fn report_dropped_at(&self, dropped: u64, now: Instant) -> Option<u64> {
        let mut u = self.unreported.lock().unwrap_or_else(|p| p.into_inner());
        u.dropped = u.dropped.saturating_add(dropped);
        let due = u
            .reported
            .is_none_or(|at| now.saturating_duration_since(at) >= DROP_REPORT_INTERVAL);
        if u.dropped == 0 || !due {
            return None;
        }
        u.reported = Some(now);
        Some(std::mem::take(&mut u.dropped))
    }
}

/// The per-call side: room left for each source, and the lines dropped in this call.
#[derive(Debug)]
pub(crate) struct LogGate {
    rate: Arc<LogRate>,
    /// Room left for the `log` import, stdout and stderr, in line costs.
    room: [usize; 3],
    dropped: u64,
}

fn index(source: LogSource) -> usize {
    match source {
        LogSource::Import => 0,
        LogSource::Stdout => 1,
        LogSource::Stderr => 2,
    }
}

impl LogGate {
    /// A call's gate: `room` bytes for each source, drawing on the plugin's `rate`.
    pub(crate) fn new(rate: Arc<LogRate>, room: usize) -> Self {
        LogGate {
            rate,
            room: [room; 3],
            dropped: 0,
        }
    }

    /// A new call in the same sandbox: full room, no drops counted yet.
    pub(crate) fn reset(&mut self, room: usize) {
        self.room = [room; 3];
        self.dropped = 0;
    }

    /// Whether a line of `len` bytes from `source` may be kept and written (it is then cut
    /// to [`MAX_LOG_LINE_BYTES`]); a refused line is counted as dropped.
    pub(crate) fn admit(&mut self, source: LogSource, len: usize) -> bool {
        let cost = len.clamp(MIN_LINE_COST, MAX_LOG_LINE_BYTES);
        let room = &mut self.room[index(source)];
        if cost > *room || !self.rate.take(cost) {
            self.dropped += 1;
            self.rate.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        *room -= cost;
        true
    }

    /// Lines dropped in this call so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// This call's drops added to the plugin's unreported ones: how many to report now, if
    /// a report is due ([`LogRate::report_dropped`]).
    pub(crate) fn report_dropped(&self) -> Option<u64> {
        self.rate.report_dropped(self.dropped)
    }
}

/// `message` cut to [`MAX_LOG_LINE_BYTES`] with a marker (a copy of at most that much).
pub(crate) fn cap_line(message: &str) -> String {
    crate::contract::text::truncate_with_marker(message, MAX_LOG_LINE_BYTES, "…(truncated)")
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: u64, burst: u64) -> Arc<LogRate> {
        Arc::new(LogRate::new(LogRateConfig {
            bytes_per_second: per_second,
            burst_bytes: burst,
        }))
    }

    #[test]
    fn a_call_keeps_at_most_its_room_per_source() {
        let mut gate = LogGate::new(rate(1 << 30, 1 << 30), 4 * MIN_LINE_COST);
        let kept = (0..100)
            .filter(|_| gate.admit(LogSource::Import, 10))
            .count();
        assert_eq!(kept, 4, "tiny lines cost the minimum");
        assert!(
            gate.admit(LogSource::Stdout, 10),
            "sources have their own room"
        );
        assert_eq!(gate.dropped(), 96);
    }

    #[test]
    fn huge_lines_cost_only_what_is_kept() {
        let mut gate = LogGate::new(rate(1 << 30, 1 << 30), 2 * MAX_LOG_LINE_BYTES);
        assert!(gate.admit(LogSource::Import, 1 << 20));
        assert!(gate.admit(LogSource::Import, 1 << 20));
        assert!(!gate.admit(LogSource::Import, 1));
        assert_eq!(cap_line(&"x".repeat(1 << 20)).len(), MAX_LOG_LINE_BYTES);
    }

    #[test]
    fn the_rate_is_shared_by_calls_and_counts_drops() {
        let shared = rate(0, 3 * MIN_LINE_COST as u64);
        let mut first = LogGate::new(shared.clone(), 1 << 20);
        let mut second = LogGate::new(shared.clone(), 1 << 20);
        assert!(first.admit(LogSource::Import, 1));
        assert!(first.admit(LogSource::Stderr, 1));
        assert!(second.admit(LogSource::Import, 1));
        assert!(!second.admit(LogSource::Import, 1), "bucket empty");
        assert!(!first.admit(LogSource::Stdout, 1));
        assert_eq!((first.dropped(), second.dropped()), (1, 1));
        assert_eq!(shared.dropped_total(), 2);
    }

    #[test]
    fn drops_are_reported_at_once_then_at_most_once_an_interval_with_all_since() {
        let shared = rate(0, 0);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert_eq!(shared.report_dropped_at(0, at(0)), None, "nothing dropped");
        assert_eq!(
            shared.report_dropped_at(3, at(0)),
            Some(3),
            "the first at once"
        );
        // A thousand calls dropping lines within the interval: no warning, all counted.
        for _ in 0..1000 {
            assert_eq!(shared.report_dropped_at(2, at(5)), None);
        }
        assert_eq!(shared.report_dropped_at(1, at(10)), Some(2001));
        assert_eq!(shared.report_dropped_at(0, at(30)), None, "nothing new");
        assert_eq!(shared.report_dropped_at(4, at(31)), Some(4));
    }
}
