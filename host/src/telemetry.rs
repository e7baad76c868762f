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
/// `KUBEPLUG_LOG` (default `info`), or JSON lines when `json` is set. Colours only on a
/// terminal (and not with `NO_COLOR`), so logs piped to files or collectors stay plain text.
pub fn init(json: bool) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEPLUG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
