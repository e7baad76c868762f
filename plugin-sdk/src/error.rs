//! The error a reconcile returns, and how it tells the host whether to retry.

use crate::bindings::kubeplug::plugin::types::ReconcileError;

/// Why a reconcile failed: transient errors are retried with backoff, permanent ones wait
/// until the object changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Worth retrying, for example a dependency that is not there yet.
    #[error("transient: {0}")]
    Transient(String),
    /// Retrying will not help until the object or the configuration changes.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl Error {
    /// A transient error (retried with backoff).
    pub fn transient(message: impl Into<String>) -> Self {
        Error::Transient(message.into())
    }

    /// A permanent error (not retried until the object changes).
    pub fn permanent(message: impl Into<String>) -> Self {
        Error::Permanent(message.into())
    }
}

/// JSON that does not fit the expected type will not fit better on a retry.
impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Permanent(format!("invalid JSON: {err}"))
    }
}

impl From<Error> for ReconcileError {
    fn from(err: Error) -> Self {
        match err {
            Error::Transient(m) => ReconcileError::Transient(m),
            Error::Permanent(m) => ReconcileError::Permanent(m),
        }
    }
}
