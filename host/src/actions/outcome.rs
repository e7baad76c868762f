//! What executing one call's actions came to, action by action.

use std::time::Duration;

/// How one action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionResult {
    /// Sent and accepted (or nothing to send: log, requeue-after).
    Executed,
    /// Nothing to do: a patch or delete of an object already gone, a create of one that exists.
    AlreadyDone(String),
    /// The API refused or failed it.
    Failed(ApiFailure),
    /// Not attempted because an earlier action of the call failed.
    Skipped,
}

/// A failed API call: transient ones (conflicts, throttling, server errors, network) are
/// retried with backoff; permanent ones (invalid, forbidden) wait for the object to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFailure {
    pub transient: bool,
    pub message: String,
}

/// One action's record: what it was, on what, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub action: &'static str,
    pub target: String,
    pub result: ActionResult,
    /// The resourceVersion the object has after a successful patch or create.
    pub resource_version: Option<String>,
}

/// The outcome of executing one call's actions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Execution {
    pub records: Vec<ActionRecord>,
    /// The shortest requeue-after the plugin asked for.
    pub requeue_after: Option<Duration>,
}

impl Execution {
    /// The first failure, if any action failed.
    pub fn failure(&self) -> Option<&ApiFailure> {
        self.records.iter().find_map(|r| match &r.result {
            ActionResult::Failed(f) => Some(f),
            _ => None,
        })
    }
}
