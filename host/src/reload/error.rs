//! Errors of the reloader itself (a plugin file's failures are statuses, not errors).

use std::path::PathBuf;

/// The reloader could not look at a directory.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("cannot read directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch directory {dir} for changes: {source}")]
    Watch {
        dir: PathBuf,
        #[source]
        source: notify::Error,
    },
}
