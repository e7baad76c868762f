//! A pass over every Plugin is long work for one task: at 1,000 Plugins, 100 to 200 ms of
//! resolving and reporting with no wait in between, so one poll held a runtime thread that
//! long and the tasks queued behind it on that thread (another tenant's watch event, call or
//! write) waited with it: quiet tenants' change->patch reached 97 ms at the e2e bench's 1,000
//! tenants. The pass gives its thread up every [`SLICE`] of work instead.

use std::time::{Duration, Instant};

/// The longest a pass works before it yields its runtime thread.
pub(super) const SLICE: Duration = Duration::from_millis(2);

/// When the task last gave its thread up.
pub(super) struct TimeSlice {
    since: Instant,
}

impl TimeSlice {
    /// A slice starting now.
    pub(super) fn start() -> Self {
        TimeSlice {
            since: Instant::now(),
        }
    }

    /// Yields the runtime thread once the task has worked a whole slice since it last did.
    pub(super) async fn check(&mut self) {
        if self.since.elapsed() >= SLICE {
            tokio::task::yield_now().await;
            self.since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test(flavor = "current_thread")]
    async fn long_work_lets_another_task_run_within_a_few_slices() {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        // Busy work on the only runtime thread: the spawned task runs only if it yields.
        let started = Instant::now();
        let mut slice = TimeSlice::start();
        while !ran.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(5) {
            std::hint::spin_loop();
            slice.check().await;
        }
        assert!(
            ran.load(Ordering::SeqCst),
            "the other task never ran in 5 s of work"
        );
    }
}
