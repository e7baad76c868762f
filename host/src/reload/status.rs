//! What the reloader reports: a status per plugin file and metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::path::PathBuf;

/// The state of one plugin file as the reloader last saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStatus {
    /// The plugin file.
    pub file: PathBuf,
    /// SHA-256 of the file's current content.
    pub digest: String,
    /// The plugin instance running from this file (the file's name without `.wasm`), if one
    /// of its versions runs.
    pub plugin: Option<String>,
    /// The name the last version that loaded declares in its metadata: informational only.
    pub declared: Option<String>,
    /// SHA-256 of the version running from this file: differs from `digest` while the
    /// current content fails and the last good version keeps running.
    pub running: Option<String>,
    /// Why the current content does not run (its file name is not a valid instance name, it
    /// does not load, its policy is malformed or pins another digest, its kinds are not
    /// served).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    plugin: String,
    result: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FileLabels {
    file: String,
}

/// Counters of the reloader. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ReloadMetrics {
    reloads: Family<ReloadLabels, Counter>,
    failures: Family<FileLabels, Counter>,
    failing: Family<FileLabels, Gauge>,
}

impl ReloadMetrics {
    /// Registers `kubeplug_plugin_reloads_total{plugin,result}`,
    /// `kubeplug_plugin_load_failures_total{file}` and `kubeplug_plugin_failing{file}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubeplug_plugin_reloads",
            "Plugins started, updated, restarted and removed by the reloader",
            self.reloads.clone(),
        );
        registry.register(
            "kubeplug_plugin_load_failures",
            "Distinct failures of plugin files (each reported once)",
            self.failures.clone(),
        );
        registry.register(
            "kubeplug_plugin_failing",
            "1 while a plugin file's current content does not run",
            self.failing.clone(),
        );
    }

    pub(crate) fn reloaded(&self, plugin: &str, result: &str) {
        self.reloads
            .get_or_create(&ReloadLabels {
                plugin: plugin.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    pub(crate) fn failed(&self, file: &str) {
        let labels = FileLabels {
            file: file.to_string(),
        };
        self.failures.get_or_create(&labels).inc();
        self.failing.get_or_create(&labels).set(1);
    }

    pub(crate) fn recovered(&self, file: &str) {
        self.failing.remove(&FileLabels {
            file: file.to_string(),
        });
    }
}
