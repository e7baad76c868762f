//! A write leaves only while this replica holds its key: a plugin's action, and the status,
//! record and Events of a Plugin object. The pipeline asks the gate once after the write
//! budget released the write; [`WhileHeld`] then asks again on every poll
//! of the request, before polling it, and wakes at the deadline that answer gave (the renew
//! deadline after the last renewal was sent, on the monotonic clock, which keeps running
//! through a `SIGSTOP`). A request that has not been answered by then is dropped.
//!
//! What this guarantees, and what it cannot:
//! - The request is polled by the calling task all the way to the hand-over to the HTTP
//!   connection (kube's buffered client returns its inner future to the caller, and hyper's
//!   pool checkout, connect and dispatch run in that future), so the last check happens in
//!   the very poll that hands the request to the connection. That is as late as the
//!   transport allows without replacing kube's HTTP stack. A request dropped before the
//!   connection task took it is not sent (hyper skips a cancelled request).
//! - A process frozen in the microseconds between that poll and the connection task
//!   writing the bytes still sends them when it wakes, and a request already written may
//!   arrive late. Those are covered by the margin between the renew deadline and the lease
//!   duration (no other replica takes the key before the lease expired on its own clock)
//!   and by the resourceVersion fence an action's write carries (`actions/fence.rs`).
//! - A request dropped at the deadline after it was written may still have been applied:
//!   the call ends as not held either way, and whoever holds the key now reconciles it.

use crate::coordination::Hold;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};

/// The key was no longer held when the request was polled: it was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LostHold {
    /// Whether it had been polled before (it may have been handed to the connection).
    pub polled: bool,
}

/// Polls `inner` only while `hold` says the key is held, and wakes at its deadline.
pub(crate) struct WhileHeld<'a, F> {
    inner: Pin<Box<F>>,
    hold: &'a (dyn Fn() -> Hold + Sync),
    deadline: Option<Pin<Box<Sleep>>>,
    polled: bool,
}

impl<'a, F: Future> WhileHeld<'a, F> {
    /// `inner`, polled while `hold` holds.
    pub(crate) fn new(inner: F, hold: &'a (dyn Fn() -> Hold + Sync)) -> Self {
        WhileHeld {
            inner: Box::pin(inner),
            hold,
            deadline: None,
            polled: false,
        }
    }
}

impl<F: Future> Future for WhileHeld<'_, F> {
    type Output = Result<F::Output, LostHold>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let hold = (this.hold)();
        if !hold.at(Instant::now()) {
            return Poll::Ready(Err(LostHold {
                polled: this.polled,
            }));
        }
        if let Hold::Until(until) = hold {
            // Wake at the deadline (a renewal meanwhile moves it later).
            let sleep = this
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
            if sleep.deadline() != until {
                sleep.as_mut().reset(until);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(LostHold {
                    polled: this.polled,
                }));
            }
        }
        this.polled = true;
        this.inner.as_mut().poll(cx).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_request_still_waiting_at_the_deadline_is_dropped() {
        let until = Instant::now() + Duration::from_secs(1);
        let hold = move || Hold::Until(until);
        let sent = Mutex::new(false);
        let request = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            *sent.lock().unwrap() = true;
        };
        let result = WhileHeld::new(request, &hold).await;
        assert_eq!(result, Err(LostHold { polled: true }));
        assert_eq!(Instant::now(), until, "dropped at the deadline, not later");
        assert!(!*sent.lock().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_lost_while_the_request_waits_stops_it_at_its_next_poll() {
        let lost = Mutex::new(false);
        let hold = || match *lost.lock().unwrap() {
            true => Hold::Lost,
            false => Hold::Always,
        };
        let sent = Mutex::new(false);
        let request = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            *sent.lock().unwrap() = true;
        };
        let guarded = WhileHeld::new(request, &hold);
        let lose = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            *lost.lock().unwrap() = true;
        };
        let (result, ()) = tokio::join!(guarded, lose);
        assert_eq!(result, Err(LostHold { polled: true }));
        assert!(
            !*sent.lock().unwrap(),
            "checked before the poll that would send"
        );
        // Held (renewed meanwhile) all along: it completes.
        let renewed = || Hold::Until(Instant::now() + Duration::from_secs(1));
        let done = WhileHeld::new(tokio::time::sleep(Duration::from_secs(5)), &renewed).await;
        assert_eq!(done, Ok(()));
        // Never held: never polled.
        let never = || Hold::Lost;
        let result = WhileHeld::new(async { unreachable!("polled") }, &never).await;
        assert_eq!(result, Err::<(), _>(LostHold { polled: false }));
    }
}
