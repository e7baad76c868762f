//! Hot reload: follows the plugins directory (and the policy files) while the host runs.
//! File events are debounced into rescans; a rescan compares every file's digest with what
//! it saw last, compiles what changed off the hot path and tells the controller to start,
//! swap or remove plugins. A file that fails keeps the last good version running and is
//! reported once per distinct failure.
//!
//! Starting, swapping and stopping is the [`applier`]'s, for every source of plugins: the
//! directory here, and the `Plugin` objects with their shadow revisions
//! (`crate::plugin_objects`). Each source hands it the instances it wants; it alone tells the
//! controller.
//!
//! Identity comes from the directory, not from the plugin: `<name>.wasm` runs as instance
//! `<name>` under `<name>.policy.yaml`, whatever name its metadata declares (that name is
//! only shown, as `declared`). A policy may pin the file's digest (`spec.plugin.sha256`).

pub(crate) mod applier;
mod config;
mod error;
mod events;
mod files;
pub(crate) mod plan;
mod policies;
mod reloader;
mod report;
mod scan;
pub(crate) mod state;
mod status;

pub use config::ReloadConfig;
pub use error::ReloadError;
pub use reloader::{Reloader, ScanSummary, WatchTask};
pub use status::{FileStatus, ReloadMetrics};
