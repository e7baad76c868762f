//! The limit under paused time: slots are granted and answered by hand, so every change of
//! the limit and every wait is exact.

use super::*;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// A fast answer (well within the baseline's slack).
fn fast() -> Answers {
    let mut a = Answers::default();
    a.answered(Duration::from_millis(1));
    a
}

fn pushed(retry_after: Option<Duration>) -> Answers {
    let mut a = Answers::default();
    a.answered(Duration::from_millis(1));
    a.pushed_back(retry_after);
    a
}

/// Whether `acquire` grants a slot without waiting.
fn ready(limit: &Arc<InFlightLimit>, cap: usize) -> Option<WritePermit> {
    let mut acquire = pin!(limit.acquire(cap));
    match acquire
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(permit) => Some(permit),
        Poll::Pending => None,
    }
}

/// Takes every slot granted at once.
fn fill(limit: &Arc<InFlightLimit>, cap: usize) -> Vec<WritePermit> {
    std::iter::from_fn(|| ready(limit, cap))
        .take(10_000)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn grows_while_the_api_server_answers_fast_and_stops_when_it_slows() {
    let limit = InFlightLimit::new(2, HostWrites::new(64), "");
    assert_eq!(fill(&limit, usize::MAX).len(), 2, "starts at the workers");
    // Slow start: one more per fast answer, so a round of answers doubles it.
    for round in 0..3 {
        let before = limit.limit();
        for permit in fill(&limit, usize::MAX) {
            permit.answered(&fast());
        }
        assert_eq!(limit.limit(), before * 2, "round {round}");
    }
    assert_eq!(limit.limit(), 16);
    // An answer far slower than the fastest seen: the server queues, growth stops.
    let permit = ready(&limit, usize::MAX).unwrap();
    let mut slow = Answers::default();
    slow.answered(Duration::from_millis(200));
    permit.answered(&slow);
    assert_eq!(limit.limit(), 16);
    // Fast again: additive increase, about one per round (of sixteen, then seventeen
    // answers): 1/limit per answer.
    for _ in 0..16 {
        ready(&limit, usize::MAX).unwrap().answered(&fast());
    }
    assert_eq!(limit.limit(), 16, "less than a round");
    for _ in 0..20 {
        ready(&limit, usize::MAX).unwrap().answered(&fast());
    }
    assert_eq!(limit.limit(), 18, "two rounds");
    // Never past the host-wide cap.
    let limit = InFlightLimit::new(2, HostWrites::new(5), "");
    for _ in 0..10 {
        ready(&limit, usize::MAX).unwrap().answered(&fast());
    }
    assert_eq!(limit.limit(), 5);
    assert_eq!(fill(&limit, usize::MAX).len(), 5);
}

#[tokio::test(start_paused = true)]
async fn halves_once_per_round_on_429_or_5xx_never_below_one() {
    let limit = InFlightLimit::new(16, HostWrites::new(64), "");
    let round = fill(&limit, usize::MAX);
    assert_eq!(round.len(), 16);
    // Every write of the round is refused: one cut, not sixteen.
    for permit in round {
        permit.answered(&pushed(None));
    }
    assert_eq!(limit.limit(), 8);
    // Writes sent after the cut are pushed back too: another cut each round.
    for expected in [4, 2, 1, 1] {
        let round = fill(&limit, usize::MAX);
        for permit in round {
            permit.answered(&pushed(None));
        }
        assert_eq!(limit.limit(), expected);
    }
    // And a slot is always granted.
    assert!(ready(&limit, usize::MAX).is_some());
    // A transport failure counts as push-back too (see ActionError::push_back).
}

#[tokio::test(start_paused = true)]
async fn honours_retry_after_then_sends_again() {
    let limit = InFlightLimit::new(4, HostWrites::new(64), "");
    let permit = ready(&limit, usize::MAX).unwrap();
    let asked = Instant::now();
    permit.answered(&pushed(Some(Duration::from_secs(3))));
    assert!(
        ready(&limit, usize::MAX).is_none(),
        "a write started during Retry-After"
    );
    let permit = limit.acquire(usize::MAX).await;
    assert_eq!(asked.elapsed(), Duration::from_secs(3));
    permit.answered(&fast());
    // A hostile or broken Retry-After is bounded.
    let permit = ready(&limit, usize::MAX).unwrap();
    let asked = Instant::now();
    permit.answered(&pushed(Some(Duration::from_secs(86_400))));
    let _permit = limit.acquire(usize::MAX).await;
    assert_eq!(asked.elapsed(), MAX_RETRY_AFTER);
}

/// Whether `sending` grants a host slot without waiting.
fn sending_now(limit: &InFlightLimit) -> Option<FairPermit> {
    let mut sending = pin!(limit.sending());
    match sending
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(slot) => Some(slot),
        Poll::Pending => None,
    }
}

