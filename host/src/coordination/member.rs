//! A sharding member: it renews its own member Lease (recording the ring it applied), reads
//! the others', and computes the ring it sees and the last ring every member applied. Keys
//! move without overlap: a replica stops taking a key as soon as it sees a ring where it is
//! not the owner, records that ring as applied only once its calls on such keys have ended,
//! and takes a gained key only once every member of the new ring has recorded it (a member
//! that left has let its Lease expire, which it does only after it stopped acting).

use super::config::{APPLIED_RING_ANNOTATION, LeaseTimings, RING_LABEL, check_identity};
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

/// Another member's last valid record.
struct Seen {
    observed: Observed,
    /// The ring it recorded as applied.
    recorded: String,
}

/// One member's state.
pub struct Member<S> {
    store: S,
    ring_name: String,
    identity: Arc<str>,
    lease_name: String,
    timings: LeaseTimings,
    wall: WallClock,
    /// Each other member's last valid record (named for it, held by it): when it was seen
    /// changing, and the ring it recorded. A member leaves the ring only once that record
    /// has stayed unchanged for its lease duration, whatever happens to its Lease meanwhile
    /// (deleted, unlabelled, its holder rewritten): it may still be acting.
    observed: HashMap<String, Seen>,
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
        let wall = MicroTime(super::election::micros((self.wall)()));
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

