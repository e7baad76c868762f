//! `kubeplug test --faults`: each golden case run to a fixed point without faults, then again
//! under each Sieve-style perturbation placed at each call where it can strike (see
//! `perturbation`); a plugin that then fails to converge to the same state, or repeats an
//! effect for a duplicated event, fails the case with the perturbation that shows it.

mod engine;
mod perturbation;
mod world;

pub use engine::{Call, Finding, Reconciler, Start};
pub use perturbation::{Family, Perturbation};
pub use world::{Key, World};

use super::eval::{Inputs, Loaded};
use crate::fixtures::FixtureObjects;
use crate::plugin::Limits;
use serde_json::Value;
use std::sync::Arc;

/// What one family of perturbations found in a case.
#[derive(Debug)]
pub struct Verdict {
    /// The family.
    pub family: Family,
    /// How many places it was tried at, or the first finding.
    pub outcome: Result<usize, Finding>,
}

/// Runs the case fault-free (an `Err` when that has no fixed point), then every
/// perturbation of every family at every call of that run where it changes what the plugin
/// sees: one verdict per family.
pub async fn check<R: Reconciler>(plugin: &R, start: &Start) -> Result<Vec<Verdict>, Finding> {
    let reference = engine::run(plugin, start, None).await?;
    let mut verdicts = Vec::new();
    for family in Family::ALL {
        let places: Vec<Perturbation> = places(&reference, start)
            .into_iter()
            .filter(|p| p.family() == family)
            .collect();
        let mut outcome = Ok(places.len());
        for place in &places {
            tracing::debug!(perturbation = %place, "perturbed run");
            let result = match engine::run(plugin, start, Some(place)).await {
                Ok(trace) => match engine::difference(&reference.last, &trace.last) {
                    None => Ok(()),
                    Some(diff) => Err(Finding::Diverges {
                        perturbation: place.to_string(),
                        diff,
                    }),
                },
                Err(finding) => Err(finding),
            };
            if let Err(finding) = result {
                outcome = Err(finding);
                break;
            }
        }
        verdicts.push(Verdict { family, outcome });
    }
    Ok(verdicts)
}

/// Where each perturbation changes what the plugin sees in the fault-free run: a stale
/// object or stale reads where they changed since the call before, hidden children after a
/// call that created some, a duplicate of each call that changed the state, a crash between
/// each two writes of a call.
fn places(reference: &engine::Trace, start: &Start) -> Vec<Perturbation> {
    let calls = &reference.calls;
    let mut out = Vec::new();
    for call in 1..=calls.len() {
        let now = &calls[call - 1];
        if call >= 2 {
            let before = &calls[call - 2];
            let object = |w: &World| w.get(&start.target).map(world::comparable);
            if object(&before.before) != object(&now.before) {
                out.push(Perturbation::StaleObject { call });
            }
            let others = |w: &World| {
                let mut all = w.comparable();
                all.remove(&start.target);
                all
            };
            if others(&before.before) != others(&now.before) {
                out.push(Perturbation::StaleReads { call });
            }
            if !before.created.is_empty() {
                out.push(Perturbation::NotVisible {
                    call,
                    hidden: before.created.clone(),
                });
            }
        }
        if now.changed {
            out.push(Perturbation::Duplicate { call });
        }
        for after in 1..now.writes {
            out.push(Perturbation::Crash { call, after });
        }
    }
    out
}

/// A golden case's plugin calls, each reading the objects the engine hands it.
pub struct PluginCalls<'a> {
    /// The plugin.
    pub loaded: &'a Loaded,
    /// Its configuration.
    pub config: Option<Arc<str>>,
    /// Limits of each call.
    pub limits: Limits,
}

impl Reconciler for PluginCalls<'_> {
    async fn reconcile(&self, call: Call) -> Result<Vec<crate::contract::Action>, String> {
        let mut objects = FixtureObjects::default();
        for object in call.reads {
            objects.insert(object);
        }
        let inputs = Inputs {
            object: call.object,
            previous: call.previous,
            config: self.config.clone(),
            deleted: call.deleted,
            reason: Some(call.reason),
            attempt: call.attempt,
        };
        self.loaded
            .call_actions(inputs, self.limits, Arc::new(objects))
            .await
            .map_err(|lines| lines.join("\n"))
    }
}

/// The start of a case: the object and the objects of the cache (the object wins over a
/// cached copy of itself).
pub fn start(object: Value, previous: Option<Value>, cache: Option<&FixtureObjects>) -> Start {
    let mut objects: Vec<Value> = cache
        .map(|c| c.objects().cloned().collect())
        .unwrap_or_default();
    let mut target = object;
    if target.pointer("/metadata/namespace").is_none()
        && !super::eval::CLUSTER_SCOPED.contains(&target["kind"].as_str().unwrap_or_default())
    {
        // As `kubeplug eval` reconciles it: in `default`.
        target["metadata"]["namespace"] = "default".into();
    }
    let key = Key::of(&target);
    objects.push(target);
    Start {
        world: World::new(objects),
        target: key,
        previous,
    }
}
