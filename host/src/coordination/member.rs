//! A sharding member: it renews its own member Lease (recording the ring it applied), reads
//! the others', and computes the ring it sees and the last ring every member applied. Keys
//! move without overlap: a replica stops taking a key as soon as it sees a ring where it is
//! not the owner, records that ring as applied only once its calls on such keys have ended,
//! and takes a gained key only once every member of the new ring has recorded it (a member
//! that left has let its Lease expire, which it does only after it stopped acting).

use super::config::{APPLIED_RING_ANNOTATION, LeaseTimings, RING_LABEL};
use super::election::{Observed, WallClock};
use super::gate::{Scope, ShardView};
use super::ring::Ring;
use super::store::{LeaseError, LeaseStore};
use super::{Shared, Stop};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::time::Instant;

/// One member's state.
pub struct Member<S> {
    store: S,
    ring_name: String,
    identity: Arc<str>,
    lease_name: String,
    timings: LeaseTimings,
    wall: WallClock,
    /// When each other member's Lease was last seen changing.
    observed: HashMap<String, Observed>,
    /// When this member last renewed its own Lease.
    last_renew: Option<Instant>,
    /// The ring it applied (calls on keys it lost have ended): what its next renewal records.
    applied: String,
    /// What its Lease records now (as of its last successful renewal).
    recorded: String,
    /// The ring it sees.
    current: Option<Ring>,
    /// The newest ring every member recorded.
    settled: Option<Ring>,
    /// The ring it sees but has not applied yet.
    pending: Option<Ring>,
}

impl<S: LeaseStore> Member<S> {
    /// Member `identity` of the ring `ring_name`, with its Lease `<ring_name>-<identity>`.
    pub fn new(
        store: S,
        ring_name: &str,
        identity: &str,
        timings: LeaseTimings,
        wall: WallClock,
    ) -> Self {
        Member {
            store,
            ring_name: ring_name.to_string(),
            identity: identity.into(),
            lease_name: format!("{ring_name}-{identity}"),
            timings,
            wall,
            observed: HashMap::new(),
            last_renew: None,
            applied: String::new(),
            recorded: String::new(),
            current: None,
            settled: None,
            pending: None,
        }
    }

    /// What the gate should let through now.
    pub fn view(&self) -> ShardView {
        ShardView {
            me: self.identity.clone(),
            current: self.current.clone(),
            settled: self.settled.clone(),
        }
    }

    /// The ring it waits to apply (until its calls on keys it lost have ended).
    pub fn pending(&self) -> Option<&Ring> {
        self.pending.as_ref()
    }

    /// Whether its own Lease was renewed within the renew deadline.
    pub fn healthy(&self) -> bool {
        self.last_renew
            .is_some_and(|t| t.elapsed() < self.timings.renew_deadline)
    }

    /// Renews its member Lease (creating it if missing), recording the ring it applied.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let now = Instant::now();
        let wall = MicroTime((self.wall)());
        let applied = self.applied.clone();
        let mut lease = match self.store.get(&self.lease_name).await? {
            Some(lease) => lease,
            None => Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    acquire_time: Some(wall.clone()),
                    ..LeaseSpec::default()
                }),
            },
        };
        let exists = lease.metadata.resource_version.is_some();
        lease
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(RING_LABEL.into(), self.ring_name.clone());
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(APPLIED_RING_ANNOTATION.into(), applied.clone());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.identity.to_string());
        spec.lease_duration_seconds = Some(
            self.timings
                .lease_duration
                .as_secs()
                .clamp(1, i32::MAX as u64) as i32,
        );
        spec.renew_time = Some(wall);
        match exists {
            true => self.store.replace(lease).await?,
            false => self.store.create(lease).await?,
        };
        self.last_renew = Some(now);
        self.recorded = applied;
        Ok(())
    }

    /// Reads the ring's member Leases: the ring it sees now (the members whose Lease changed
    /// within its duration, and itself), and whether every member recorded it.
    pub async fn observe(&mut self) -> Result<(), LeaseError> {
        let leases = self
            .store
            .list(&format!("{RING_LABEL}={}", self.ring_name))
            .await?;
        let now = Instant::now();
        let mut alive = vec![self.identity.to_string()];
        let mut records = HashMap::new();
        let mut seen = Vec::new();
        for lease in &leases {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let Some(holder) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else {
                continue;
            };
            if name == self.lease_name || *holder == *self.identity {
                continue;
            }
            let slot = self.observed.entry(name.clone()).or_insert_with(|| {
                let mut first = None;
                Observed::update(&mut first, lease, now);
                first.expect("just observed")
            });
            let mut current = Some(slot.clone());
            Observed::update(&mut current, lease, now);
            *slot = current.expect("observed");
            seen.push(name);
            if !slot.expired(&spec, &self.timings, now) {
                let recorded = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(APPLIED_RING_ANNOTATION))
                    .cloned()
                    .unwrap_or_default();
                records.insert(holder.clone(), recorded);
                alive.push(holder);
            }
        }
        self.observed.retain(|name, _| seen.contains(name));
        let ring = Ring::new(alive);
        if self.current.as_ref() != Some(&ring) {
            self.current = Some(ring.clone());
            self.pending = (ring.id() != self.applied).then_some(ring.clone());
        }
        let id = ring.id();
        let all_recorded = ring.members().iter().all(|m| match *m == *self.identity {
            true => self.recorded == id,
            false => records.get(m) == Some(&id),
        });
        if all_recorded {
            self.settled = Some(ring);
        }
        Ok(())
    }

    /// Its calls on keys it lost have ended: the ring it sees is applied, and its next
    /// renewal records it.
    pub fn applied_pending(&mut self) {
        if let Some(ring) = self.pending.take() {
            self.applied = ring.id();
        }
    }

    /// Its own Lease went stale: it sees no ring and has applied none, so when it renews
    /// again it rejoins as a new member.
    pub fn reset(&mut self) {
        self.current = None;
        self.settled = None;
        self.pending = None;
        self.applied.clear();
    }

    /// Deletes its member Lease (on shutdown, once its calls have ended), so the others
    /// take its keys at once.
    pub async fn leave(&mut self) -> Result<(), LeaseError> {
        self.reset();
        self.store.delete(&self.lease_name).await
    }

    /// The status `/plugins` shows.
    pub fn ring_status(&self) -> Option<super::status::RingStatus> {
        self.current.as_ref().map(|ring| super::status::RingStatus {
            members: ring.members().to_vec(),
            id: ring.id(),
            settled: self.settled.as_ref() == Some(ring),
        })
    }
}

