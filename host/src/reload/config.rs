//! Where the reloader looks and how long it lets files settle.

use std::path::PathBuf;
use std::time::Duration;

/// Settings of the [`Reloader`](super::Reloader).
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    /// Directory of `*.wasm` plugins.
    pub plugins: PathBuf,
    /// Directory of `<plugin>.policy.yaml` files (may be the plugins directory).
    pub policies: PathBuf,
    /// Quiet time after the last file event before a rescan: a burst of events (a copy, a
    /// ConfigMap swap) becomes one rescan.
    pub debounce: Duration,
    /// A file still open for writing is left alone until it is closed, or until it has had
    /// no event for this long (filesystems that report no close).
    pub write_settle: Duration,
}

impl ReloadConfig {
    /// Plugins in `plugins`, policies in `policies`, default timings.
    pub fn new(plugins: impl Into<PathBuf>, policies: impl Into<PathBuf>) -> Self {
        ReloadConfig {
            plugins: plugins.into(),
            policies: policies.into(),
            debounce: Duration::from_millis(50),
            write_settle: Duration::from_secs(2),
        }
    }
}
