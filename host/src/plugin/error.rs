//! Typed errors of loading and calling plugins. Text that came from a plugin (its messages,
//! a panic, names in a compile or link error) is shown capped and escaped.

use crate::contract::text::shown;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A wasmtime error about a plugin (compiling, linking or instantiating it), kept whole. Its
/// text can carry names the plugin chose (imports, exports, custom sections), so it is shown
/// capped and escaped, with its own chain of causes in that text; [`WasmError::inner`] gives
/// the error itself. It reports no further `source`, so that nothing prints the raw text.
#[derive(Debug, Clone)]
pub struct WasmError(Arc<wasmtime::Error>);

impl WasmError {
    /// The wasmtime error as it was raised.
    pub fn inner(&self) -> &wasmtime::Error {
        &self.0
    }
}

impl From<wasmtime::Error> for WasmError {
    fn from(e: wasmtime::Error) -> Self {
        WasmError(Arc::new(e))
    }
}

impl std::fmt::Display for WasmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", shown(&format!("{:#}", self.0)))
    }
}

impl std::error::Error for WasmError {}

/// Two errors are the same when they say the same (wasmtime errors have no equality).
impl PartialEq for WasmError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || format!("{:#}", self.0) == format!("{:#}", other.0)
    }
}

impl Eq for WasmError {}

/// Why a plugin could not be loaded. The host keeps serving other plugins.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        #[source]
        source: std::io::Error,
    },
    /// The bytes do not start with the WebAssembly magic number.
    #[error("{origin} is not a WebAssembly file (no \\0asm header)")]
    NotWasm {
        /// Where the bytes came from.
        origin: String,
    },
    /// A core module, where a component is needed.
    #[error(
        "{origin} is a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    NotAComponent {
        /// Where the bytes came from.
        origin: String,
    },
    /// The component does not compile (or its precompiled form does not load).
    #[error("{origin} does not compile: {source}")]
    Compile {
        /// Where the bytes came from.
        origin: String,
        /// The compiler's error.
        #[source]
        source: WasmError,
    },
    /// The component exports no reconciler interface of any version.
    #[error(
        "{origin} is not a kubeplug plugin: it exports no kubeplug:plugin/reconciler (exports: {})",
        shown(exports)
    )]
    NotAPlugin {
        /// Where the bytes came from.
        origin: String,
        /// What it exports instead, comma-separated.
        exports: String,
    },
    /// The component was built for a contract version this host does not support.
    #[error(
        "{origin} was built for plugin contract {}, but this host supports {supported}: rebuild it with a kubeplug-sdk for one of those",
        shown(found)
    )]
    ContractMismatch {
        /// Where the bytes came from.
        origin: String,
        /// The version the component exports.
        found: String,
        /// The versions this host supports, comma-separated.
        supported: String,
    },
    /// The component imports something its contract version's linker does not provide.
    #[error("{origin} needs imports this host does not provide: {source}")]
    Link {
        /// Where the bytes came from.
        origin: String,
        /// The linker's error.
        #[source]
        source: WasmError,
    },
    /// The metadata export failed (trap, timeout, ...).
    #[error("{origin}: its metadata call failed: {source}")]
    Metadata {
        /// Where the bytes came from.
        origin: String,
        /// How the call failed.
        #[source]
        source: CallError,
    },
    /// The metadata export answered something out of bounds or malformed.
    #[error("{origin}: invalid metadata: {message}")]
    InvalidMetadata {
        /// Where the bytes came from.
        origin: String,
        /// What is wrong with it (plugin text in it is already escaped).
        message: crate::contract::MetadataError,
    },
    /// The engine, its linkers or its epoch ticker could not be set up (a host problem).
    #[error("cannot set up the plugin engine: {source}")]
    Engine {
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why one reconcile call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The call ran past its deadline (the epoch trapped it, a host import refused to start
    /// after it, or the wall-clock timeout fired).
    #[error("timed out after {limit:?}")]
    Timeout {
        /// The call's time limit.
        limit: Duration,
    },
    /// The plugin tried to grow its memory past the limit.
    #[error("ran out of memory: tried to grow to {requested} bytes, limit is {limit}")]
    OutOfMemory {
        /// The size it asked for, in bytes.
        requested: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The plugin panicked (a Rust guest's panic message was found on its stderr).
    #[error("panicked: {}", shown(message))]
    Panic {
        /// The panic message and location, capped.
        message: String,
    },
    /// The plugin overflowed the wasm stack.
    #[error("stack overflow")]
    StackOverflow,
    /// Any other trap.
    #[error("trapped: {}", shown(message))]
    Trap {
        /// What trapped, capped.
        message: String,
    },
    /// The plugin's actions broke a bound or were malformed.
    #[error("invalid output: {0}")]
    InvalidOutput(#[from] crate::contract::OutputViolation),
    /// The plugin reported a failure worth retrying (its message, capped).
    #[error("reported a transient error: {}", shown(.0))]
    Transient(String),
    /// The plugin reported a failure not worth retrying until the object changes (its
    /// message, capped).
    #[error("reported a permanent error: {}", shown(.0))]
    Permanent(String),
    /// A warm sandbox could not be made (the plugin could not be instantiated in it), or it
    /// trapped before and cannot be entered.
    #[error("could not be instantiated: {source}")]
    Instantiate {
        /// Why.
        #[source]
        source: WasmError,
    },
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
