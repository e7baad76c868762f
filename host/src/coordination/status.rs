//! What `/plugins` and `/readyz` say about coordination: this replica's identity, whether it
//! leads, and the ring it sees.

use serde::Serialize;

/// A snapshot of this replica's part in coordination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CoordinationStatus {
    /// `leader-election` or `sharding`.
    pub mode: &'static str,
    /// This replica's identity.
    pub identity: String,
    /// The Lease (`namespace/name`), or the ring's name for sharding.
    pub lease: String,
    /// Leader election: whether this replica leads now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leading: Option<bool>,
    /// Leader election: the holder it last saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Sharding: the ring it sees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingStatus>,
}

/// The ring a sharding member sees.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RingStatus {
    /// The members whose Lease is current, this replica included while its own is.
    pub members: Vec<String>,
    /// The ring's identifier (what members record as applied).
    pub id: String,
    /// Whether every member has applied it (keys gained wait for this).
    pub settled: bool,
}

impl CoordinationStatus {
    /// One line for `/readyz`: `leader`, `follower`, or the ring membership.
    pub fn summary(&self) -> String {
        match (&self.leading, &self.ring) {
            (Some(true), _) => format!("leader ({})", self.identity),
            (Some(false), _) => format!(
                "follower ({}; leader {})",
                self.identity,
                self.leader.as_deref().unwrap_or("none")
            ),
            (None, Some(ring)) => format!(
                "ring member ({} of {}{})",
                self.identity,
                ring.members.len(),
                if ring.settled { "" } else { ", settling" }
            ),
            (None, None) => format!("not a ring member yet ({})", self.identity),
        }
    }
}
