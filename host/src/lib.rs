//! kubeplug: a Kubernetes controller host whose reconcile logic lives in sandboxed
//! WebAssembly plugins.
//!
//! Modules follow the data flow: `cluster` (watches, cache) → `queue` (workqueues) →
//! `plugin` (sandboxed runtime) → `actions` (executor); `sim` is the embedded API server.

pub mod cli;
pub mod queue;
pub mod sim;