    /// Reads the ring's member Leases: the ring it sees now (itself, and every member whose
    /// last valid record has not expired), and whether every member recorded it. A record
    /// is valid when the Lease is named `<ring>-<identity>` and held by that identity; an
    /// invalid one renews nothing, and a member whose Lease vanished stays until its last
    /// valid record expires on this replica's clock.
    pub async fn observe(&mut self) -> Result<(), LeaseError> {
        let leases = self
            .store
            .list(&format!("{RING_LABEL}={}", self.ring_name))
            .await?;
        let now = Instant::now();
        let prefix = format!("{}-", self.ring_name);
        let mut listed = Vec::new();
        for lease in &leases {
            let Some(identity) = lease
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(&prefix))
            else {
                continue;
            };
            if *identity == *self.identity || check_identity(identity).is_err() {
                continue;
            }
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            if holder != Some(identity) {
                continue;
            }
            listed.push(identity.to_string());
            let recorded = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED_RING_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            match self.observed.get_mut(identity) {
                Some(seen) => {
                    let mut slot = Some(seen.observed.clone());
                    Observed::update(&mut slot, lease, &self.timings, now);
                    let updated = slot.expect("observed");
                    if updated != seen.observed {
                        seen.recorded = recorded;
                    }
                    seen.observed = updated;
                }
                None => {
                    let mut slot = None;
                    Observed::update(&mut slot, lease, &self.timings, now);
                    self.observed.insert(
                        identity.to_string(),
                        Seen {
                            observed: slot.expect("observed"),
                            recorded,
                        },
                    );
                }
            }
        }
        // Forget a member once its last valid record expired and it is no longer listed (a
        // listed, expired record is kept so that it does not count as new again).
        self.observed
            .retain(|id, seen| !seen.observed.expired(now) || listed.contains(id));
        let mut alive = vec![self.identity.to_string()];
        let mut records = HashMap::new();
        for (id, seen) in &self.observed {
            if !seen.observed.expired(now) {
                alive.push(id.clone());
                records.insert(id.clone(), seen.recorded.clone());
            }
        }
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
        self.recorded.clear();
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
        let sent = shared.gate.stamp();
        match tokio::time::timeout(retry, member.renew()).await {
            Ok(Ok(())) => {
                // The previous renewal no longer holds (a pause, a stall, a suspended VM,
                // also one during this renewal): the view it acted on may be stale, and the
                // others may have taken its keys meanwhile. The gate reopens on no ring at
                // all; it takes keys again only from the ring it reads next.
                if !shared.gate.is_valid() && member.current.is_some() {
                    tracing::warn!(identity = %member.identity, "renewed the member lease after it lapsed: rejoining the ring before taking keys again");
                    member.reset();
                    shared.gate.set(Scope::Shard(member.view()));
                }
                shared.gate.renewed(sent, member.timings.renew_deadline);
            }
            Ok(Err(err)) => {
                tracing::warn!(identity = %member.identity, "member lease not renewed: {err}")
            }
            Err(_) => tracing::warn!(identity = %member.identity, "member lease renewal timed out"),
        }
        let mut again = false;
        if !member.healthy() || !shared.gate.is_valid() {
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

    /// Leases in memory; each list first notes whether the gate lets any of 50 keys in:
    /// what the workers could do while the member waits for the ring.
    struct Watching {
        inner: MemoryLeases,
        gate: Arc<std::sync::Mutex<Option<super::super::Gate>>>,
        open: Arc<std::sync::Mutex<Vec<bool>>>,
    }

    impl LeaseStore for Watching {
        fn get(
            &self,
            name: &str,
        ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send {
            self.inner.get(name)
        }
        fn create(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send {
            self.inner.create(lease)
        }
        fn replace(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send {
            self.inner.replace(lease)
        }
        fn list(
            &self,
            selector: &str,
        ) -> impl Future<Output = Result<Vec<Lease>, LeaseError>> + Send {
            if let Some(gate) = self.gate.lock().unwrap().as_ref() {
                let open = (0..50)
                    .map(|i| crate::cluster::ObjKey::new(Some("ns"), &format!("k{i}")))
                    .any(|k| gate.enter(&k).is_some());
                self.open.lock().unwrap().push(open);
            }
            self.inner.list(selector)
        }
        fn delete(&self, name: &str) -> impl Future<Output = Result<(), LeaseError>> + Send {
            self.inner.delete(name)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_woken_from_a_pause_takes_no_key_before_it_read_the_ring_again() {
        let store = Watching {
            inner: MemoryLeases::default().as_caller("a"),
            gate: Arc::default(),
            open: Arc::default(),
        };
        let (gate, open) = (store.gate.clone(), store.open.clone());
        let config = super::super::CoordinationConfig {
            mode: super::super::Mode::Sharding,
            lease_name: "kubeplug".into(),
            lease_namespace: "default".into(),
            identity: "a".into(),
            timings: LeaseTimings::default(),
        };
        let registry = crate::metrics::MetricsRegistry::default();
        let coordinator =
            super::super::Coordinator::start_with(store, &config, &registry, system_clock());
        *gate.lock().unwrap() = Some(coordinator.gate());
        tokio::time::sleep(Duration::from_secs(10)).await;
        let key = crate::cluster::ObjKey::new(Some("ns"), "k0");
        assert!(coordinator.gate().enter(&key).is_some(), "a owns every key");
        // A pause: the monotonic clock runs 12 s (past the renew deadline) while the loop
        // does not. When it wakes it renews, then reads the ring: the gate stays closed
        // meanwhile, although the member Lease is renewed.
        open.lock().unwrap().clear();
        tokio::time::advance(Duration::from_secs(12)).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let open = open.lock().unwrap().clone();
        assert_eq!(open.first(), Some(&false), "{open:?}");
        assert!(coordinator.gate().enter(&key).is_some(), "rejoined");
        coordinator.stop(Duration::from_secs(5)).await;
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
    async fn leaving_deletes_the_member_lease_and_the_others_take_over_once_it_expires() {
        let store = MemoryLeases::default();
        let (mut a, mut b) = (member(&store, "a"), member(&store, "b"));
        for _ in 0..4 {
            round(&mut [&mut a, &mut b]).await;
        }
        b.leave().await.unwrap();
        assert!(store.peek("kubeplug-b").is_none());
        // A deletion says nothing a foreign client could not say: b's keys wait for its
        // last record to expire.
        round(&mut [&mut a]).await;
        assert!(owners(&[&a, &b])[0] < 300);
        tokio::time::advance(Duration::from_secs(15)).await;
        round(&mut [&mut a]).await;
        round(&mut [&mut a]).await;
        assert_eq!(owners(&[&a, &b]), vec![300, 0]);
    }

    /// Rewrites member `of`'s Lease as a foreign client would.
    async fn tamper(store: &MemoryLeases, of: &str, edit: impl FnOnce(&mut Lease)) {
        let mut lease = store.peek(&format!("kubeplug-{of}")).unwrap();
        edit(&mut lease);
        store.as_caller("mallory").replace(lease).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_tampered_member_lease_moves_no_key_while_its_member_still_acts() {
        type Edit = Box<dyn FnOnce(&mut Lease)>;
        let cases: Vec<(&str, Option<Edit>)> = vec![
            ("deleted", None),
            (
                "unlabelled",
                Some(Box::new(|l: &mut Lease| l.metadata.labels = None)),
            ),
            (
                "holder rewritten",
                Some(Box::new(|l: &mut Lease| {
                    l.spec.as_mut().unwrap().holder_identity = Some("mallory".into())
                })),
            ),
            (
                "holder cleared, released-looking",
                Some(Box::new(|l: &mut Lease| {
                    let spec = l.spec.as_mut().unwrap();
                    spec.holder_identity = None;
                    spec.lease_duration_seconds = Some(1);
                })),
            ),
        ];
        for (case, edit) in cases {
            let store = MemoryLeases::default();
            let (mut a, mut b) = (member(&store, "a"), member(&store, "b"));
            for _ in 0..4 {
                round(&mut [&mut a, &mut b]).await;
            }
            let before = owners(&[&a, &b]);
            match edit {
                None => store
                    .as_caller("mallory")
                    .delete("kubeplug-b")
                    .await
                    .unwrap(),
                Some(edit) => tamper(&store, "b", edit).await,
            }
            // b is still acting on its view; a looks several times before b renews.
            for _ in 0..5 {
                tokio::time::advance(Duration::from_secs(2)).await;
                round(&mut [&mut a]).await;
                assert_eq!(owners(&[&a, &b]), before, "{case}: a took b's keys");
            }
            // b renews (repairing its Lease): nothing moves.
            round(&mut [&mut b, &mut a]).await;
            round(&mut [&mut b, &mut a]).await;
            assert_eq!(owners(&[&a, &b]), before, "{case}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fake_member_that_never_renews_is_dropped_after_the_configured_duration() {
        let store = MemoryLeases::default();
        let mut a = member(&store, "a");
        for _ in 0..4 {
            round(&mut [&mut a]).await;
        }
        assert_eq!(owners(&[&a]), vec![300]);
        // A foreign client adds a member Lease that asks for 68 years and never renews.
        let fake = Lease {
            metadata: ObjectMeta {
                name: Some("kubeplug-fake".into()),
                labels: Some([(RING_LABEL.to_string(), "kubeplug".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("fake".into()),
                lease_duration_seconds: Some(i32::MAX),
                ..LeaseSpec::default()
            }),
        };
        store.as_caller("mallory").create(fake).await.unwrap();
        round(&mut [&mut a]).await;
        assert!(owners(&[&a])[0] < 300, "a gave up the fake member's keys");
        let mut elapsed = Duration::ZERO;
        while owners(&[&a])[0] < 300 {
            tokio::time::advance(Duration::from_secs(2)).await;
            elapsed += Duration::from_secs(2);
            round(&mut [&mut a]).await;
            assert!(
                elapsed <= Duration::from_secs(20),
                "the fake member held its keys"
            );
        }
        assert!(elapsed >= Duration::from_secs(14), "{elapsed:?}");
        // Still listed, unchanged: it does not come back as new.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(2)).await;
            round(&mut [&mut a]).await;
            assert_eq!(owners(&[&a]), vec![300]);
        }
    }
}
