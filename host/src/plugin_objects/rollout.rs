//! Shadow rollouts (`spec.rollout.shadow`): a Plugin whose live revision runs and whose new
//! revision resolved differently runs the new one in dry-run beside the live one, on the
//! same keys, until the comparison of their decisions says promote (the applier then swaps
//! the live instance) or hold. This pass step only says which shadow instances it wants; the
//! applier starts and stops them.

use super::pass_state::{Entry, ObjectOrigin, Resolved, ShadowRun, State};
use super::refusal::{Reason, Refusal};
use super::resolve::regrant;
use super::shadow::{Comparison, Verdict};
use super::source::{PluginObjects, lock};
use super::spec::ClusterPolicySpec;
use crate::controller::InstanceName;
use crate::policy::Mode;
use crate::reload::applier::{Desired, Version};
use crate::reload::state::{PolicyContent, Target};
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

impl PluginObjects {
    /// Shadow rollouts: a Plugin whose live revision runs and whose new revision resolved
    /// differently, with `spec.rollout.shadow`, runs the new one in dry-run beside the live
    /// one until the comparison says promote (the planner then swaps) or hold. Returns the
    /// shadow instances wanted, for the applier to run.
    pub(super) async fn roll_out(
        &self,
        state: &mut State,
        entries: &mut [Entry],
        in_force: &[(String, ClusterPolicySpec)],
        labels: &mut HashMap<String, BTreeMap<String, String>>,
    ) -> Vec<Desired<ObjectOrigin>> {
        let inner = &*self.inner;
        let mut wanted: HashSet<String> = HashSet::new();
        let mut shadows = Vec::new();
        for entry in entries.iter_mut() {
            let (Ok(name), Ok(new)) = (&entry.instance, &entry.outcome) else {
                continue;
            };
            let Some(rollout) = new.spec.rollout.clone().filter(|r| r.shadow.is_some()) else {
                continue;
            };
            let candidate = (new.plugin.digest().to_string(), new.grant_digest.clone());
            let live_target = state
                .applier
                .running()
                .get(name.as_str())
                .map(|r| r.target.clone());
            let Some(good) = state
                .last_good
                .get(name.as_str())
                .filter(|g| g.origin == new.origin)
            else {
                continue;
            };
            let Some(live_target) = live_target else {
                continue;
            };
            if live_target.plugin == candidate.0
                && live_target.policy == PolicyContent::Granted(candidate.1.clone())
            {
                continue;
            }
            let ns = entry.obj.namespace().unwrap_or_default();
            let applying = self.applying(&ns, in_force, labels).await;
            let live = match regrant(&self.inner, good, &ns, name, &applying).await {
                Ok(live) => live,
                // The live revision's grant no longer holds: nothing to compare with.
                Err(_) => continue,
            };
            let fresh = state
                .shadows
                .get(name.as_str())
                .is_none_or(|s| s.candidate != candidate);
            if fresh {
                lock(&inner.comparisons).insert(name.to_string(), Comparison::default());
                state.shadows.insert(
                    name.to_string(),
                    ShadowRun {
                        candidate: candidate.clone(),
                        started: Instant::now(),
                    },
                );
                tracing::info!(record = "reload", result = "shadowing", plugin = %name, candidate = %candidate.0, "a new revision runs in shadow beside the live one");
                // A shadow promoted by time needs a pass when its time is up, whatever else
                // happens (or does not) meanwhile; past the resync period the periodic pass
                // serves (so a timer lives at most that long, however often specs change).
                if let Some(duration) = rollout
                    .shadow
                    .as_ref()
                    .and_then(|s| s.duration.as_deref())
                    .and_then(|d| super::spec::parse_duration(d).ok())
                    .filter(|d| *d < inner.config.resync)
                {
                    let wake = inner.wake.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(duration).await;
                        wake.notify_one();
                    });
                }
            }
            let started = state.shadows[name.as_str()].started;
            let cmp = lock(&inner.comparisons)
                .get(name.as_str())
                .cloned()
                .unwrap_or_default();
            let generation = entry.obj.metadata.generation.unwrap_or(0);
            match cmp.verdict(&rollout, started.elapsed()) {
                Verdict::Promote(why) => {
                    let report = cmp.report("Promoted", &candidate.0, generation, &why);
                    tracing::info!(record = "reload", result = "promoted", plugin = %name, compared = cmp.compared(), differing = cmp.differing(), "shadow revision promoted: {why}");
                    state.rollouts.insert(name.to_string(), report);
                    // Not wanted any more: its shadow stops below; the planner swaps.
                }
                Verdict::Continue => {
                    wanted.insert(name.to_string());
                    shadows.push(shadow_of(name, new, &candidate));
                    let message = format!(
                        "generation {generation} runs in shadow beside the live revision: {} keys compared, {} differing",
                        cmp.compared(),
                        cmp.differing()
                    );
                    entry.rollout =
                        Some(cmp.report("Shadowing", &candidate.0, generation, &message));
                    entry.held = Some(Refusal::new(Reason::Shadowing, message));
                    entry.fallback = Some(live);
                }
                Verdict::Hold(why) => {
                    wanted.insert(name.to_string());
                    shadows.push(shadow_of(name, new, &candidate));
                    let report = cmp.report("Held", &candidate.0, generation, &why);
                    if state
                        .rollouts
                        .get(name.as_str())
                        .is_none_or(|r| r["phase"] != "Held")
                    {
                        tracing::warn!(record = "reload", result = "held", plugin = %name, compared = cmp.compared(), differing = cmp.differing(), "shadow revision held: {why}");
                    }
                    state.rollouts.insert(name.to_string(), report.clone());
                    entry.rollout = Some(report);
                    entry.held = Some(Refusal::new(Reason::RolloutHeld, why));
                    entry.fallback = Some(live);
                }
            }
        }
        let stale: Vec<String> = state
            .shadows
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        // The applier stops their instances: they are not in the desired set.
        for name in stale {
            state.shadows.remove(&name);
            lock(&inner.comparisons).remove(&name);
        }
        for entry in entries.iter_mut() {
            if let (None, Ok(name)) = (&entry.rollout, &entry.instance) {
                entry.rollout = state.rollouts.get(name.as_str()).cloned();
            }
        }
        shadows
    }
}

/// The shadow instance of Plugin instance `name`: its candidate revision `new`, in dry-run
/// (its actions audited, never sent); starting it queues the live instance's keys again, so
/// both decide on the same keys.
fn shadow_of(
    name: &InstanceName,
    new: &Resolved,
    candidate: &(String, String),
) -> Desired<ObjectOrigin> {
    let mut policy = new.policy.clone();
    policy.mode = Mode::DryRun;
    Desired {
        name: name.shadow(),
        origin: new.origin.clone(),
        version: Some(Version {
            target: Target {
                plugin: candidate.0.clone(),
                policy: PolicyContent::Granted(candidate.1.clone()),
            },
            plugin: new.plugin.clone(),
            policy: Box::new(move || Ok(policy)),
            requeue_on_start: Some(name.clone()),
        }),
    }
}
