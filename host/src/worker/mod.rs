//! The running plugin and its lifecycle: an instance (a plugin under a name, with its
//! configuration and policy) is checked and built into a revision (the compiled plugin with
//! its policy and the caches it reads), and started as a running plugin: its workqueue, the
//! workers that take keys off it and call the plugin on the revision that runs now, and what
//! they remember per key (why it was queued, the object version last reconciled, writes the
//! cache has not shown yet). New revisions are swapped in while it runs.
//!
//! By file: `instance` and `revision` (what runs), `lifecycle` (start, swap, halt, drain),
//! `running` (the running plugin and how keys are queued), `turn` (a worker's loop),
//! `request` (what the plugin is handed), `reconcile` (the plugin decides, the host acts),
//! `own_writes` and `expectations` (what a key waits for the cache to show), `ledger_entry`
//! (what the ledger records of a call), `trigger` (what queued a key), `metrics`, `set`
//! (the running plugins by name) and `error`.

mod error;
mod expectations;
mod instance;
mod ledger_entry;
mod lifecycle;
mod metrics;
mod own_writes;
mod reconcile;
mod request;
mod revision;
mod running;
mod set;
mod trigger;
mod turn;

pub use error::StartError;
pub use instance::{InstanceName, InvalidName, MAX_INSTANCE_NAME, PluginInstance, live_of};
pub use lifecycle::Drain;
pub(crate) use lifecycle::Shared;
pub use metrics::{ReconcileCounts, ReconcileMetrics};
pub(crate) use revision::Revision;
pub(crate) use running::RunningPlugin;
pub(crate) use set::RunningPlugins;
pub(crate) use trigger::Trigger;
