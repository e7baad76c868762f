//! The sandboxed plugin runtime: one shared wasmtime engine, components compiled once (and
//! cached on disk precompiled), and every reconcile in a fresh, bounded store.
//!
//! Each call gets a **fresh sandbox**: a new store with the plugin instantiated from its
//! `InstancePre` (pooled, copy-on-write memory), never a reused one: no state leaks from one
//! key to the next, a trap poisons nothing, and a fresh sandbox costs only microseconds more (see the README's performance
//! section and `cargo bench --bench reconcile`).
//!
//! The sandbox: WASI p2 with no preopened directories, no sockets or name lookups, no
//! environment or arguments, frozen clocks, stdout/stderr captured (bounded) and attributed
//! to the plugin; a memory cap; guest code that yields its thread at every epoch tick and
//! traps at the first one past its deadline, plus a wall-clock timeout for anything that waits, checked by the host imports too; bounded import
//! arguments and reads; bounded output; plugin log lines capped, escaped and rate-limited.

mod call;
mod compile_cache;
mod contract_version;
mod cpu_share;
mod engine;
mod error;
mod imports;
mod limits;
mod loaded;
mod log_gate;
mod output;
mod reply;
mod sandbox;
mod shared_code;
#[cfg(test)]
mod test_support;
mod transient;
mod trap;
mod warm;
mod wit;

/// Where the `get` and `list` imports read (defined with the contract, so the caches need
/// not know the runtime).
pub use crate::contract::{NoObjects, ObjectSource};
pub use compile_cache::{CacheOutcome, CompileCache, default_cache_dir};
pub use cpu_share::{BURST, CpuAccount, GuestCpu, MAX_PAUSE, SHARE_WINDOW};
pub use engine::{PluginRuntime, RuntimeConfig};
pub use error::{CallError, LoadError, WasmError};
pub use imports::{MAX_NAMESPACE_BYTES, MAX_OBJECT_NAME_BYTES};
pub use limits::{
    CallBound, CallLimitOverrides, CallLimits, DEFAULT_MEMORY_MIB, DEFAULT_TIMEOUT_MS, LimitError,
    Limits, MAX_ACTIONS, MAX_MEMORY_MIB, MAX_TIMEOUT_MS,
};
pub use loaded::{CallContext, CallReport, Plugin};
pub use log_gate::{DROP_REPORT_INTERVAL, LogRateConfig, MAX_LOG_LINE_BYTES, MIN_LINE_COST};
pub use reply::MAX_ERROR_BYTES;
pub use sandbox::{LogSource, PluginLog};
pub use transient::MAX_INSTANTIATE_ATTEMPTS;
pub use warm::WarmSandbox;
