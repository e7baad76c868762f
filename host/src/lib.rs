//! kubeplug: a Kubernetes controller host whose reconcile logic lives in sandboxed
//! WebAssembly plugins.
//!
//! The modules follow the data flow of one change:
//!
//! `cluster` (list+watch per kind → cache) → `router` (a change becomes keys) → `queue`
//! (rate-limited workqueues) → `worker` (a running plugin's workers and per-key state) →
//! `plugin` (the sandboxed call) → `policy` (what it may do) → `actions` (check, dry-run,
//! budget, execute, audit).
//!
//! Around them: `controller` adds, swaps and removes running plugins; `reload` follows the
//! plugins directory; `app` puts a host together; `server` serves its status; `contract` is
//! the plugin contract as the host sees it; `cli` the commands; `coordination` lets several replicas share
//! the work through Leases (leader election, key sharding). The embedded API server is
//! its own crate, `kubeplug_sim` (`host/sim`), used by `kubeplug sim`, `kubeplug run
//! --embedded` and the tests.

pub mod actions;
pub mod app;
pub mod cli;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod coordination;
pub mod fixtures;
pub mod manifest;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod queue;
pub mod reload;
mod router;
pub mod server;
pub mod stream;
pub mod telemetry;
mod worker;
