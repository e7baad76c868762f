use super::*;
use crate::policy::{LimitsSpec, PolicyLimits};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// Long enough never to end a loop that works: the clock is paused, so it runs out at once
/// only when every future of the test waits on another (a loop that serialises a write
/// and the next call).
const DEADLOCK: Duration = Duration::from_secs(3600);

/// The loop's turns, in order; a turn asked for after `Closed` fails the test.
fn turns(turns: Vec<BoxFuture<'static, Taken>>) -> impl FnMut() -> BoxFuture<'static, Taken> {
    let mut turns = VecDeque::from(turns);
    move || {
        turns
            .pop_front()
            .expect("a turn was taken after the queue closed")
    }
}

/// A call that writes hands its write off: the next call runs while the write is still in
/// flight (here the write waits for the next call, which waits for the write to end).
#[tokio::test(start_paused = true)]
async fn a_write_runs_beside_the_next_call() {
    let (release, released) = oneshot::channel::<()>();
    let (wrote, written) = oneshot::channel::<()>();
    let take = turns(vec![
        Box::pin(async move {
            Taken::Writing(Box::pin(async move {
                released.await.unwrap();
                wrote.send(()).unwrap();
            }))
        }),
        Box::pin(async move {
            release.send(()).unwrap();
            written.await.unwrap();
            Taken::Closed
        }),
    ]);
    tokio::time::timeout(DEADLOCK, drive(take))
        .await
        .expect("the write did not run beside the next call");
}

/// The loop takes turn after turn until the queue closes, and returns only once the writes
/// it handed off have ended (a drain waits for them; dropping them would lose writes).
#[tokio::test(start_paused = true)]
async fn the_loop_ends_after_its_writes_and_takes_nothing_after_closed() {
    let wrote = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let (w, t) = (wrote.clone(), taken.clone());
    let counted = move |turn: Taken| -> BoxFuture<'static, Taken> {
        let t = t.clone();
        Box::pin(async move {
            t.fetch_add(1, Ordering::SeqCst);
            turn
        })
    };
    let write = Box::pin(async move {
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        w.store(true, Ordering::SeqCst);
    });
    let take = turns(vec![
        counted(Taken::Writing(write)),
        counted(Taken::Done),
        counted(Taken::Done),
        counted(Taken::Closed),
    ]);
    drive(take).await;
    assert_eq!(taken.load(Ordering::SeqCst), 4);
    assert!(
        wrote.load(Ordering::SeqCst),
        "the loop returned with a write in flight"
    );
}

/// A plugin's calls with writes in flight are bounded by its write burst when its policy
/// limits its write rate, and only by the host's cap when it does not.
#[test]
fn the_write_cap_is_the_burst_of_a_limited_rate() {
    assert_eq!(
        write_cap(&Policy::default()),
        crate::policy::DEFAULT_WRITE_BURST as usize
    );
    let policy = Policy {
        limits: PolicyLimits::resolve(&LimitsSpec {
            writes_per_second: Some(0.5),
            write_burst: Some(3),
            ..LimitsSpec::default()
        })
        .unwrap(),
        ..Policy::default()
    };
    assert_eq!(write_cap(&policy), 3);
    assert_eq!(write_cap(&Policy::trusted()), usize::MAX);
}
