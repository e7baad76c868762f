//! The reloader: keeps the controller's plugins in step with the plugins directory and the
//! policy files. Every rescan compares digests with what it saw last, so an unchanged file
//! costs a read and a hash, never a compile, a swap or a repeated error report.

use super::config::ReloadConfig;
use super::error::ReloadError;
use super::events::DirEvents;
use super::files::{digest, instance_name, plugin_files, policy_file};
use super::policies::{PolicyEntry, read_policy};
use super::status::{FileStatus, ReloadMetrics};
use crate::controller::{Applied, Controller, PluginInstance};
use crate::plugin::{Plugin, PluginRuntime};
use std::collections::{BTreeMap, HashMap, HashSet};
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

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileEntry>,
    policies: HashMap<String, PolicyEntry>,
    running: HashMap<String, Running>,
    /// Start attempts that failed, by plugin: not retried until the plugin file or its
    /// policy changes (or a forced rescan).
    failed_starts: HashMap<String, (Target, String)>,
    /// Whether "no plugins loaded" was said since the last plugin stopped running.
    warned_idle: bool,
}

/// One plugin file.
#[derive(Default)]
struct FileEntry {
    /// Digest of its current content.
    digest: String,
    /// The last content that loaded (older than `digest` while the current one fails).
    good: Option<Arc<Plugin>>,
    /// Why the current content does not load.
    error: Option<String>,
}

/// What runs (or was tried) for a plugin: its plugin digest and policy digest.
type Target = (String, Option<String>);

struct Running {
    file: PathBuf,
    target: Target,
}

