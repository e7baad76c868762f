//! The one applier: every source of plugins (the plugins directory, `Plugin` objects with
//! their shadow revisions) says which instances it wants and in which version; the applier
//! diffs that against what it started ([`plan`](super::plan)), starts, swaps and stops
//! instances in the controller, and remembers what runs and which starts failed. A source
//! never calls the controller to start or stop an instance itself.

use super::plan::{Start, plan};
use super::state::{FailedStart, Runnable, Running, Target};
use crate::controller::{Applied, Controller, InstanceName, PluginInstance};
use crate::plugin::Plugin;
use crate::policy::Policy;
use std::collections::HashMap;
use std::sync::Arc;

/// One instance a source wants.
pub(crate) struct Desired<O> {
    /// The instance (its name never collides with another source's).
    pub name: InstanceName,
    /// Where it comes from (the plugin file, the `Plugin` object).
    pub origin: O,
    /// The version to run, or `None` while it has none that can start (one that runs keeps
    /// running: a source whose current content fails keeps its last good version).
    pub version: Option<Version>,
}

/// A version of an instance: what runs, under which policy.
pub(crate) struct Version {
    /// The plugin and policy content, compared with what runs.
    pub target: Target,
    /// The compiled plugin.
    pub plugin: Arc<Plugin>,
    /// Builds the policy it runs under, or says why none can be (a failed start); called
    /// only when the version starts.
    pub policy: PolicyFn,
    /// Another instance to queue every key of once this one starts (a shadow revision
    /// compares its decisions with the live one's, so the live one decides again).
    pub requeue_on_start: Option<InstanceName>,
}

/// Builds a version's policy when it starts.
pub(crate) type PolicyFn = Box<dyn FnOnce() -> Result<Policy, String> + Send>;

/// What one [`Applier::apply`] changed.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Instances started or swapped, in name order, with what the controller did.
    pub started: Vec<(String, Applied)>,
    /// Starts refused (by the policy or the controller), with why.
    pub failed: Vec<(String, String)>,
    /// Instances stopped: no longer wanted.
    pub removed: Vec<String>,
}

/// What runs and which starts failed, for one source.
#[derive(Debug)]
pub(crate) struct Applier<O> {
    running: HashMap<String, Running<O>>,
    failed: HashMap<String, FailedStart>,
}

impl<O> Default for Applier<O> {
    fn default() -> Self {
        Applier {
            running: HashMap::new(),
            failed: HashMap::new(),
        }
    }
}

impl<O: Clone> Applier<O> {
    /// What runs, by instance name.
    pub fn running(&self) -> &HashMap<String, Running<O>> {
        &self.running
    }

    /// Starts that failed and are not retried on the same target, by instance name.
    pub fn failed(&self) -> &HashMap<String, FailedStart> {
        &self.failed
    }

    /// Makes the controller run `desired`: starts or swaps every instance whose version
    /// differs from what runs (not one that failed on the same target, unless `force`),
    /// stops what is no longer wanted, and forgets failures of instances no longer wanted.
    pub async fn apply(
        &mut self,
        controller: &Controller,
        desired: Vec<Desired<O>>,
        force: bool,
    ) -> Changes {
        let runnable = desired.iter().map(|d| Runnable {
            name: d.name.clone(),
            file: &d.origin,
            plugin: d.version.as_ref().map_or("", |v| v.target.plugin.as_str()),
            policy: d.version.as_ref().map(|v| &v.target.policy),
        });
        let planned = plan::<O>(runnable, &self.running, &self.failed, force);
        let mut versions: HashMap<InstanceName, Version> = desired
            .into_iter()
            .filter_map(|d| Some((d.name, d.version?)))
            .collect();
        let mut done = Changes::default();
        for Start { name, file, target } in planned.start {
            let Some(version) = versions.remove(&name) else {
                continue;
            };
            let key = name.to_string();
            let policy = match (version.policy)() {
                Ok(policy) => policy,
                Err(error) => {
                    done.failed.push((key.clone(), error.clone()));
                    self.failed.insert(key, FailedStart { target, error });
                    continue;
                }
            };
            let instance = PluginInstance::new(version.plugin, name, None).with_policy(policy);
            match controller.upsert(instance).await {
                Ok(applied) => {
                    self.failed.remove(&key);
                    self.running.insert(key.clone(), Running { file, target });
                    if let Some(other) = &version.requeue_on_start {
                        controller.requeue(other.as_str());
                    }
                    done.started.push((key, applied));
                }
                Err(err) => {
                    let error = err.to_string();
                    done.failed.push((key.clone(), error.clone()));
                    self.failed.insert(key, FailedStart { target, error });
                }
            }
        }
        for name in planned.stop {
            controller.remove(&name).await;
            self.running.remove(&name);
            done.removed.push(name);
        }
        self.failed.retain(|n, _| planned.keep.contains(n));
        done
    }
}
