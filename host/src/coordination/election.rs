//! Leader election over one Lease, with client-go's semantics: a candidate takes the Lease
//! when it is free or its holder has not renewed it for a lease duration (measured on this
//! replica's clock from when it last saw the record change, so clock skew between replicas
//! does not matter); a leader renews every retry period and stops acting once it could not
//! renew for the renew deadline, before the others can take over.

use super::config::LeaseTimings;
use super::store::{LeaseError, LeaseStore};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use tokio::time::Instant;

/// The wall clock written into Leases (`renewTime`, `acquireTime`); tests skew it.
pub type WallClock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system's wall clock.
pub fn system_clock() -> WallClock {
    Arc::new(Timestamp::now)
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (it just created, took or renewed it).
    Leading,
    /// Another replica holds it and has renewed it within the lease duration.
    HeldBy(String),
}

/// When this replica last saw a Lease's record change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    version: String,
    at: Instant,
}

impl Observed {
    /// Notes `lease` as seen at `now`; the time moves only when the record changed.
    pub(crate) fn update(slot: &mut Option<Observed>, lease: &Lease, now: Instant) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if slot.as_ref().is_none_or(|o| o.version != version) {
            *slot = Some(Observed { version, at: now });
        }
    }

    /// Whether a Lease last seen changing at this time has expired at `now`.
    pub(crate) fn expired(&self, spec: &LeaseSpec, fallback: &LeaseTimings, now: Instant) -> bool {
        let duration = spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .map(|s| std::time::Duration::from_secs(s as u64))
            .unwrap_or(fallback.lease_duration);
        self.at + duration <= now
    }
}

/// One candidate for one leader Lease.
pub struct Elector<S> {
    store: S,
    lease_name: String,
    identity: String,
    timings: LeaseTimings,
    wall: WallClock,
    observed: Option<Observed>,
}

impl<S: LeaseStore> Elector<S> {
    /// A candidate named `identity` for the Lease `lease_name` in `store`.
    pub fn new(
        store: S,
        lease_name: &str,
        identity: &str,
        timings: LeaseTimings,
        wall: WallClock,
    ) -> Self {
        Elector {
            store,
            lease_name: lease_name.to_string(),
            identity: identity.to_string(),
            timings,
            wall,
            observed: None,
        }
    }

    /// The timings it runs with.
    pub fn timings(&self) -> LeaseTimings {
        self.timings
    }

    fn duration_seconds(&self) -> i32 {
        self.timings
            .lease_duration
            .as_secs()
            .clamp(1, i32::MAX as u64) as i32
    }

    /// One attempt to take or renew the Lease.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let now = Instant::now();
        let wall = MicroTime((self.wall)());
        let Some(mut lease) = self.store.get(&self.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_seconds()),
                    acquire_time: Some(wall.clone()),
                    renew_time: Some(wall),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let created = self.store.create(lease).await?;
            Observed::update(&mut self.observed, &created, now);
            return Ok(Attempt::Leading);
        };
        Observed::update(&mut self.observed, &lease, now);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if let Some(holder) = &holder {
            let observed = self.observed.as_ref().expect("just observed");
            if *holder != self.identity && !observed.expired(spec, &self.timings, now) {
                return Ok(Attempt::HeldBy(holder.clone()));
            }
        }
        if holder.as_deref() != Some(&self.identity) {
            spec.acquire_time = Some(wall.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(wall);
        let written = self.store.replace(lease).await?;
        Observed::update(&mut self.observed, &written, now);
        Ok(Attempt::Leading)
    }

    /// Gives the Lease up if this replica holds it: no holder and a one-second duration, so
    /// the next candidate takes it at its next attempt.
    pub async fn release(&mut self) -> Result<bool, LeaseError> {
        let Some(mut lease) = self.store.get(&self.lease_name).await? else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return Ok(false);
        }
        let wall = MicroTime((self.wall)());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(wall);
        self.store.replace(lease).await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::store::MemoryLeases;
    use std::time::Duration;

    fn timings() -> LeaseTimings {
        LeaseTimings::default()
    }

    fn elector(store: &MemoryLeases, id: &str) -> Elector<MemoryLeases> {
        Elector::new(
            store.as_caller(id),
            "kubeplug",
            id,
            timings(),
            system_clock(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_candidate_leads_and_the_second_waits_out_the_lease() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (elector(&store, "a"), elector(&store, "b"));
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        assert_eq!(
            b.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("a".into())
        );
        // a stops renewing (killed): b takes over only once a lease duration has passed
        // since b saw the record last change.
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_eq!(
            b.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("a".into())
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        let spec = store.peek("kubeplug").unwrap().spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        // a comes back: the Lease is b's now.
        assert_eq!(
            a.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("b".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_the_lease_and_a_release_frees_it_at_once() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (elector(&store, "a"), elector(&store, "b"));
        a.try_acquire_or_renew().await.unwrap();
        for _ in 0..20 {
            tokio::time::advance(Duration::from_secs(2)).await;
            assert_eq!(a.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
            assert_eq!(
                b.try_acquire_or_renew().await.unwrap(),
                Attempt::HeldBy("a".into())
            );
        }
        assert!(a.release().await.unwrap());
        assert!(!b.release().await.unwrap(), "b holds nothing to release");
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
    }

    #[tokio::test(start_paused = true)]
    async fn clock_skew_between_replicas_does_not_expire_a_renewed_lease() {
        let store = MemoryLeases::default();
        // a's wall clock is an hour behind: its renewTime looks long expired to anyone who
        // compared it with their own clock.
        let behind: WallClock = Arc::new(|| {
            Timestamp::now()
                .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(3600))
                .unwrap()
        });
        let mut a = Elector::new(store.as_caller("a"), "kubeplug", "a", timings(), behind);
        let mut b = elector(&store, "b");
        a.try_acquire_or_renew().await.unwrap();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(2)).await;
            a.try_acquire_or_renew().await.unwrap();
            assert_eq!(
                b.try_acquire_or_renew().await.unwrap(),
                Attempt::HeldBy("a".into())
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflicting_write_loses() {
        let store = MemoryLeases::default();
        let mut a = elector(&store, "a");
        a.try_acquire_or_renew().await.unwrap();
        tokio::time::advance(Duration::from_secs(16)).await;
        // b and c both see a's Lease expired; only one replace can win.
        let (mut b, mut c) = (elector(&store, "b"), elector(&store, "c"));
        b.observed = None;
        let lease = store.peek("kubeplug").unwrap();
        Observed::update(
            &mut b.observed,
            &lease,
            Instant::now() - Duration::from_secs(16),
        );
        Observed::update(
            &mut c.observed,
            &lease,
            Instant::now() - Duration::from_secs(16),
        );
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        // c read before b wrote: its write carries the old resourceVersion.
        let mut stale = lease.clone();
        stale.spec.as_mut().unwrap().holder_identity = Some("c".into());
        assert!(matches!(
            store.as_caller("c").replace(stale).await,
            Err(LeaseError::Conflict(_))
        ));
        assert_eq!(
            c.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("b".into())
        );
    }
}