/// What one rescan changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanSummary {
    pub started: Vec<String>,
    pub updated: Vec<String>,
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

    async fn rescan_leaving(
        &self,
        busy: &HashSet<OsString>,
        force: bool,
    ) -> Result<ScanSummary, ReloadError> {
        let shared = &*self.shared;
        let mut state = shared.state.lock().await;
        let paths = plugin_files(&shared.config.plugins)?;
        let is_busy = |p: &Path| p.file_name().is_some_and(|n| busy.contains(n));
        state.files.retain(|p, _| paths.contains(p));
        self.load_changed(&mut state, &paths, &is_busy, force).await;

        // What should run, by instance name: each file runs as the instance its own name
        // gives (what the plugin declares never picks it), so no file can take over
        // another's name, policy or queue; names are unique as file names are.
        let desired: BTreeMap<String, (PathBuf, Arc<Plugin>)> = state
            .files
            .iter()
            .filter_map(|(path, entry)| {
                let name = instance_name(path).ok()?;
                Some((name, (path.clone(), entry.good.clone()?)))
            })
            .collect();

        let mut summary = ScanSummary::default();
        for (name, (path, plugin)) in &desired {
            let policy_path = policy_file(&shared.config.policies, name);
            if !is_busy(&policy_path) {
                read_policy(&mut state.policies, name, &policy_path, force);
            }
            let Some(good) = state.policies.get(name).and_then(|p| p.good.clone()) else {
                continue;
            };
            let target: Target = (plugin.digest().to_string(), good.digest.clone());
            if let Some(running) = state.running.get_mut(name)
                && running.target == target
            {
                running.file = path.clone();
                continue;
            }
            if !force
                && state
                    .failed_starts
                    .get(name)
                    .is_some_and(|(t, _)| *t == target)
            {
                continue;
            }
            let policy = match good.policy(name) {
                Ok(p) => p,
                Err(err) => {
                    state
                        .failed_starts
                        .insert(name.clone(), (target, err.to_string()));
                    continue;
                }
            };
            let instance = PluginInstance::named(plugin.clone(), name, None).with_policy(policy);
            match shared.controller.upsert(instance).await {
                Ok(applied) => {
                    state.failed_starts.remove(name);
                    state.running.insert(
                        name.clone(),
                        Running {
                            file: path.clone(),
                            target,
                        },
                    );
                    let (list, result) = match applied {
                        Applied::Started => (&mut summary.started, "started"),
                        Applied::Updated => (&mut summary.updated, "updated"),
                        Applied::Restarted => (&mut summary.updated, "restarted"),
                    };
                    list.push(name.clone());
                    shared.metrics.reloaded(name, result);
                }
                Err(err) => {
                    state
                        .failed_starts
                        .insert(name.clone(), (target, err.to_string()));
                }
            }
        }

        let gone: Vec<String> = state
            .running
            .keys()
            .filter(|n| !desired.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            shared.controller.remove(&name).await;
            state.running.remove(&name);
            state.failed_starts.remove(&name);
            shared.metrics.reloaded(&name, "removed");
            summary.removed.push(name);
        }
        state.policies.retain(|n, _| desired.contains_key(n));
        state.failed_starts.retain(|n, _| desired.contains_key(n));

        summary.failing = self.publish(&state, force);
        if state.running.is_empty() && !state.warned_idle {
            tracing::warn!(dir = %shared.config.plugins.display(), "no plugins loaded: nothing will be reconciled");
        }
        state.warned_idle = state.running.is_empty();
        Ok(summary)
    }

    /// Reads every file not being written; compiles (in parallel, off the async runtime)
    /// those whose digest is new.
    async fn load_changed(
        &self,
        state: &mut State,
        paths: &[PathBuf],
        is_busy: &(dyn Fn(&Path) -> bool + Sync),
        force: bool,
    ) {
        let mut changed = Vec::new();
        for path in paths.iter().filter(|p| !is_busy(p)) {
            let bytes = match tokio::fs::read(path).await {
                Ok(b) => b,
                // Gone between listing and reading: the next event rescans.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => {
                    let entry = state.files.entry(path.clone()).or_default();
                    entry.error = Some(format!("cannot read {}: {err}", path.display()));
                    continue;
                }
            };
            let digest = digest(&bytes);
            if let Err(why) = instance_name(path) {
                // Never compiled: a file that cannot name its instance does not run.
                let entry = state.files.entry(path.clone()).or_default();
                entry.digest = digest;
                entry.good = None;
                entry.error = Some(why);
                continue;
            }
            match state.files.get(path) {
                Some(e) if e.digest == digest && !(force && e.error.is_some()) => {}
                _ => changed.push((path.clone(), digest, bytes)),
            }
        }
        let runtime = &self.shared.runtime;
        let loads = futures::future::join_all(changed.into_iter().map(
            |(path, digest, bytes)| async move {
                let loaded = runtime.load_bytes(&path.display().to_string(), bytes).await;
                (path, digest, loaded)
            },
        ))
        .await;
        for (path, digest, loaded) in loads {
            let entry = state.files.entry(path).or_default();
            entry.digest = digest;
            match loaded {
                Ok(plugin) => {
                    entry.good = Some(plugin);
                    entry.error = None;
                }
                Err(err) => entry.error = Some(err.to_string()),
            }
        }
    }

    /// Rebuilds the status of every file; reports each failure that is new (new content or
    /// new reason) once, and each recovery.
    fn publish(&self, state: &State, force: bool) -> Vec<PathBuf> {
        let shared = &*self.shared;
        let mut status = lock(&shared.status);
        let mut fresh = BTreeMap::new();
        let mut failing = Vec::new();
        for (path, entry) in &state.files {
            let name = instance_name(path).ok();
            let running = name
                .as_deref()
                .and_then(|n| state.running.get(n).map(|r| (n, r)))
                .filter(|(_, r)| r.file == *path);
            // The instance this file stands for, once some version of it has loaded.
            let mine = name.as_deref().filter(|_| entry.good.is_some());
            let error = entry
                .error
                .clone()
                .or_else(|| {
                    let n = mine?;
                    let policy = state.policies.get(n)?;
                    policy.error.clone().map(|e| match &policy.good {
                        Some(_) => format!("{e} (the previous policy stays in force)"),
                        None => format!("{e} (plugin not started)"),
                    })
                })
                .or_else(|| {
                    let n = mine?;
                    let (target, err) = state.failed_starts.get(n)?;
                    let running = state.running.get(n);
                    (running.map(|r| &r.target) != Some(target)).then(|| err.clone())
                });
            let file = path.display().to_string();
            let previous = status.get(path);
            match &error {
                Some(err) => {
                    failing.push(path.clone());
                    let known = previous.is_some_and(|s| {
                        s.digest == entry.digest && s.error.as_deref() == Some(err.as_str())
                    });
                    if !known || force {
                        let kept = running.map(|(_, r)| r.target.0.as_str());
                        tracing::error!(file = %file, digest = %entry.digest, running = kept.unwrap_or("none"), "plugin file not applied: {err}");
                        shared.metrics.failed(&file);
                    }
                }
                None => {
                    if previous.is_some_and(|s| s.error.is_some()) {
                        tracing::info!(file = %file, digest = %entry.digest, "plugin file recovered");
                        shared.metrics.recovered(&file);
                    }
                }
            }
            fresh.insert(
                path.clone(),
                FileStatus {
                    file: path.clone(),
                    digest: entry.digest.clone(),
                    plugin: running.map(|(n, _)| n.to_string()),
                    declared: entry.good.as_ref().map(|p| p.declared_name().to_string()),
                    running: running.map(|(_, r)| r.target.0.clone()),
                    error,
                },
            );
        }
        for gone in status.keys().filter(|p| !fresh.contains_key(*p)) {
            shared.metrics.recovered(&gone.display().to_string());
        }
        *status = fresh;
        failing
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
