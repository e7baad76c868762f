//! The one background task of each queue: fires delayed adds when due and refreshes the
//! in-flight gauges every `metrics_update_period` while keys are being processed (client-go
//! runs a goroutine for each of these; one task with one timer does both here).
//!
//! The task holds the queue weakly, so it never keeps a dropped queue alive; it exits when the
//! queue is dropped, or shut down with nothing in flight.

use std::sync::{Arc, Weak};

use tokio::sync::Notify;

use super::workqueue::{Inner, Next, QueueKey};

/// Runs until the queue is dropped or shut down and drained; `wake` re-arms the timer.
pub(super) async fn run<K: QueueKey>(queue: Weak<Inner<K>>, wake: Arc<Notify>) {
    let mut next_refresh = None;
    loop {
        let next = match queue.upgrade() {
            Some(inner) => inner.run_timers(&mut next_refresh),
            None => Next::Stop,
        };
        match next {
            Next::Stop => return,
            Next::Idle => wake.notified().await,
            Next::At(deadline) => {
                // Woken early or at the deadline: either way, look again.
                let _ = tokio::time::timeout_at(deadline, wake.notified()).await;
            }
        }
    }
}
