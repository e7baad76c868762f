//! Typed errors of loading and calling plugins. Text that came from a plugin (its messages,
//! a panic, names in a compile or link error) is shown capped and escaped.

use crate::contract::text::shown;
use std::path::PathBuf;
use std::time::Duration;

/// Why a plugin could not be loaded. The host keeps serving other plugins.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read plugin {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin} is not a WebAssembly file (no \\0asm header)")]
    NotWasm { origin: String },
    #[error(
        "{origin} is a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    NotAComponent { origin: String },
    #[error("{origin} does not compile: {}", shown(message))]
    Compile { origin: String, message: String },
    #[error(
        "{origin} is not a kubeplug plugin: it exports no kubeplug:plugin/reconciler (exports: {})",
        shown(exports)
    )]
    NotAPlugin { origin: String, exports: String },
    #[error(
        "{origin} was built for plugin contract {}, but this host supports {supported}: rebuild it with a kubeplug-sdk for one of those",
        shown(found)
    )]
    ContractMismatch {
        origin: String,
        found: String,
        supported: String,
    },
    #[error(
        "{origin} needs imports this host does not provide: {}",
        shown(message)
    )]
    Link { origin: String, message: String },
    #[error("{origin}: its metadata call failed: {source}")]
    Metadata {
        origin: String,
        #[source]
        source: CallError,
    },
    #[error("{origin}: invalid metadata: {message}")]
    InvalidMetadata { origin: String, message: String },
    #[error("cannot set up the plugin engine: {0}")]
    Engine(String),
}

/// Why one reconcile call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("timed out after {limit:?}")]
    Timeout { limit: Duration },
    #[error("ran out of memory: tried to grow to {requested} bytes, limit is {limit}")]
    OutOfMemory { requested: usize, limit: usize },
    #[error("panicked: {}", shown(message))]
    Panic { message: String },
    #[error("stack overflow")]
    StackOverflow,
    #[error("trapped: {}", shown(message))]
    Trap { message: String },
    #[error("invalid output: {0}")]
    InvalidOutput(#[from] crate::contract::OutputViolation),
    #[error("reported a transient error: {}", shown(.0))]
    Transient(String),
    #[error("reported a permanent error: {}", shown(.0))]
    Permanent(String),
    #[error("could not be instantiated: {}", shown(message))]
    Instantiate { message: String },
}

impl CallError {
    /// Whether retrying (with backoff) may help. Permanent errors and invalid output wait
    /// until the object changes.
    pub fn is_transient(&self) -> bool {
        !matches!(self, CallError::Permanent(_) | CallError::InvalidOutput(_))
    }

    /// A short label for metrics and audit records.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout { .. } => "timeout",
            CallError::OutOfMemory { .. } => "out-of-memory",
            CallError::Panic { .. } => "panic",
            CallError::StackOverflow => "stack-overflow",
            CallError::Trap { .. } => "trap",
            CallError::InvalidOutput(_) => "invalid-output",
            CallError::Transient(_) => "transient",
            CallError::Permanent(_) => "permanent",
            CallError::Instantiate { .. } => "instantiate",
        }
    }
}
