//! A `Plugin`'s status as tools read it (kstatus): `observedGeneration`, the conditions
//! `Ready`, `Reconciling`, `Stalled` (and `Shadowing` during a rollout), with a
//! machine-readable reason and a one-line message, plus what runs: digest, declared
//! identity, mode, effective grant, which replica runs it, recent counts and the last
//! revisions (re-applying one of their digests rolls back).
//!
//! What a status carries from one pass to the next (transition times, revisions, the last
//! rollout's outcome) comes from what the host recorded ([`super::records`]), never from the
//! status read back from the object, which others may have written.

use super::crd_status::{
    Condition, ConditionStatus, Counts, Declared, PluginPolicyStatus, PluginStatus, RevisionEntry,
};
use super::refusal::Refusal;
use crate::policy::Mode;
use serde_json::Value;

/// How many revisions the status keeps.
pub const MAX_REVISIONS: usize = 5;

/// The revision that runs, as its status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningRevision {
    /// SHA-256 of the module.
    pub digest: String,
    /// The image it was pulled from, pinned to its manifest's digest (None: a ConfigMap).
    pub image: Option<String>,
    /// The generation of the Plugin it was started from.
    pub generation: i64,
    /// What the module declares: name, version, contract.
    pub declared: (String, String, String),
    /// Effective mode.
    pub mode: Mode,
    /// The effective grant in short form.
    pub grant: String,
    /// The applying policies (empty: none, so dry-run).
    pub policies: Vec<String>,
}

/// What the host made of one Plugin in this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// `metadata.generation` of the object seen.
    pub generation: i64,
    /// The revision that runs now, if any.
    pub running: Option<RunningRevision>,
    /// Why the current generation does not run (`None`: it runs).
    pub refusal: Option<Refusal>,
    /// Which replica (or shards) runs it.
    pub runner: String,
    /// Reconciles, errors and denied actions seen by this replica.
    pub counts: (u64, u64, u64),
    /// The rollout's report while a new revision runs in shadow.
    pub rollout: Option<Value>,
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

fn mode_str(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "enforce",
        Mode::DryRun => "dry-run",
    }
}

