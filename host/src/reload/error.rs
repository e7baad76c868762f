//! Errors of the reloader itself (a plugin file's failures are statuses, not errors).

use std::path::PathBuf;

/// The reloader could not look at a directory.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// A directory cannot be listed.
    #[error("cannot read directory {dir}: {source}")]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// File events of a directory cannot be followed.
    #[error("cannot watch directory {dir} for changes: {source}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: notify::Error,
    },
}
