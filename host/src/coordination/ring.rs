//! The ring of sharding members and which member owns a key, by rendezvous
//! (highest-random-weight) hashing: a member that comes or goes moves only its own keys.

use sha2::{Digest, Sha256};

/// The members of a ring, sorted and without duplicates; two replicas that see the same
/// members compute the same owner for every key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Ring {
    members: Vec<String>,
}

impl Ring {
    /// A ring of `members` (order and duplicates do not matter).
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(members: I) -> Ring {
        let mut members: Vec<String> = members.into_iter().map(Into::into).collect();
        members.sort();
        members.dedup();
        Ring { members }
    }

    /// Its members, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Whether `identity` is a member.
    pub fn contains(&self, identity: &str) -> bool {
        self.members
            .binary_search_by(|m| m.as_str().cmp(identity))
            .is_ok()
    }

    /// The member that owns `key`: the one with the highest weight for it (`None` for an
    /// empty ring). The weight is the first 8 bytes of SHA-256 over member and key: stable
    /// across versions and platforms, so replicas of different builds agree.
    pub fn owner(&self, key: &str) -> Option<&str> {
        self.members
            .iter()
            .map(|m| (weight(m, key), m))
            .max()
            .map(|(_, m)| m.as_str())
    }

    /// A short identifier of this membership (what a member records as the ring it applied).
    pub fn id(&self) -> String {
        let mut hash = Sha256::new();
        for m in &self.members {
            hash.update(m.as_bytes());
            hash.update([0]);
        }
        hash.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn weight(member: &str, key: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(member.as_bytes());
    hash.update([0]);
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("ns-{}/deploy-{i}", i % 7)).collect()
    }

    #[test]
    fn order_and_duplicates_do_not_change_a_ring() {
        let a = Ring::new(["b", "a", "c", "a"]);
        let b = Ring::new(["c", "b", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.id(), b.id());
        assert_ne!(a.id(), Ring::new(["a", "b"]).id());
        assert!(a.contains("b") && !a.contains("d"));
        assert_eq!(Ring::default().owner("x"), None);
    }

    #[test]
    fn keys_split_roughly_evenly() {
        let ring = Ring::new(["r1", "r2", "r3"]);
        let mut counts = std::collections::HashMap::<&str, usize>::new();
        for k in keys(3000) {
            *counts.entry(ring.owner(&k).unwrap()).or_default() += 1;
        }
        for (member, n) in counts {
            assert!((800..1200).contains(&n), "{member} owns {n} of 3000");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_own_keys() {
        let before = Ring::new(["r1", "r2", "r3"]);
        let after = Ring::new(["r1", "r3"]);
        let mut moved = 0;
        for k in keys(2000) {
            let (old, new) = (before.owner(&k).unwrap(), after.owner(&k).unwrap());
            if old != new {
                assert_eq!(old, "r2", "{k} moved from {old}, which stayed");
                moved += 1;
            }
        }
        assert!(moved > 400, "r2's keys moved: {moved}");
    }

    #[test]
    fn a_member_joining_takes_keys_only_for_itself() {
        let before = Ring::new(["r1", "r2"]);
        let after = Ring::new(["r1", "r2", "r3"]);
        for k in keys(2000) {
            let (old, new) = (before.owner(&k).unwrap(), after.owner(&k).unwrap());
            assert!(old == new || new == "r3", "{k}: {old} -> {new}");
        }
    }
}