/// A condition, keeping `lastTransitionTime` from `previous` when its status is unchanged.
fn condition(
    previous: Option<&Value>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: &str,
) -> Condition {
    let status = ConditionStatus::from(status);
    let written = serde_json::to_value(status).unwrap_or_default();
    let since = previous
        .and_then(|p| p.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .filter(|c| c["status"] == written)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now)
        .to_string();
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// The status of a Plugin given what the host observed and what it recorded of the status
/// it wrote before (`previous`: [`super::records::Record::view`], never the status read
/// back).
pub fn plugin_status(obs: &Observation, previous: Option<&Value>, now: &str) -> Value {
    let g = obs.generation;
    let mut conditions = Vec::new();
    match (&obs.refusal, &obs.running) {
        (None, Some(run)) => {
            let under = match run.policies.as_slice() {
                [] => "no PluginPolicy applies to its namespace".to_string(),
                ps => format!("PluginPolicy {}", ps.join(", ")),
            };
            let message = format!(
                "revision {} runs in {} mode under {under}",
                short(&run.digest),
                mode_str(run.mode)
            );
            conditions.push(condition(
                previous, "Ready", true, "Running", &message, g, now,
            ));
        }
        (None, None) => {
            let message = "the current generation is being loaded";
            conditions.push(condition(
                previous, "Ready", false, "Loading", message, g, now,
            ));
            conditions.push(condition(
                previous,
                "Reconciling",
                true,
                "Loading",
                message,
                g,
                now,
            ));
        }
        (Some(refusal), running) => {
            let mut message = refusal.message.clone();
            if let Some(run) = running {
                message.push_str(&format!(
                    "; revision {} (generation {}) keeps running",
                    short(&run.digest),
                    run.generation
                ));
            }
            let reason = refusal.reason.as_str();
            conditions.push(condition(
                previous, "Ready", false, reason, &message, g, now,
            ));
            if refusal.reason.is_transient() {
                conditions.push(condition(
                    previous,
                    "Reconciling",
                    true,
                    reason,
                    &message,
                    g,
                    now,
                ));
            } else {
                conditions.push(condition(
                    previous, "Stalled", true, reason, &message, g, now,
                ));
            }
        }
    }
    if let Some(rollout) = &obs.rollout {
        let message = rollout["message"]
            .as_str()
            .unwrap_or("a new revision runs in shadow");
        let reason = rollout["reason"].as_str().unwrap_or("Shadowing");
        conditions.push(condition(
            previous,
            "Shadowing",
            true,
            reason,
            message,
            g,
            now,
        ));
    }
    let run = obs.running.as_ref();
    // The last rollout's outcome stays until the next one (a shadow that no longer runs,
    // stopped or lost with a restart, is no outcome).
    let rollout = obs.rollout.clone().or_else(|| {
        previous
            .and_then(|p| p.get("rollout"))
            .filter(|r| r["phase"] != "Shadowing")
            .cloned()
    });
    let status = PluginStatus {
        observed_generation: g,
        conditions,
        mode: run.map(|r| mode_str(r.mode).into()),
        digest: run.map(|r| format!("sha256:{}", r.digest)),
        short_digest: run.map(|r| short(&r.digest).into()),
        image: run.and_then(|r| r.image.clone()),
        declared: run.map(|r| Declared {
            name: r.declared.0.clone(),
            version: r.declared.1.clone(),
            contract: r.declared.2.clone(),
        }),
        grant: run.map(|r| r.grant.clone()),
        runner: obs.runner.clone(),
        counts: Counts {
            reconciles: obs.counts.0,
            errors: obs.counts.1,
            denied: obs.counts.2,
        },
        rollout,
        revisions: revisions(obs, previous, now),
    };
    serde_json::to_value(status).expect("a status serialises")
}

/// The last revisions, newest first: the running one added when it is new.
fn revisions(obs: &Observation, previous: Option<&Value>, now: &str) -> Vec<Value> {
    let mut list: Vec<Value> = previous
        .and_then(|p| p.get("revisions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(run) = &obs.running {
        let digest = format!("sha256:{}", run.digest);
        if list.first().and_then(|r| r["digest"].as_str()) != Some(&digest) {
            list.retain(|r| r["digest"].as_str() != Some(&digest));
            let revision = RevisionEntry {
                digest,
                image: run.image.clone(),
                generation: run.generation,
                at: now.into(),
            };
            list.insert(
                0,
                serde_json::to_value(revision).expect("a revision serialises"),
            );
        }
    }
    list.truncate(MAX_REVISIONS);
    list
}

/// Whether `a` and `b` differ in more than their counts: counts change on every reconcile,
/// so they alone are written at most every so often.
pub fn differs_beyond_counts(a: &Value, b: Option<&Value>) -> bool {
    let Some(b) = b else { return true };
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("counts");
        }
        v
    };
    strip(a) != strip(b)
}

/// The status of a PluginPolicy: `Ready` when its spec parses (and it is in force), else
/// `Stalled/InvalidSpec` with the parse error; its last good spec stays in force.
pub fn policy_status(
    generation: i64,
    error: Option<&str>,
    applies: usize,
    previous: Option<&Value>,
    now: &str,
) -> Value {
    let conditions = match error {
        None => {
            let message =
                format!("in force; bounds the Plugins of {applies} namespace(s) with Plugins");
            vec![condition(
                previous, "Ready", true, "Accepted", &message, generation, now,
            )]
        }
        Some(e) => vec![
            condition(previous, "Ready", false, "InvalidSpec", e, generation, now),
            condition(previous, "Stalled", true, "InvalidSpec", e, generation, now),
        ],
    };
    serde_json::to_value(PluginPolicyStatus {
        observed_generation: generation,
        conditions,
    })
    .expect("a status serialises")
}

