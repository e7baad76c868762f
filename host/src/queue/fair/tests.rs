use super::*;
use futures::FutureExt;
use std::time::Duration;

/// A waiter's future, polled once: `Some` if it got its slot at once.
fn try_now(slots: &FairSlots, tenant: &str) -> Option<FairPermit> {
    slots.acquire(tenant).now_or_never()
}

/// A future that must be ready now (everything here is decided under one lock).
async fn now<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("ready")
}

/// Whether `f`, polled once, is still pending.
fn pending<T>(f: &mut (impl Future<Output = T> + Unpin)) -> bool {
    f.now_or_never().is_none()
}

#[tokio::test]
async fn a_tenant_alone_may_use_every_slot() {
    let slots = FairSlots::new(4);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(now(slots.acquire("a")).await);
    }
    let mut fifth = Box::pin(slots.acquire("a"));
    assert!(pending(&mut fifth));
    held.pop();
    now(fifth).await;
}

#[tokio::test]
async fn a_tenant_alone_may_use_every_slot_up_to_its_maximum() {
    let slots = FairSlots::new(4).with_max_per_tenant(3);
    let held: Vec<_> = (0..3).filter_map(|_| try_now(&slots, "a")).collect();
    assert_eq!(held.len(), 3);
    assert!(try_now(&slots, "a").is_none(), "at most 3 per tenant");
    assert!(try_now(&slots, "b").is_some(), "the fourth is another's");
}

#[tokio::test]
async fn the_next_free_slot_goes_to_the_tenant_that_waited_not_the_busy_one() {
    let slots = FairSlots::new(2);
    let a1 = try_now(&slots, "a").unwrap();
    let _a2 = try_now(&slots, "a").unwrap();
    // a queues a third, then b arrives: a's release goes to b, although a asked first.
    let a3 = tokio::spawn({
        let s = slots.clone();
        async move { s.acquire("a").await }
    });
    tokio::task::yield_now().await;
    let b = tokio::spawn({
        let s = slots.clone();
        async move { s.acquire("b").await }
    });
    tokio::task::yield_now().await;
    drop(a1);
    let b = b.await.unwrap();
    assert_eq!(slots.held_by("b"), 1);
    assert!(!a3.is_finished());
    // b's share is one of two: when it is done, a's waiter runs.
    drop(b);
    let _a3 = a3.await.unwrap();
    assert_eq!(slots.held_by("a"), 2);
}

#[tokio::test]
async fn free_slots_go_round_robin_below_share_first() {
    let slots = FairSlots::new(2);
    let a1 = now(slots.acquire("a")).await;
    let a2 = now(slots.acquire("a")).await;
    let mut a3 = Box::pin(slots.acquire("a"));
    let mut b1 = Box::pin(slots.acquire("b"));
    assert!(pending(&mut a3) && pending(&mut b1));
    drop(a2); // asked back or finished: b is below its share and goes first
    let _b1 = now(b1).await;
    assert!(pending(&mut a3));
    drop(a1);
    now(a3).await;
}

#[tokio::test]
async fn waiting_tenants_share_in_turn() {
    let slots = FairSlots::new(4);
    let mut held: Vec<FairPermit> = (0..4).filter_map(|_| try_now(&slots, "a")).collect();
    let mut waiters = Vec::new();
    for tenant in ["a", "a", "a", "b", "b", "c"] {
        let s = slots.clone();
        waiters.push(tokio::spawn(async move { s.acquire(tenant).await }));
        tokio::task::yield_now().await;
    }
    // Four releases of a's: b, c and b get three (their shares of a 4-slot cap among
    // three tenants are 2, 2 and 2; a holds 1 then, under its share), a one.
    for _ in 0..4 {
        held.pop();
        tokio::task::yield_now().await;
    }
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(slots.held_by("b"), 2);
    assert_eq!(slots.held_by("c"), 1);
    assert_eq!(slots.held_by("a"), 1);
    assert_eq!(slots.available(), 0);
}

/// Tenants in the same standing are served in the order they came, each tenant's next
/// waiter after every other tenant waiting had its turn.
#[tokio::test]
async fn tenants_are_served_in_the_order_they_came() {
    let slots = FairSlots::new(1);
    let a = now(slots.acquire("a")).await;
    let mut c1 = Box::pin(slots.acquire("c"));
    let mut c2 = Box::pin(slots.acquire("c"));
    let mut b1 = Box::pin(slots.acquire("b"));
    assert!(pending(&mut c1) && pending(&mut c2) && pending(&mut b1));
    drop(a);
    let c1 = now(c1).await;
    assert!(pending(&mut c2) && pending(&mut b1));
    drop(c1);
    let b1 = now(b1).await;
    assert!(pending(&mut c2));
    drop(b1);
    now(c2).await;
}

