//! What a source of Plugin objects keeps between passes and within one: each Plugin's
//! resolved revision (or refusal), the previous revision kept to fall back on, shadow runs,
//! fetched and compiled modules, Events sent, and the applier's record of what runs.

use super::forgery::Marks;
use super::module::{CompileBudget, ConfigMapModule};
use super::refusal::Refusal;
use super::spec::{ClusterPolicySpec, PluginObjectSpec};
use super::status::RunningRevision;
use crate::controller::InstanceName;
use crate::plugin::Plugin;
use crate::policy::Policy;
use crate::reload::applier::Applier;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Where an object-backed instance comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectOrigin {
    /// The Plugin's uid: a Plugin deleted and created again under its name is a new one.
    pub(super) uid: String,
}

/// What one Plugin resolved to in a pass: a revision to run, or why not.
pub(super) struct Resolved {
    pub(super) plugin: Arc<Plugin>,
    /// The image it came from, pinned to the manifest's digest.
    pub(super) image: Option<String>,
    /// The request it was granted from, and the Plugin's generation then.
    pub(super) spec: PluginObjectSpec,
    pub(super) generation: i64,
    pub(super) policy: Policy,
    pub(super) grant_digest: String,
    pub(super) grant_summary: String,
    pub(super) policies: Vec<String>,
    pub(super) origin: ObjectOrigin,
}

/// One Plugin in a pass: its instance name, what its current spec resolved to, and the
/// previous revision re-granted when the current spec cannot run.
pub(super) struct Entry {
    pub(super) obj: Arc<DynamicObject>,
    pub(super) instance: Result<InstanceName, Refusal>,
    pub(super) outcome: Result<Resolved, Refusal>,
    pub(super) fallback: Option<Resolved>,
    /// Why the current spec's revision, which resolved, does not run live yet (a rollout
    /// in shadow, or held), and the rollout's report.
    pub(super) held: Option<Refusal>,
    pub(super) rollout: Option<Value>,
}

impl Entry {
    /// The revision to run live: the current spec's, or the previous one's.
    pub(super) fn runs(&self) -> Option<&Resolved> {
        match self.held {
            Some(_) => self.fallback.as_ref(),
            None => self.outcome.as_ref().ok().or(self.fallback.as_ref()),
        }
    }
}

/// A candidate revision running in shadow beside a Plugin's live one.
pub(super) struct ShadowRun {
    /// Module digest and grant digest of the candidate.
    pub(super) candidate: (String, String),
    pub(super) started: Instant,
}

/// The last revision that started, kept to re-grant it while a newer spec cannot run.
pub(super) struct Good {
    pub(super) origin: ObjectOrigin,
    pub(super) spec: PluginObjectSpec,
    pub(super) plugin: Arc<Plugin>,
    pub(super) image: Option<String>,
    pub(super) generation: i64,
}

/// A module as last fetched: its ConfigMap's resourceVersion then, and the digest (or why
/// it could not be used).
pub(super) type Fetched = (Option<String>, Result<String, Refusal>);

#[derive(Default)]
pub(super) struct State {
    /// What runs from the Plugin objects (live and shadow revisions), and which starts
    /// failed.
    pub(super) applier: Applier<ObjectOrigin>,
    /// The generation and grant each running instance was started from.
    pub(super) running_info: HashMap<String, RunningRevision>,
    pub(super) last_good: HashMap<String, Good>,
    /// Candidates in shadow, by the live instance's name.
    pub(super) shadows: HashMap<String, ShadowRun>,
    /// The last rollout's report per instance (promoted or held), kept for status.
    pub(super) rollouts: HashMap<String, Value>,
    pub(super) compiled: HashMap<String, Result<Arc<Plugin>, Refusal>>,
    pub(super) fetched: HashMap<(ConfigMapModule, Option<String>), Fetched>,
    pub(super) good_policies: HashMap<String, ClusterPolicySpec>,
    /// Events already recorded, by instance: (reason, generation).
    pub(super) evented: HashSet<(String, String, i64)>,
    /// Compiles each namespace may start now.
    pub(super) compiles: CompileBudget,
    /// When each Plugin's status was last written with new counts.
    pub(super) counts_written: HashMap<String, Instant>,
    /// What each Plugin's status was when last written over, and forgeries noted.
    pub(super) marks: Marks,
}

#[derive(Default)]
pub(super) struct Denials {
    pub(super) count: u64,
    /// First denial of each grant kind not yet reported as an Event.
    pub(super) unreported: Vec<(String, String)>,
    pub(super) reported: HashSet<String>,
}