#[cfg(test)]
mod tests {
    use super::super::refusal::Reason;
    use super::*;
    use serde_json::json;

    fn running(digest: &str) -> RunningRevision {
        RunningRevision {
            digest: digest.into(),
            image: None,
            generation: 1,
            declared: ("image-pinner".into(), "0.1.0".into(), "0.1.0".into()),
            mode: Mode::Enforce,
            grant: "team-a; enforce".into(),
            policies: vec!["tenants".into()],
        }
    }

    fn obs(running: Option<RunningRevision>, refusal: Option<Refusal>) -> Observation {
        Observation {
            generation: 2,
            running,
            refusal,
            runner: "r1".into(),
            counts: (3, 1, 0),
            rollout: None,
        }
    }

    fn cond<'a>(s: &'a Value, t: &str) -> Option<&'a Value> {
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
    }

    #[test]
    fn ready_when_the_current_generation_runs() {
        let s = plugin_status(&obs(Some(running(&"a".repeat(64))), None), None, "T1");
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(cond(&s, "Ready").unwrap()["status"], "True");
        assert!(cond(&s, "Stalled").is_none());
        assert_eq!(s["shortDigest"], "aaaaaaaaaaaa");
        assert_eq!(s["mode"], "enforce");
        assert_eq!(s["revisions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn stalled_with_the_reason_and_the_revision_that_keeps_running() {
        let r = Refusal::new(Reason::CompileFailed, "not a component");
        let s = plugin_status(&obs(Some(running(&"b".repeat(64))), Some(r)), None, "T1");
        let ready = cond(&s, "Ready").unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "CompileFailed");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("bbbbbbbbbbbb (generation 1) keeps running")
        );
        assert_eq!(cond(&s, "Stalled").unwrap()["reason"], "CompileFailed");
        let t = Refusal::new(Reason::ModuleUnavailable, "503");
        let s = plugin_status(&obs(None, Some(t)), None, "T1");
        assert!(cond(&s, "Stalled").is_none());
        assert_eq!(cond(&s, "Reconciling").unwrap()["status"], "True");
    }

    #[test]
    fn transition_times_and_revisions_carry_over() {
        let first = plugin_status(&obs(Some(running(&"a".repeat(64))), None), None, "T1");
        let again = plugin_status(
            &obs(Some(running(&"a".repeat(64))), None),
            Some(&first),
            "T2",
        );
        assert_eq!(cond(&again, "Ready").unwrap()["lastTransitionTime"], "T1");
        assert!(
            !differs_beyond_counts(&again, Some(&first))
                || again["revisions"] != first["revisions"]
        );
        let mut o = obs(Some(running(&"c".repeat(64))), None);
        o.counts = (9, 9, 9);
        let next = plugin_status(&o, Some(&again), "T3");
        let revs = next["revisions"].as_array().unwrap();
        assert_eq!(revs.len(), 2);
        assert_eq!(revs[0]["digest"], format!("sha256:{}", "c".repeat(64)));
        assert!(differs_beyond_counts(&next, Some(&again)));
        let mut counted = again.clone();
        counted["counts"]["reconciles"] = json!(100);
        assert!(!differs_beyond_counts(&counted, Some(&again)));
    }

    #[test]
    fn a_decided_rollout_carries_over_and_a_stopped_shadow_does_not() {
        let held = json!({"phase": "Held", "message": "m"});
        let recorded = json!({"revisions": [], "rollout": held});
        let s = plugin_status(&obs(None, None), Some(&recorded), "T1");
        assert_eq!(s["rollout"], held);
        let recorded = json!({"revisions": [], "rollout": {"phase": "Shadowing"}});
        let s = plugin_status(&obs(None, None), Some(&recorded), "T1");
        assert!(s.get("rollout").is_none(), "{s}");
    }
}
