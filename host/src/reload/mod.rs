//! Hot reload: follows the plugins directory (and the policy files) while the host runs.
//! File events are debounced into rescans; a rescan compares every file's digest with what
//! it saw last, compiles what changed off the hot path and tells the controller to start,
//! swap or remove plugins. A file that fails keeps the last good version running and is
//! reported once per distinct failure.

mod config;
mod error;
mod events;
mod files;
mod policies;
mod reloader;
mod status;

pub use config::ReloadConfig;
pub use error::ReloadError;
pub use reloader::{Reloader, ScanSummary, WatchTask};
pub use status::{FileStatus, ReloadMetrics};
