//! Logging set-up and the structured log events shared by several modules.

use crate::contract::LogLevel;
use crate::contract::text::shown_max;

/// The most bytes of one plugin-provided log message written to the host log.
pub const PLUGIN_LOG_LINE_MAX: usize = 4096;

/// Emits a plugin's log line as a tracing event with `plugin` and `key` fields. The message
/// (and the names) are capped and escaped here, whoever calls: a plugin's newline cannot
/// forge a host log line, its escape sequences cannot drive a terminal.
pub fn plugin_log(plugin: &str, key: &str, level: LogLevel, message: &str) {
    // Recorded as strings, as before: quoted in text lines, plain in JSON.
    let plugin = shown_max(plugin, 256).to_string();
    let key = shown_max(key, 512).to_string();
    let (plugin, key) = (plugin.as_str(), key.as_str());
    let message = shown_max(message, PLUGIN_LOG_LINE_MAX);
    match level {
        LogLevel::Trace => {
            tracing::trace!(target: "kubeplug::plugin", plugin, key, "{message}")
        }
        LogLevel::Debug => {
            tracing::debug!(target: "kubeplug::plugin", plugin, key, "{message}")
        }
        LogLevel::Info => {
            tracing::info!(target: "kubeplug::plugin", plugin, key, "{message}")
        }
        LogLevel::Warn => {
            tracing::warn!(target: "kubeplug::plugin", plugin, key, "{message}")
        }
        LogLevel::Error => {
            tracing::error!(target: "kubeplug::plugin", plugin, key, "{message}")
        }
    }
}

/// Installs the global subscriber: human-readable lines on stderr, filtered by
/// `KUBEPLUG_LOG` (default `info`), or JSON lines when `json` is set. Colours only on a
/// terminal (and not with `NO_COLOR`), so logs piped to files or collectors stay plain text.
/// Beside it, whatever the log filter, the events about plugins feed the live stream
/// ([`crate::stream`]).
pub fn init(json: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEPLUG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Only the modules that report on plugins: their debug events (audits of executed
    // actions, per-reconcile successes) are for the stream, not the log.
    let streamed = [
        "kubeplug::plugin",
        "kubeplug::policy",
        "kubeplug::actions",
        "kubeplug::worker",
        "kubeplug::controller",
        "kubeplug::reload",
    ]
    .into_iter()
    .fold(Targets::new(), |t, target| {
        t.with_target(target, LevelFilter::DEBUG)
    });
    let stream =
        crate::stream::StreamLayer::new(crate::stream::global().clone()).with_filter(streamed);
    let registry = tracing_subscriber::registry().with(stream);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let _ = if json {
        registry
            .with(fmt.json().with_ansi(false).with_filter(filter))
            .try_init()
    } else {
        registry
            .with(fmt.with_ansi(colour).with_filter(filter))
            .try_init()
    };
}
