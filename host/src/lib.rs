//! kubeplug: a Kubernetes controller host whose reconcile logic lives in sandboxed
//! WebAssembly plugins.
//!
//! The modules follow the data flow of one change:
//!
//! `cluster` (list+watch per kind → cache) → `router` (a change becomes keys) → `queue`
//! (rate-limited workqueues) → `worker` (a running plugin: its lifecycle, workers and
//! per-key state) →
//! `plugin` (the sandboxed call) → `policy` (what it may do) → `actions` (check, dry-run,
//! budget, execute, audit).
//!
//! Around them: `controller` adds, swaps and removes running plugins; `reload` follows the
//! plugins directory; `app` puts a host together; `server` serves its status; `contract` is
//! the plugin contract as the host sees it; `cli` the commands; `coordination` lets several replicas share
//! the work through Leases (leader election, key sharding). The embedded API server is
//! its own crate, `kubeplug_sim` (`host/sim`), used by `kubeplug sim`, `kubeplug run
//! --embedded` (the default-on `embedded` feature; the library builds without it) and the
//! tests; the Kubernetes vocabulary both share (label selectors, patch types, DNS names) is
//! the crate below both, `kubeplug_vocab` (`host/vocab`).
//!
//! Imports point down this order: `cli` → `app` → `server` → `reload` → `controller` →
//! `router` → `worker` → `actions` → `policy` → `plugin` → `queue`, `coordination` →
//! `cluster` → `contract` → `sync` (`stream`, `telemetry`, `metrics` and `ledger`, the decision ledger
//! workers write and the server reads, beside); `plugin_objects`, the second source of
//! plugins (Plugin and PluginPolicy objects, whose CRDs are generated from its types), sits
//! beside `reload`, and `oci` (modules from registries, signatures) below it. Where it differs from the
//! data flow above, a later stage defines what an earlier one uses: the worker pulls from its
//! queue, the actions pipeline runs policy checks, a policy carries call limits. `sync`, at
//! the bottom, locks a mutex whose holder panicked, for every floor.
//!
//! # Glossary
//!
//! - **plugin**: a compiled `.wasm` component ([`plugin::Plugin`]), with the name and
//!   version it declares about itself.
//! - **instance**: a plugin configured to run under a name the operator chose (the file
//!   name), with its configuration and policy ([`controller::PluginInstance`],
//!   [`controller::InstanceName`]). Never a wasm instance (a *sandbox*) nor this host's name
//!   (its *host name*).
//! - **sandbox**: one store with its limits, WASI context and deadline, and the plugin
//!   instantiated in it; every call gets a fresh one ([`plugin::WarmSandbox`], which serves
//!   call after call, exists for benchmarks; [`plugin::RuntimeConfig::max_sandboxes`] bounds
//!   how many exist at once). Only wasmtime's own names keep its word, instance
//!   (`InstancePre`, its pool's component instances).
//! - **revision**: what one instance runs at a time: the plugin with its policy and the caches
//!   it reads; a reload swaps in a new revision. Not the plugin's version, the contract
//!   version, nor an object's `resourceVersion`.
//! - **running plugin**: an instance the controller runs: its queue, workers and per-key
//!   state, over the revision current now.
//! - **key**: the namespace and name of an object a running plugin reconciles
//!   ([`cluster::ObjKey`]); [`contract::ObjectRef`] adds the kind.
//! - **host**: one kubeplug process ([`app::Host`]). Its *host name* (the hostname: a pod's
//!   name) reports the Events it sends (their `reportingInstance`,
//!   [`controller::ControllerConfig::host_name`]); when replicas coordinate, its *identity*
//!   (by default the host name and a random suffix) holds their Leases
//!   ([`coordination::CoordinationConfig::identity`]).
//! - **tenant**: a namespace whose `Plugin` objects run ([`plugin_objects`]); the host's
//!   shared resources (sandboxes, writes, pulls: [`queue::FairSlots`]; guest CPU:
//!   [`plugin::GuestCpu`]; metrics series past `--metrics-per-plugin-limit`) are shared
//!   fairly by tenant, never by what a plugin says.

pub mod actions;
pub mod app;
#[cfg(feature = "embedded")]
pub mod chaos;
pub mod cli;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod coordination;
mod fixtures;
pub mod ledger;
mod manifest;
pub mod metrics;
pub mod oci;
pub mod plugin;
pub mod plugin_objects;
pub mod policy;
pub mod queue;
pub mod reload;
mod router;
pub mod server;
pub mod stream;
mod sync;
pub mod telemetry;
mod worker;
