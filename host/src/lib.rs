//! kubeplug: a Kubernetes controller host whose reconcile logic lives in sandboxed
//! WebAssembly plugins.
//!
//! Modules follow the data flow: `cluster` (watches, cache) → `queue` (workqueues) →
//! `plugin` (sandboxed runtime) → `actions` (executor); `contract` is the plugin contract as
//! the host sees it. The embedded API server is its own crate, `kubeplug_sim` (`host/sim`),
//! used by `kubeplug sim`, `kubeplug run --embedded` and the tests.

pub mod actions;
pub mod app;
pub mod cli;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod fixtures;
pub mod manifest;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod queue;
pub mod reload;
pub mod server;
pub mod telemetry;
