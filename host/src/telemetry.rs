//! Logging set-up and the structured log events shared by several modules.

use crate::contract::LogLevel;

/// Emits a plugin's log line as a tracing event with `plugin` and `key` fields.
pub fn plugin_log(plugin: &str, key: &str, level: LogLevel, message: &str) {
    match level {
        LogLevel::Trace => tracing::trace!(target: "kubeplug::plugin", plugin, key, "{message}"),
        LogLevel::Debug => tracing::debug!(target: "kubeplug::plugin", plugin, key, "{message}"),
        LogLevel::Info => tracing::info!(target: "kubeplug::plugin", plugin, key, "{message}"),
        LogLevel::Warn => tracing::warn!(target: "kubeplug::plugin", plugin, key, "{message}"),
        LogLevel::Error => tracing::error!(target: "kubeplug::plugin", plugin, key, "{message}"),
    }
}

/// Installs the global subscriber: human-readable lines on stderr, filtered by
/// `KUBEPLUG_LOG` (default `info`), or JSON lines when `json` is set.
pub fn init(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEPLUG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