#[tokio::test(start_paused = true)]
async fn the_write_budget_bounds_a_plugins_calls_in_flight_and_the_host_cap_its_writes() {
    let host = HostWrites::new(6);
    let a = InFlightLimit::new(16, host.clone(), "");
    let b = InFlightLimit::new(16, host.clone(), "");
    // A plugin whose policy allows a burst of 3 writes: never more than 3 in flight,
    // and it does not grow past it.
    let held = fill(&a, 3);
    assert_eq!(held.len(), 3);
    for permit in held {
        permit.answered(&fast());
    }
    assert_eq!(a.limit(), 3);
    // Calls in flight take none of the host cap; writes being sent do.
    let _calls = fill(&a, 3);
    assert_eq!(host.available(), 6);
    let sent_a: Vec<_> = (0..3).map(|_| sending_now(&a).unwrap()).collect();
    // The host cap is shared: the other plugin gets what is left.
    let sent_b: Vec<_> = (0..3).map(|_| sending_now(&b).unwrap()).collect();
    assert_eq!(host.available(), 0);
    let mut waiting = pin!(b.sending());
    assert!(
        waiting
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending(),
        "past the host cap"
    );
    drop(sent_a);
    let fourth = waiting.await;
    drop((fourth, sent_b));
    assert_eq!(host.available(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_host_slot_given_up_while_waiting_is_freed() {
    let host = HostWrites::new(2);
    let a = InFlightLimit::new(2, host.clone(), "");
    let other = InFlightLimit::new(1, host.clone(), "");
    let first = sending_now(&a).unwrap();
    let _other = sending_now(&other).unwrap();
    {
        let mut second = pin!(a.sending());
        assert!(
            second
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        );
    }
    drop(first);
    assert_eq!(host.available(), 1);
    assert!(sending_now(&a).is_some(), "the slot given up is not held");
}

#[tokio::test(start_paused = true)]
async fn a_tenant_flooding_writes_leaves_another_tenant_its_share() {
    let host = HostWrites::new(4);
    let noisy = InFlightLimit::new(16, host.clone(), "team-noisy");
    let quiet = InFlightLimit::new(16, host.clone(), "team-quiet");
    // Alone, the noisy tenant takes every slot, and queues more.
    let mut held: Vec<_> = (0..4).map(|_| sending_now(&noisy).unwrap()).collect();
    assert_eq!(host.available(), 0);
    let mut more = pin!(noisy.sending());
    assert!(
        more.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    let mut turn = pin!(quiet.sending());
    assert!(
        turn.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    // The next slot freed is the quiet tenant's, although the noisy one asked first.
    held.pop();
    let Poll::Ready(quiet_write) = turn.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    else {
        panic!("the quiet tenant waits behind the noisy one's queue");
    };
    assert!(
        more.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending(),
        "the noisy tenant waits for its own share"
    );
    drop(quiet_write);
    let _noisy = more.await;
    assert_eq!(host.available(), 0);
}
