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

/// The system's wall clock, to the microsecond (what a Lease's times keep).
pub fn system_clock() -> WallClock {
    Arc::new(|| micros(Timestamp::now()))
}

/// `t` truncated to the microsecond.
pub(crate) fn micros(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t)
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (it just created, took or renewed it).
    Leading,
    /// Another replica holds it and has renewed it within the lease duration.
    HeldBy(String),
    /// The Lease was deleted or written by someone other than this replica (it names this
    /// replica or nobody, or is missing) and its last record has not stayed unchanged for a
    /// lease duration yet: nobody may act on it before then, this replica included.
    Contested {
        /// The holder of the last record seen, if any.
        last_holder: Option<String>,
    },
}

/// When this replica last saw a Lease's record change, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    version: String,
    at: Instant,
    holder: Option<String>,
    /// The lease duration the record asked for, when it was out of the sane range (it is
    /// then taken as the configured duration).
    insane: Option<i32>,
    duration: std::time::Duration,
}

/// The lease duration a Lease's record is taken to ask for: the configured one when it says
/// nothing, 0 or less, or more than [`MAX_DURATION_FACTOR`] times the configured duration (a
/// foreign holder must not stop all work indefinitely); never less than the retry period (a
/// holder notices a foreign write within one). The second value is the insane one, if any.
pub(crate) fn sane_duration(
    spec: &LeaseSpec,
    timings: &LeaseTimings,
) -> (std::time::Duration, Option<i32>) {
    let configured = timings.lease_duration;
    let most = configured.saturating_mul(MAX_DURATION_FACTOR);
    match spec.lease_duration_seconds {
        None => (configured, None),
        Some(s) if s > 0 && std::time::Duration::from_secs(s as u64) <= most => (
            std::time::Duration::from_secs(s as u64).max(timings.retry_period),
            None,
        ),
        Some(s) => (configured, Some(s)),
    }
}

/// How many times the configured lease duration a Lease may ask for before it is taken as
/// the configured duration.
pub const MAX_DURATION_FACTOR: u32 = 10;

impl Observed {
    /// Notes `lease` as seen at `now`; the time moves only when the record changed. A lease
    /// duration out of range is logged once per record, with its holder.
    pub(crate) fn update(
        slot: &mut Option<Observed>,
        lease: &Lease,
        timings: &LeaseTimings,
        now: Instant,
    ) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if slot.as_ref().is_some_and(|o| o.version == version) {
            return;
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let (duration, insane) = sane_duration(&spec, timings);
        let already = slot
            .as_ref()
            .is_some_and(|o| o.insane == insane && o.holder == holder);
        if let Some(value) = insane
            && !already
        {
            tracing::warn!(
                lease = %crate::contract::text::shown_max(lease.metadata.name.as_deref().unwrap_or_default(), 253),
                holder = %crate::contract::text::shown_max(holder.as_deref().unwrap_or_default(), 128),
                lease_duration_seconds = value,
                taken_as_s = duration.as_secs_f64(),
                "lease duration out of range: taken as the configured duration"
            );
        }
        *slot = Some(Observed {
            version,
            at: now,
            holder,
            insane,
            duration,
        });
    }

    /// Whether a Lease last seen changing at this time has expired at `now`.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.at + self.duration <= now
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
    /// The resourceVersion and renewTime of this replica's last write: a record with neither
    /// was written by someone else.
    written: Option<(String, Option<MicroTime>)>,
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
            written: None,
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

    /// Whether this replica wrote `lease` as it is now (its resourceVersion, or its holder
    /// and renewTime when the answer to the write was lost).
    fn is_own(&self, lease: &Lease) -> bool {
        let Some((version, renewed)) = &self.written else {
            return false;
        };
        let spec = lease.spec.as_ref();
        lease.metadata.resource_version.as_ref() == Some(version)
            || (spec.and_then(|s| s.holder_identity.as_deref()) == Some(&self.identity)
                && renewed.is_some()
                && spec.and_then(|s| s.renew_time.as_ref()) == renewed.as_ref())
    }

