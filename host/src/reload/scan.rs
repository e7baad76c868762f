//! The scan step of a rescan: reads the plugin files and the policy files of their
//! instances, and compiles (in parallel, off the async runtime) the plugin files whose
//! content is new. Files still being written are left alone.

use super::error::ReloadError;
use super::files::{digest, instance_name, plugin_files, policy_file};
use super::policies::read_policy;
use super::state::State;
use crate::plugin::PluginRuntime;
use std::path::{Path, PathBuf};

/// Where a scan looks and what it skips.
pub(crate) struct Scan<'a> {
    /// The plugins directory.
    pub plugins: &'a Path,
    /// The policies directory.
    pub policies: &'a Path,
    /// Files still being written: not read this time.
    pub is_busy: &'a (dyn Fn(&Path) -> bool + Sync),
    /// Re-read and re-compile files that failed even when their content is unchanged.
    pub force: bool,
}

impl Scan<'_> {
    /// Brings `state.files` and `state.policies` up to date with the directories.
    pub async fn run(&self, state: &mut State, runtime: &PluginRuntime) -> Result<(), ReloadError> {
        let paths = plugin_files(self.plugins)?;
        state.files.retain(|p, _| paths.contains(p));
        self.load_changed(state, &paths, runtime).await;
        let names: Vec<String> = state.runnable().map(|r| r.name.to_string()).collect();
        for name in names {
            let file = policy_file(self.policies, &name);
            if !(self.is_busy)(&file) {
                read_policy(&mut state.policies, &name, &file, self.force);
            }
        }
        Ok(())
    }

    /// Reads every file not being written; compiles those whose digest is new.
    async fn load_changed(&self, state: &mut State, paths: &[PathBuf], runtime: &PluginRuntime) {
        let mut changed = Vec::new();
        for path in paths.iter().filter(|p| !(self.is_busy)(p)) {
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
                Some(e) if e.digest == digest && !(self.force && e.error.is_some()) => {}
                _ => changed.push((path.clone(), digest, bytes)),
            }
        }
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
}
