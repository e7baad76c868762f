//! The report step of a rescan: the status of every plugin file, and a log line and metric
//! for each failure that is new (new content or new reason) and each recovery.

use super::files::instance_name;
use super::state::State;
use super::status::{FileStatus, ReloadMetrics};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The status of every plugin file in `state`.
pub(crate) fn statuses(state: &State) -> BTreeMap<PathBuf, FileStatus> {
    state
        .files
        .iter()
        .map(|(path, entry)| {
            let name = instance_name(path).ok();
            let running = name
                .as_deref()
                .and_then(|n| state.applier.running().get(n).map(|r| (n, r)))
                .filter(|(_, r)| r.file == *path);
            // The instance this file stands for, once some version of it has loaded.
            let mine = name.as_deref().filter(|_| entry.good.is_some());
            let error = entry
                .error
                .clone()
                .or_else(|| {
                    let policy = state.policies.get(mine?)?;
                    policy.error.clone().map(|e| match &policy.good {
                        Some(_) => format!("{e} (the previous policy stays in force)"),
                        None => format!("{e} (plugin not started)"),
                    })
                })
                .or_else(|| {
                    let n = mine?;
                    let failed = state.applier.failed().get(n)?;
                    let runs = state.applier.running().get(n).map(|r| &r.target);
                    (runs != Some(&failed.target)).then(|| failed.error.clone())
                });
            let status = FileStatus {
                file: path.clone(),
                digest: entry.digest.clone(),
                plugin: running.map(|(n, _)| n.to_string()),
                declared: entry.good.as_ref().map(|p| p.declared_name().to_string()),
                running: running.map(|(_, r)| r.target.plugin.clone()),
                error,
            };
            (path.clone(), status)
        })
        .collect()
}

/// The instance name a plugin file runs as (its name without `.wasm`), for log fields.
fn file_plugin(path: &std::path::Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    crate::contract::text::shown_max(&stem, 64).to_string()
}

/// Logs and counts what changed from `previous` to `fresh`: each failure that is new (or
/// every failure, when `force`), each recovery. Returns the failing files.
pub(crate) fn report(
    previous: &BTreeMap<PathBuf, FileStatus>,
    fresh: &BTreeMap<PathBuf, FileStatus>,
    force: bool,
    metrics: &ReloadMetrics,
) -> Vec<PathBuf> {
    let mut failing = Vec::new();
    for (path, status) in fresh {
        let file = path.display().to_string();
        let before = previous.get(path);
        match &status.error {
            Some(err) => {
                failing.push(path.clone());
                let known =
                    before.is_some_and(|s| s.digest == status.digest && s.error == status.error);
                if !known || force {
                    let kept = status.running.as_deref().unwrap_or("none");
                    tracing::error!(record = "reload", result = "failed", plugin = file_plugin(path), file = %file, digest = %status.digest, running = kept, error = %err, "plugin file not applied: {err}");
                    metrics.failed(&file);
                }
            }
            None => {
                if before.is_some_and(|s| s.error.is_some()) {
                    tracing::info!(record = "reload", result = "recovered", plugin = file_plugin(path), file = %file, digest = %status.digest, "plugin file recovered");
                    metrics.recovered(&file);
                }
            }
        }
    }
    for gone in previous.keys().filter(|p| !fresh.contains_key(*p)) {
        metrics.recovered(&gone.display().to_string());
    }
    failing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(digest: &str, error: Option<&str>) -> FileStatus {
        FileStatus {
            file: "/p/a.wasm".into(),
            digest: digest.into(),
            plugin: None,
            declared: None,
            running: None,
            error: error.map(str::to_string),
        }
    }

    fn failures(metrics: &ReloadMetrics) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with("kubeplug_plugin_"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn a_failure_is_counted_once_per_content_and_reason() {
        let path = PathBuf::from("/p/a.wasm");
        let metrics = ReloadMetrics::default();
        let broken = BTreeMap::from([(path.clone(), status("d1", Some("bad")))]);
        assert_eq!(
            report(&BTreeMap::new(), &broken, false, &metrics),
            std::slice::from_ref(&path)
        );
        report(&broken, &broken, false, &metrics);
        assert!(failures(&metrics).contains("load_failures_total{file=\"/p/a.wasm\"} 1"));
        let other_reason = BTreeMap::from([(path.clone(), status("d1", Some("worse")))]);
        report(&broken, &other_reason, false, &metrics);
        assert!(failures(&metrics).contains("load_failures_total{file=\"/p/a.wasm\"} 2"));
        report(&other_reason, &other_reason, true, &metrics);
        assert!(
            failures(&metrics).contains("load_failures_total{file=\"/p/a.wasm\"} 3"),
            "a forced rescan reports again"
        );
        assert!(failures(&metrics).contains("kubeplug_plugin_failing{file=\"/p/a.wasm\"} 1"));
        let fixed = BTreeMap::from([(path.clone(), status("d2", None))]);
        assert!(report(&other_reason, &fixed, false, &metrics).is_empty());
        assert!(
            !failures(&metrics).contains("kubeplug_plugin_failing{"),
            "{}",
            failures(&metrics)
        );
    }
}