    /// One attempt to take or renew the Lease. Only a record this replica wrote itself is
    /// renewed at once; any other (deleted, naming this replica or nobody, or held by
    /// another) is taken only once it stayed unchanged for its lease duration.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let now = Instant::now();
        let wall = MicroTime(micros((self.wall)()));
        let Some(mut lease) = self.store.get(&self.lease_name).await? else {
            // Deleted (or never created): whoever held the last record seen may still act
            // until it would have expired.
            if let Some(observed) = &self.observed
                && observed.holder.is_some()
                && !observed.expired(now)
            {
                return Ok(Attempt::Contested {
                    last_holder: observed.holder.clone(),
                });
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_seconds()),
                    acquire_time: Some(wall.clone()),
                    renew_time: Some(wall.clone()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            self.written = Some((String::new(), Some(wall)));
            let created = self.store.create(lease).await?;
            self.wrote(&created, now);
            return Ok(Attempt::Leading);
        };
        let own = self.is_own(&lease);
        Observed::update(&mut self.observed, &lease, &self.timings, now);
        let observed = self.observed.clone().expect("just observed");
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = observed.holder.clone();
        if !own && !observed.expired(now) {
            return Ok(match holder {
                Some(h) if h != self.identity => Attempt::HeldBy(h),
                last_holder => Attempt::Contested { last_holder },
            });
        }
        if holder.as_deref() != Some(&self.identity) || !own {
            spec.acquire_time = Some(wall.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds());
        spec.renew_time = Some(wall.clone());
        self.written = Some((String::new(), Some(wall)));
        let written = self.store.replace(lease).await?;
        self.wrote(&written, now);
        Ok(Attempt::Leading)
    }

    fn wrote(&mut self, lease: &Lease, now: Instant) {
        let renewed = lease.spec.as_ref().and_then(|s| s.renew_time.clone());
        self.written = Some((
            lease.metadata.resource_version.clone().unwrap_or_default(),
            renewed,
        ));
        Observed::update(&mut self.observed, lease, &self.timings, now);
    }

    /// Gives the Lease up if this replica holds it: no holder and a one-second duration, so
    /// the next candidate takes it at its next attempt.
    pub async fn release(&mut self) -> Result<bool, LeaseError> {
        let Some(mut lease) = self.store.get(&self.lease_name).await? else {
            return Ok(false);
        };
        if !self.is_own(&lease) {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return Ok(false);
        }
        let wall = MicroTime(micros((self.wall)()));
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(wall);
        self.store.replace(lease).await?;
        self.written = None;
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
    async fn renewals_keep_the_lease_and_a_release_frees_it_after_a_retry_period() {
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
        // Released: taken after one retry period unchanged (the release's own one second,
        // raised to the retry period: a forged release is noticed by the holder within it).
        assert_eq!(
            b.try_acquire_or_renew().await.unwrap(),
            Attempt::Contested { last_holder: None }
        );
        tokio::time::advance(Duration::from_secs(2)).await;
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
            &timings(),
            Instant::now() - Duration::from_secs(16),
        );
        Observed::update(
            &mut c.observed,
            &lease,
            &timings(),
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

    fn rewrite(store: &MemoryLeases, caller: &str, edit: impl FnOnce(&mut LeaseSpec)) {
        let mut lease = store.peek("kubeplug").unwrap();
        edit(lease.spec.as_mut().unwrap());
        let stored = store.as_caller(caller);
        futures::executor::block_on(stored.replace(lease)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_foreign_write_naming_the_follower_makes_nobody_lead_until_it_expires() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (elector(&store, "a"), elector(&store, "b"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        rewrite(&store, "mallory", |s| s.holder_identity = Some("b".into()));
        // b did not write it: it does not lead on a record someone else wrote for it.
        assert_eq!(
            b.try_acquire_or_renew().await.unwrap(),
            Attempt::Contested {
                last_holder: Some("b".into())
            }
        );
        // a sees the Lease moved: it stops (and does not take it back before expiry).
        assert_eq!(
            a.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("b".into())
        );
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_ne!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        assert_ne!(a.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        assert_eq!(
            a.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("b".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_lease_is_recreated_only_once_its_last_record_expired() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (elector(&store, "a"), elector(&store, "b"));
        a.try_acquire_or_renew().await.unwrap();
        b.try_acquire_or_renew().await.unwrap();
        store.as_caller("mallory").delete("kubeplug").await.unwrap();
        let contested = Attempt::Contested {
            last_holder: Some("a".into()),
        };
        // Neither the leader that lost it nor the follower recreates it at once.
        assert_eq!(a.try_acquire_or_renew().await.unwrap(), contested);
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), contested);
        assert!(store.peek("kubeplug").is_none());
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(b.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
        assert_eq!(
            a.try_acquire_or_renew().await.unwrap(),
            Attempt::HeldBy("b".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_absurd_lease_duration_counts_as_the_configured_one() {
        for absurd in [i32::MAX, 0, -5, 151] {
            let store = MemoryLeases::default();
            let mut mallory = elector(&store, "mallory");
            mallory.try_acquire_or_renew().await.unwrap();
            rewrite(&store, "mallory", |s| {
                s.lease_duration_seconds = Some(absurd)
            });
            let mut b = elector(&store, "b");
            assert_eq!(
                b.try_acquire_or_renew().await.unwrap(),
                Attempt::HeldBy("mallory".into())
            );
            tokio::time::advance(Duration::from_secs(15)).await;
            assert_eq!(
                b.try_acquire_or_renew().await.unwrap(),
                Attempt::Leading,
                "{absurd}"
            );
        }
        // Within the range, a record's own duration counts.
        let (spec, t) = (
            LeaseSpec {
                lease_duration_seconds: Some(150),
                ..LeaseSpec::default()
            },
            timings(),
        );
        assert_eq!(sane_duration(&spec, &t), (Duration::from_secs(150), None));
    }
}