/// Runs `member` until `stop` fires, narrowing and widening `shared.gate` as the ring changes.
pub(crate) async fn run<S: LeaseStore>(mut member: Member<S>, shared: Shared, mut stop: Stop) {
    let retry = member.timings.retry_period;
    loop {
        match tokio::time::timeout(retry, member.renew()).await {
            Ok(Ok(())) => {
                if let Some(renewed) = member.last_renew {
                    shared
                        .gate
                        .valid_until(renewed + member.timings.renew_deadline);
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(identity = %member.identity, "member lease not renewed: {err}")
            }
            Err(_) => tracing::warn!(identity = %member.identity, "member lease renewal timed out"),
        }
        let mut again = false;
        if !member.healthy() {
            if member.current.is_some() {
                tracing::error!(identity = %member.identity, renew_deadline_s = member.timings.renew_deadline.as_secs_f64(), "could not renew the member lease within the renew deadline: reconciling no key until it is renewed");
            }
            member.reset();
        } else {
            match tokio::time::timeout(retry, member.observe()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::warn!(identity = %member.identity, "member leases not read: {err}")
                }
                Err(_) => {
                    tracing::warn!(identity = %member.identity, "reading the member leases timed out")
                }
            }
            shared.gate.set(Scope::Shard(member.view()));
            if let Some(ring) = member.pending().cloned() {
                // Give up lost keys first: wait (a bounded while) for their calls to end.
                if tokio::time::timeout(retry, shared.gate.drained())
                    .await
                    .is_ok()
                {
                    member.applied_pending();
                    tracing::info!(identity = %member.identity, ring = %ring.id(), members = ?ring.members(), "applied a new ring");
                    // Record it now rather than a retry period later: the others wait for it.
                    again = true;
                }
            }
        }
        shared.gate.set(Scope::Shard(member.view()));
        shared.set_ring(member.ring_status());
        if again {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.changed() => break,
        }
    }
    shared.gate.set(Scope::Shard(ShardView {
        me: member.identity.clone(),
        current: None,
        settled: None,
    }));
    match member.leave().await {
        Ok(()) => {
            tracing::info!(identity = %member.identity, "left the ring (member lease deleted)")
        }
        Err(err) => {
            tracing::warn!(identity = %member.identity, "could not delete the member lease (the others take over once it expires): {err}")
        }
    }
    shared.set_ring(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::election::system_clock;
    use crate::coordination::store::MemoryLeases;
    use std::time::Duration;

    fn member(store: &MemoryLeases, id: &str) -> Member<MemoryLeases> {
        Member::new(
            store.as_caller(id),
            "kubeplug",
            id,
            LeaseTimings::default(),
            system_clock(),
        )
    }

    /// One round of every member, as its loop runs it (calls on lost keys end at once).
    async fn round(members: &mut [&mut Member<MemoryLeases>]) {
        for m in members.iter_mut() {
            let _ = m.renew().await;
            if m.healthy() {
                let _ = m.observe().await;
                m.applied_pending();
            } else {
                m.reset();
            }
        }
    }

    fn keys() -> Vec<String> {
        (0..300).map(|i| format!("ns/deploy-{i}")).collect()
    }

    /// No key is owned by two members at once; returns how many each owns.
    fn owners(members: &[&Member<MemoryLeases>]) -> Vec<usize> {
        let mut counts = vec![0; members.len()];
        for k in keys() {
            let owning: Vec<usize> = (0..members.len())
                .filter(|&i| members[i].view().owns(&k))
                .collect();
            assert!(owning.len() <= 1, "{k} owned by {owning:?}");
            for i in owning {
                counts[i] += 1;
            }
        }
        counts
    }

    #[tokio::test(start_paused = true)]
    async fn members_join_settle_and_split_the_keys() {
        let store = MemoryLeases::default();
        let (mut a, mut b, mut c) = (
            member(&store, "a"),
            member(&store, "b"),
            member(&store, "c"),
        );
        // Before any member has recorded the ring, nobody takes a key.
        a.renew().await.unwrap();
        a.observe().await.unwrap();
        assert_eq!(owners(&[&a]), vec![0]);
        for _ in 0..4 {
            round(&mut [&mut a, &mut b, &mut c]).await;
            owners(&[&a, &b, &c]);
        }
        let counts = owners(&[&a, &b, &c]);
        assert_eq!(counts.iter().sum::<usize>(), 300, "{counts:?}");
        assert!(counts.iter().all(|&n| (70..130).contains(&n)), "{counts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_members_keys_move_after_its_lease_expires_and_never_overlap() {
        let store = MemoryLeases::default();
        let (mut a, mut b, mut c) = (
            member(&store, "a"),
            member(&store, "b"),
            member(&store, "c"),
        );
        for _ in 0..4 {
            round(&mut [&mut a, &mut b, &mut c]).await;
        }
        // c is killed: it stops renewing. a and b keep running rounds every 2 s.
        let mut elapsed = Duration::ZERO;
        while owners(&[&a, &b]).iter().sum::<usize>() < 300 {
            tokio::time::advance(Duration::from_secs(2)).await;
            elapsed += Duration::from_secs(2);
            round(&mut [&mut a, &mut b]).await;
            // c, frozen, still believes in its old view: no overlap with it either, until
            // its lease expired for the others.
            if elapsed < Duration::from_secs(15) {
                owners(&[&a, &b, &c]);
            }
            assert!(elapsed < Duration::from_secs(30), "keys never moved");
        }
        assert!(
            elapsed >= Duration::from_secs(15),
            "moved before c's lease expired ({elapsed:?})"
        );
        // Expiry is counted from when the others last saw c's lease change (up to a round
        // late), then applying and recording the new ring take up to three rounds.
        assert!(elapsed <= Duration::from_secs(24), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_cannot_renew_stops_within_the_renew_deadline() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (member(&store, "a"), member(&store, "b"));
        for _ in 0..4 {
            round(&mut [&mut a, &mut b]).await;
        }
        assert!(owners(&[&a, &b]).iter().all(|&n| n > 0));
        store.fail_for("a", true);
        let mut elapsed = Duration::ZERO;
        while a.healthy() {
            tokio::time::advance(Duration::from_secs(2)).await;
            elapsed += Duration::from_secs(2);
            round(&mut [&mut a]).await;
        }
        assert!(elapsed <= Duration::from_secs(10), "{elapsed:?}");
        assert_eq!(owners(&[&a]), vec![0], "a takes nothing once unhealthy");
        // a's lease is not yet expired for b: b does not take a's keys yet.
        round(&mut [&mut b]).await;
        assert!(owners(&[&b])[0] < 300);
        // a recovers: it rejoins as a new member and takes keys only once the ring settles.
        store.fail_for("a", false);
        round(&mut [&mut a]).await;
        assert_eq!(owners(&[&a, &b])[0], 0, "a waits for b to record the ring");
        round(&mut [&mut b, &mut a]).await;
        round(&mut [&mut b, &mut a]).await;
        let counts = owners(&[&a, &b]);
        assert_eq!(counts.iter().sum::<usize>(), 300, "{counts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gained_key_waits_for_the_previous_owner_to_acknowledge() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (member(&store, "a"), member(&store, "b"));
        for _ in 0..4 {
            round(&mut [&mut a]).await;
        }
        assert_eq!(owners(&[&a]), vec![300]);
        // b joins and sees {a, b}; a has not looked yet: b must not take a single key.
        b.renew().await.unwrap();
        b.observe().await.unwrap();
        b.applied_pending();
        b.renew().await.unwrap();
        b.observe().await.unwrap();
        assert_eq!(owners(&[&a, &b]), vec![300, 0]);
        // a sees b: it gives up b's keys at once and records the ring...
        a.renew().await.unwrap();
        a.observe().await.unwrap();
        let given_up = owners(&[&a, &b]);
        assert!(given_up[0] < 300 && given_up[1] == 0, "{given_up:?}");
        a.applied_pending();
        a.renew().await.unwrap();
        // ...and only then b takes them.
        b.observe().await.unwrap();
        let counts = owners(&[&a, &b]);
        assert_eq!(counts.iter().sum::<usize>(), 300, "{counts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn leaving_deletes_the_member_lease_and_the_others_take_over_at_once() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (member(&store, "a"), member(&store, "b"));
        for _ in 0..4 {
            round(&mut [&mut a, &mut b]).await;
        }
        b.leave().await.unwrap();
        assert!(store.peek("kubeplug-b").is_none());
        round(&mut [&mut a]).await;
        round(&mut [&mut a]).await;
        assert_eq!(owners(&[&a, &b]), vec![300, 0]);
    }
}
