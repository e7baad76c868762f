//! The reloader: keeps the controller's plugins in step with the plugins directory and the
//! policy files. Every rescan is scan → plan → apply → report: it compares digests with what
//! it saw last, so an unchanged file costs a read and a hash, never a compile, a swap or a
//! repeated error report.

use super::applier::{Desired, Version};
use super::config::ReloadConfig;
use super::error::ReloadError;
use super::events::DirEvents;
use super::report::{report, statuses};
use super::scan::Scan;
use super::state::{State, Target};
use super::status::{FileStatus, ReloadMetrics};
use crate::controller::{Applied, Controller};
use crate::plugin::PluginRuntime;
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Follows the plugins directory and policy files, starting, swapping and removing plugins
/// in a [`Controller`]. Clones share it.
#[derive(Clone)]
pub struct Reloader {
    shared: Arc<Shared>,
}

struct Shared {
    runtime: Arc<PluginRuntime>,
    controller: Controller,
    config: ReloadConfig,
    metrics: ReloadMetrics,
    /// One rescan at a time.
    state: tokio::sync::Mutex<State>,
    status: Mutex<BTreeMap<PathBuf, FileStatus>>,
}

/// What one rescan changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanSummary {
    /// Instances started.
    pub started: Vec<String>,
    /// Instances swapped to a new plugin or policy version (or restarted by the controller).
    pub updated: Vec<String>,
    /// Instances stopped: their file is gone.
    pub removed: Vec<String>,
    /// Files whose current content does not run.
    pub failing: Vec<PathBuf>,
}

/// The background task following file events; dropping it stops following.
pub struct WatchTask {
    task: JoinHandle<()>,
}

impl Drop for WatchTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reloader {
    /// A reloader driving `controller`; nothing is loaded until the first
    /// [`rescan`](Self::rescan).
    pub fn new(runtime: Arc<PluginRuntime>, controller: Controller, config: ReloadConfig) -> Self {
        let metrics = ReloadMetrics::default();
        controller.register_metrics(|r| metrics.register(r));
        Reloader {
            shared: Arc::new(Shared {
                runtime,
                controller,
                config,
                metrics,
                state: tokio::sync::Mutex::default(),
                status: Mutex::default(),
            }),
        }
    }

    /// Every plugin file as last seen, by path.
    pub fn status(&self) -> Vec<FileStatus> {
        lock(&self.shared.status).values().cloned().collect()
    }

    /// Looks at both directories now and applies what changed. `force` also retries files
    /// and starts that failed on unchanged content (SIGHUP).
    pub async fn rescan(&self, force: bool) -> Result<ScanSummary, ReloadError> {
        self.rescan_leaving(&HashSet::new(), force).await
    }

    /// Starts following file events: each debounced burst becomes a rescan that leaves
    /// files still being written alone.
    pub fn watch(&self) -> Result<WatchTask, ReloadError> {
        let config = &self.shared.config;
        let mut events = DirEvents::watch(
            &[&config.plugins, &config.policies],
            config.debounce,
            config.write_settle,
        )?;
        let reloader = self.clone();
        let task = tokio::spawn(async move {
            while let Some(batch) = events.next().await {
                if let Err(err) = reloader.rescan_leaving(&batch.busy, false).await {
                    tracing::error!("rescan failed, the running plugins are unchanged: {err}");
                }
            }
            tracing::warn!("file watch ended: plugins are no longer reloaded on change");
        });
        Ok(WatchTask { task })
    }

    /// One rescan: scan the directories, plan from what was seen and what runs, apply the
    /// plan to the controller, report.
    async fn rescan_leaving(
        &self,
        busy: &HashSet<OsString>,
        force: bool,
    ) -> Result<ScanSummary, ReloadError> {
        let shared = &*self.shared;
        let mut state = shared.state.lock().await;
        let is_busy = |p: &Path| p.file_name().is_some_and(|n| busy.contains(n));
        let scan = Scan {
            plugins: &shared.config.plugins,
            policies: &shared.config.policies,
            is_busy: &is_busy,
            force,
        };
        scan.run(&mut state, &shared.runtime).await?;
        let desired = desired(&state);
        let changes = state
            .applier
            .apply(&shared.controller, desired, force)
            .await;
        let mut summary = ScanSummary::default();
        for (name, applied) in changes.started {
            let (list, result) = match applied {
                Applied::Started => (&mut summary.started, "started"),
                Applied::Updated => (&mut summary.updated, "updated"),
                Applied::Restarted => (&mut summary.updated, "restarted"),
            };
            shared.metrics.reloaded(&name, result);
            list.push(name);
        }
        for name in changes.removed {
            shared.metrics.reloaded(&name, "removed");
            summary.removed.push(name);
        }
        let kept: HashSet<String> = state.runnable().map(|r| r.name.to_string()).collect();
        state.policies.retain(|n, _| kept.contains(n));

        let fresh = statuses(&state);
        let mut status = lock(&shared.status);
        summary.failing = report(&status, &fresh, force, &shared.metrics);
        *status = fresh;
        if state.applier.running().is_empty() && !state.warned_idle {
            tracing::warn!(dir = %shared.config.plugins.display(), "no plugins loaded: nothing will be reconciled");
        }
        state.warned_idle = state.applier.running().is_empty();
        Ok(summary)
    }
}

/// What the directory wants running: every plugin file with a version that loaded, under
/// its policy file's last good state (none yet: it waits, or keeps what runs).
fn desired(state: &State) -> Vec<Desired<PathBuf>> {
    state
        .runnable()
        .map(|r| {
            let file = &state.files[r.file];
            let policy = state
                .policies
                .get(r.name.as_str())
                .and_then(|p| p.good.clone());
            let version = match (file.good.clone(), policy) {
                (Some(plugin), Some(policy)) => {
                    let name = r.name.to_string();
                    Some(Version {
                        target: Target {
                            plugin: r.plugin.to_string(),
                            policy: policy.content.clone(),
                        },
                        plugin,
                        policy: Box::new(move || policy.policy(&name).map_err(|e| e.to_string())),
                        requeue_on_start: None,
                    })
                }
                _ => None,
            };
            Desired {
                name: r.name,
                origin: r.file.to_path_buf(),
                version,
            }
        })
        .collect()
}

use crate::sync::lock;
