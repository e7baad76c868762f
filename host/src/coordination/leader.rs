//! The leader election loop: try every retry period; while leading, renew, and stop acting
//! (close the gate) once no renewal has succeeded for the renew deadline. On stop, give the
//! Lease up so the next replica takes over at its next attempt.

use super::election::{Attempt, Elector};
use super::gate::Scope;
use super::store::LeaseStore;
use super::{Shared, Stop};
use tokio::time::Instant;

/// Runs `elector` until `stop` fires, opening `shared.gate` while it leads.
pub(crate) async fn run<S: LeaseStore>(mut elector: Elector<S>, shared: Shared, mut stop: Stop) {
    let timings = elector.timings();
    let mut leading = false;
    let mut last_renew = Instant::now();
    loop {
        // A renewal counts from when it was sent, on both clocks: the Lease may have been
        // written at once, and a pause after sending must not extend it.
        let sent = shared.gate.stamp();
        let attempt = if leading {
            // A renewal that hangs must not keep a leader acting past its deadline.
            let deadline = last_renew + timings.renew_deadline;
            tokio::time::timeout_at(deadline, elector.try_acquire_or_renew()).await
        } else {
            tokio::time::timeout(timings.retry_period, elector.try_acquire_or_renew()).await
        };
        match attempt {
            Ok(Ok(Attempt::Leading)) => {
                last_renew = sent.mono();
                let reopened = shared.gate.renewed(sent, timings.renew_deadline);
                if !leading {
                    leading = true;
                    shared.set_leading(true, None);
                    tracing::info!(identity = %shared.identity, lease = %shared.lease, "became the leader: reconciling every key");
                } else if reopened {
                    tracing::warn!(identity = %shared.identity, lease = %shared.lease, "renewed the lease after it lapsed: queueing every key again");
                }
            }
            Ok(Ok(Attempt::HeldBy(holder))) => {
                if leading {
                    leading = false;
                    tracing::error!(identity = %shared.identity, holder = %holder, "another replica holds the lease: stopped reconciling");
                }
                shared.set_leading(false, Some(holder));
            }
            Ok(Ok(Attempt::Contested { last_holder })) => {
                if leading {
                    leading = false;
                    tracing::error!(identity = %shared.identity, lease = %shared.lease, "the lease was deleted or written by someone else: stopped reconciling until it expires");
                }
                shared.set_leading(false, last_holder);
            }
            Ok(Err(err)) => {
                tracing::warn!(identity = %shared.identity, leading, "lease not acquired or renewed: {err}")
            }
            Err(_) => {
                tracing::warn!(identity = %shared.identity, leading, "lease request timed out")
            }
        }
        // The gate measures the deadline on both clocks (a suspended VM's monotonic clock
        // stands still).
        if leading && !shared.gate.is_valid() {
            leading = false;
            shared.set_leading(false, None);
            tracing::error!(identity = %shared.identity, renew_deadline_s = timings.renew_deadline.as_secs_f64(), "could not renew the lease within the renew deadline: stopped reconciling before it can expire");
        }
        tokio::select! {
            _ = tokio::time::sleep(timings.retry_period) => {}
            _ = stop.changed() => break,
        }
    }
    if leading {
        shared.gate.set(Scope::Leader { leading: false });
        match elector.release().await {
            Ok(_) => tracing::info!(identity = %shared.identity, "released the lease"),
            Err(err) => {
                tracing::warn!(identity = %shared.identity, "could not release the lease (the others take over once it expires): {err}")
            }
        }
        shared.set_leading(false, None);
    }
}
