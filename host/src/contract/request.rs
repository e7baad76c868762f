//! What the host sends a plugin for one key.

use super::ObjectRef;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Why a reconcile runs. Advisory: plugins converge from the object alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The object appeared (or the plugin started and sees it for the first time).
    Added,
    /// The object changed.
    Changed,
    /// The object is gone.
    Deleted,
    /// The periodic resync.
    Resync,
    /// The last call failed and is retried.
    Retry,
    /// The plugin asked for it with `requeue-after`.
    Requeue,
}

impl Reason {
    /// Its name in the contract and the ledger (`added`, `changed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Added => "added",
            Reason::Changed => "changed",
            Reason::Deleted => "deleted",
            Reason::Resync => "resync",
            Reason::Retry => "retry",
            Reason::Requeue => "requeue",
        }
    }
}

impl std::str::FromStr for Reason {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "added" => Reason::Added,
            "changed" => Reason::Changed,
            "deleted" => Reason::Deleted,
            "resync" => Reason::Resync,
            "retry" => Reason::Retry,
            "requeue" => Reason::Requeue,
            other => {
                return Err(format!(
                    "unknown reason {other:?} (expected added, changed, deleted, resync, retry or requeue)"
                ));
            }
        })
    }
}

/// One reconcile request. JSON texts are shared (`Arc<str>`) so that the cache, the queue
/// and the runtime hand the same bytes along without re-serialising them.
#[derive(Debug, Clone)]
pub struct ReconcileRequest {
    /// The key reconciled.
    pub target: ObjectRef,
    /// The cached object as JSON; `None` once deleted.
    pub object: Option<Arc<str>>,
    /// The last successfully reconciled version, for plugins that ask for it.
    pub previous: Option<Arc<str>>,
    /// Why it runs now.
    pub reason: Reason,
    /// 1 on the first attempt.
    pub attempt: u32,
    /// The operator's configuration for the plugin, as JSON text.
    pub config: Option<Arc<str>>,
}
