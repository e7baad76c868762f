//! The workers of each running plugin: its workqueue, the workers that take keys off it and
//! call the plugin on the revision that runs now, and what they remember per key (why it was
//! queued, the object version last reconciled, writes the cache has not shown yet).

mod expectations;
mod metrics;
mod revision;
mod running;
mod set;

pub use metrics::{ReconcileCounts, ReconcileMetrics};
pub(crate) use revision::Revision;
pub(crate) use running::RunningPlugin;
pub(crate) use set::RunningPlugins;