/// No slot idles while a tenant waits: every waiting tenant at its share still gets a free
/// slot, the first in turn.
#[tokio::test]
async fn a_free_slot_goes_to_a_waiter_at_its_share_rather_than_idle() {
    let slots = FairSlots::new(10);
    let _a: Vec<_> = (0..4).filter_map(|_| try_now(&slots, "a")).collect();
    let _b: Vec<_> = (0..4).filter_map(|_| try_now(&slots, "b")).collect();
    let mut c: Vec<_> = (0..2).filter_map(|_| try_now(&slots, "c")).collect();
    assert_eq!(slots.available(), 0);
    // a and b hold their shares (4 of 10 among three tenants) and wait for a fifth.
    let mut a5 = Box::pin(slots.acquire("a"));
    let mut b5 = Box::pin(slots.acquire("b"));
    assert!(pending(&mut a5) && pending(&mut b5));
    c.pop();
    let _a5 = now(a5).await;
    assert!(pending(&mut b5));
    assert_eq!(slots.available(), 0);
}

#[tokio::test]
async fn a_cancelled_waiter_takes_nothing() {
    let slots = FairSlots::new(1);
    let a = try_now(&slots, "a").unwrap();
    let cancelled = slots.acquire("b");
    drop(cancelled.now_or_never());
    drop(a);
    assert_eq!(slots.available(), 1);
    assert!(try_now(&slots, "c").is_some());
}

#[tokio::test]
async fn a_dropped_waiter_leaves_and_a_dropped_slot_is_free() {
    let slots = FairSlots::new(1);
    let a = now(slots.acquire("a")).await;
    let mut b = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b));
    drop(b);
    drop(a);
    let _c = now(slots.acquire("c")).await;
    assert_eq!(slots.held_by("a") + slots.held_by("b"), 0);
    assert_eq!(slots.held_by("c"), 1);
}

/// A waiter dropped after its slot was granted but before it saw the grant gives the slot
/// back to the next in turn.
#[tokio::test]
async fn a_waiter_dropped_after_its_grant_gives_the_slot_back() {
    let slots = FairSlots::new(1);
    let a = now(slots.acquire("a")).await;
    let mut b = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b));
    let mut c = Box::pin(slots.acquire("c"));
    assert!(pending(&mut c));
    drop(a); // granted to b, which never looks again
    assert_eq!(slots.held_by("b"), 1);
    drop(b);
    let _c = now(c).await;
    assert_eq!((slots.held_by("b"), slots.available()), (0, 0));
}

/// The finding: one namespace held every pull slot (its pulls hanging) and another waited
/// for their deadline. With preemption the newest of its slots is asked back at once.
#[tokio::test]
async fn a_tenant_over_its_share_gives_a_slot_back() {
    let slots = FairSlots::new(4).with_preemption();
    let mut a = Vec::new();
    for _ in 0..4 {
        a.push(now(slots.acquire("a")).await);
    }
    let mut b = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b));
    // The newest of a's slots is asked back, and only that one.
    now(a[3].preempted()).await;
    for slot in &mut a[..3] {
        assert!(pending(&mut Box::pin(slot.preempted())));
    }
    a.pop(); // the holder stops
    let mut b1 = now(b).await;
    assert_eq!((slots.held_by("a"), slots.held_by("b")), (3, 1));
    // A second waiter of b: a is still above the share of 2, one more comes back.
    let mut b2 = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b2));
    now(a[2].preempted()).await;
    a.pop();
    let _b2 = now(b2).await;
    assert_eq!((slots.held_by("a"), slots.held_by("b")), (2, 2));
    // At its share, a gives nothing more back for a third waiter of b.
    let mut b3 = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b3));
    assert!(pending(&mut Box::pin(a[1].preempted())));
    assert!(pending(&mut Box::pin(b1.preempted())));
    drop(a);
    now(b3).await;
}

/// Without preemption (sandbox slots: a call is never stopped for another tenant) nothing is
/// asked back: the waiter gets the next slot freed.
#[tokio::test]
async fn without_preemption_no_slot_is_asked_back() {
    let slots = FairSlots::new(2);
    let mut a: Vec<_> = (0..2).filter_map(|_| try_now(&slots, "a")).collect();
    let mut b = Box::pin(slots.acquire("b"));
    assert!(pending(&mut b));
    for slot in &mut a {
        assert!(pending(&mut Box::pin(slot.preempted())));
    }
    a.pop();
    now(b).await;
}
