//! What the reloader remembers between rescans: the plugin files and policy files as last
//! seen, what runs, and which starts failed. A rescan updates the files and policies
//! ([`scan`](super::scan)), plans from them ([`plan`](super::plan)), applies the plan to the
//! controller and reports ([`report`](super::report)).

use super::applier::Applier;
use super::files::instance_name;
use super::policies::PolicyEntry;
use crate::controller::InstanceName;
use crate::plugin::Plugin;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The content of a plugin's policy as seen: no file (the plugin runs in dry-run under
/// the default policy), a file with this SHA-256, or an effective grant computed from API
/// objects (a `Plugin`'s request and the `PluginPolicy`s bounding it), by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum PolicyContent {
    /// No policy file.
    Absent,
    /// A policy file, by the SHA-256 of its text.
    File(String),
    /// An effective grant computed from API objects, by the SHA-256 of its document.
    Granted(String),
}

/// One version of a plugin instance: which plugin content runs under which policy content.
/// The reloader swaps an instance exactly when its target changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// SHA-256 of the plugin file's content that runs.
    pub plugin: String,
    /// The policy it runs under.
    pub policy: PolicyContent,
}

/// An instance the controller runs, and the version it runs. `O` says where it comes from:
/// the plugin file's path, or the API object's reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Running<O = PathBuf> {
    /// Where it runs from.
    pub file: O,
    /// The version that runs.
    pub target: Target,
}

/// A start (or swap) that the controller or the policy refused: not retried until the
/// target changes (a new plugin or policy file) or a forced rescan (SIGHUP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailedStart {
    /// The version that was tried.
    pub target: Target,
    /// Why it did not start.
    pub error: String,
}

/// One plugin file as last scanned.
#[derive(Default)]
pub(crate) struct PluginFile {
    /// SHA-256 of its current content.
    pub digest: String,
    /// The last content that loaded (older than `digest` while the current content fails).
    pub good: Option<Arc<Plugin>>,
    /// Why the current content does not run: unreadable, misnamed, or does not load.
    pub error: Option<String>,
}

/// Everything the reloader remembers; one rescan at a time holds it.
#[derive(Default)]
pub(crate) struct State {
    /// The plugin files, by path.
    pub files: BTreeMap<PathBuf, PluginFile>,
    /// The policy file of each instance that has a file, by instance name.
    pub policies: HashMap<String, PolicyEntry>,
    /// What the controller runs from the directory, and which starts failed.
    pub applier: Applier<PathBuf>,
    /// Whether "no plugins loaded" was said since the last plugin stopped running.
    pub warned_idle: bool,
}

/// A source entry (a plugin file, a `Plugin` object) that has a version to run, as the
/// planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Runnable<'a, O: ?Sized = Path> {
    /// The instance it runs as (the file's name, or `<namespace>/<name>` of the object).
    pub name: InstanceName,
    /// Where it comes from.
    pub file: &'a O,
    /// SHA-256 of the version that loaded last.
    pub plugin: &'a str,
    /// The policy that can run now, if any (`None`: its file never parsed).
    pub policy: Option<&'a PolicyContent>,
}

impl State {
    /// The files that have a version to run, each with the instance it runs as; files
    /// whose name is not an instance name never run.
    pub fn runnable(&self) -> impl Iterator<Item = Runnable<'_>> + '_ {
        self.files.iter().filter_map(|(path, file)| {
            let name = instance_name(path).ok()?;
            let plugin = file.good.as_ref()?;
            let policy = self
                .policies
                .get(name.as_str())
                .and_then(|p| p.good.as_ref())
                .map(|g| &g.content);
            Some(Runnable {
                name,
                file: path.as_path(),
                plugin: plugin.digest(),
                policy,
            })
        })
    }
}
