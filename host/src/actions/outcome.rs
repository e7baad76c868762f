//! What one write came to: accepted (with the [`Decision`] the audit records, and the
//! object's new resourceVersion), or an [`ActionError`] that says whether retrying helps.
//!
//! One enum says how an action ended: [`Decision`], the audit record's (executed, already
//! done, denied, dry-run, failed, skipped); the executor's and the pipeline's results carry
//! it rather than a parallel enum. The policy check's own answer stays apart, as
//! `Result<(), Denial>`: it is asked before anything runs, says only whether an action may
//! be sent and why not, and becomes [`Decision::Denied`] when it says no.

use super::target::TargetError;
use super::writer::{WriteError, Written};
use crate::policy::Decision;
use std::time::Duration;

/// A write the API server accepted, or found nothing to do for.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// [`Decision::Executed`] or [`Decision::AlreadyDone`].
    pub decision: Decision,
    /// The object's resourceVersion after a patch or create that returned it.
    pub resource_version: Option<String>,
    /// The object's name as the API server answered it (a create may have asked for a
    /// generated one).
    pub name: Option<String>,
}

impl Sent {
    /// Sent and accepted, leaving the object as `written` says when known.
    pub fn executed(written: Written) -> Self {
        Sent {
            decision: Decision::Executed,
            resource_version: written.resource_version,
            name: written.name,
        }
    }

    /// Nothing needed (the object is gone, or exists), for `reason`.
    pub fn already(reason: &str) -> Self {
        Sent {
            decision: Decision::AlreadyDone {
                reason: reason.to_string(),
            },
            resource_version: None,
            name: None,
        }
    }
}

/// Why one write failed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The API server refused or failed the request, or it could not be sent.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The action has no safe request target on its kind's scope.
    #[error("refused before sending: {0}")]
    Target(#[from] TargetError),
    /// Its body cannot be the request it names (a JSON patch that is not a list of
    /// operations, a manifest that is not an object).
    #[error("refused before sending: {what} is malformed")]
    Body {
        /// Which body.
        what: &'static str,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A log or requeue-after given to the executor: they are not writes.
    #[error("not a write")]
    NotAWrite,
    /// A [fenced](super::fence) write refused with 409 Conflict: the object is no longer at
    /// the resourceVersion the plugin decided on. Not retried with backoff: the key waits
    /// until the cache shows the newer version, then is reconciled on it.
    #[error(
        "conflict: the object moved past resourceVersion {fenced_at}, the version this write was decided on: {source}"
    )]
    Conflict {
        /// The version the write carried as its precondition.
        fenced_at: String,
        /// The API server's answer.
        #[source]
        source: WriteError,
    },
}

impl ActionError {
    /// Whether the API server pushed back (429 Too Many Requests, a 5xx, or the request
    /// did not complete), with the delay it asked for (the Status' `retryAfterSeconds`):
    /// `Some(None)` for a push-back without a delay, `None` when it did not push back.
    pub fn push_back(&self) -> Option<Option<Duration>> {
        let ActionError::Write(WriteError::Api(err)) = self else {
            return None;
        };
        match err {
            kube::Error::Api(status) if status.code == 429 || status.code >= 500 => Some(
                status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s))),
            ),
            kube::Error::HyperError(_) | kube::Error::Service(_) => Some(None),
            _ => None,
        }
    }

    /// Conflicts, throttling, server errors and transport failures are worth retrying;
    /// requests the server judged invalid or forbidden are not, until the object changes.
    /// Actions refused before sending never are.
    pub fn is_transient(&self) -> bool {
        match self {
            ActionError::Write(WriteError::Api(kube::Error::Api(e))) => {
                !matches!(e.code, 400 | 401 | 403 | 404 | 405 | 415 | 422)
            }
            ActionError::Write(WriteError::Api(
                kube::Error::SerdeError(_)
                | kube::Error::BuildRequest(_)
                | kube::Error::Discovery(_),
            )) => false,
            ActionError::Write(WriteError::Api(_)) => true,
            ActionError::Write(WriteError::Target(_) | WriteError::Mismatch)
            | ActionError::Target(_)
            | ActionError::Body { .. }
            | ActionError::NotAWrite
            | ActionError::Conflict { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> ActionError {
        let status = Status::failure("m", "r").with_code(code).boxed();
        WriteError::Api(kube::Error::Api(status)).into()
    }

    #[test]
    fn invalid_and_forbidden_wait_for_a_change_the_rest_is_retried() {
        for code in [400, 401, 403, 404, 405, 415, 422] {
            assert!(!api(code).is_transient(), "{code}");
        }
        for code in [409, 429, 500, 503, 504] {
            assert!(api(code).is_transient(), "{code}");
        }
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        let transport: ActionError = WriteError::Api(kube::Error::Service(timeout.into())).into();
        assert!(transport.is_transient());
        assert!(!ActionError::from(WriteError::Mismatch).is_transient());
        // A fenced write's conflict waits for the newer version instead.
        let ActionError::Write(source) = api(409) else {
            unreachable!()
        };
        let stale = ActionError::Conflict {
            fenced_at: "5".into(),
            source,
        };
        assert!(!stale.is_transient());
        assert!(stale.to_string().starts_with("conflict: "), "{stale}");
    }
}
