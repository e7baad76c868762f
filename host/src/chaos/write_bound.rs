//! The write bound of issue 36: at most one write per needed change, plus those the
//! schedule's faults made necessary, each counted and explained. Every host write of a run
//! is classified from the sim's request log (a change, a no-op, answered by an injected
//! fault, refused by the server); the fault-free run's changes per object are the needed
//! ones, and every write of a schedule beyond them must have a cause the schedule made: the
//! fault that answered it, a retry after a faulted or refused write to the same object, or a
//! stale view (a fault on a watch or list, a host restart, a replica paused) shortly before.

use super::host_process::LEASE_NAMESPACE;
use super::schedule::HOST_AGENT;
use jiff::{SignedDuration, Timestamp};
use kubeplug_sim::RequestRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How long a disturbance may explain writes after it ended, unless it says otherwise: the
/// hosts' writes after a fault, a restart or a short pause, measured on seed 1's schedules,
/// came within 3.2 s of its end.
pub const HORIZON: SignedDuration = SignedDuration::from_secs(5);

/// How long a stalled watch may explain writes: it is abandoned after the hosts' watch
/// timeout plus 5 s, then relisted, and the keys the relist queues are written.
pub fn stall_horizon(watch_timeout: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(watch_timeout).unwrap_or_default() + SignedDuration::from_secs(7)
}

/// What one host write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// It changed the stored object (also when a fault cut its answer afterwards).
    Change,
    /// Answered 2xx, nothing changed.
    NoOp,
    /// Answered by an injected fault, nothing changed.
    Faulted,
    /// Refused by the server (409 conflict or already exists, 404, 422…).
    Refused,
}

/// One host write, with the object it targets.
#[derive(Debug, Clone, PartialEq)]
pub struct HostWrite {
    /// The request's sequence number in the log.
    pub seq: u64,
    /// When it arrived.
    pub at: Timestamp,
    /// `resource[/subresource] namespace/name` (a generated name as `prefix*`).
    pub target: String,
    /// The verb and answer, for messages (`patch 200`).
    pub request: String,
    /// What it did.
    pub effect: Effect,
    /// Whether an injected fault answered it (a cut answer may still have changed it).
    pub faulted: bool,
    /// Whether the server refused an update or patch with 409 Conflict (not injected): the
    /// object changed since the host read it.
    pub conflict: bool,
}

impl fmt::Display for HostWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let effect = match (self.effect, self.faulted) {
            (Effect::Change, true) => "a change, its answer cut by a fault",
            (Effect::Change, false) => "a change",
            (Effect::NoOp, _) => "a no-op",
            (Effect::Faulted, _) => "answered by a fault",
            (Effect::Refused, _) => "refused",
        };
        write!(f, "#{} {} ({effect})", self.seq, self.request)
    }
}

/// The hosts' writes in `records` (a chaos host's User-Agent, a write verb, not the
/// replicas' own Leases), in order, with their targets and effects.
pub fn host_writes(records: &[RequestRecord]) -> Vec<HostWrite> {
    let own_lease = |r: &RequestRecord| {
        r.resource == "leases" && r.namespace.as_deref() == Some(LEASE_NAMESPACE)
    };
    let writes: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| {
            r.user_agent.contains(HOST_AGENT)
                && super::WRITES.contains(&r.verb.as_str())
                && !own_lease(r)
        })
        .collect();
    // Generated names (a create's `generateName`) differ from run to run: a write to one is
    // counted against its prefix.
    let prefixes: BTreeSet<String> = writes
        .iter()
        .filter_map(|r| r.body.as_ref()?["metadata"]["generateName"].as_str())
        .map(str::to_string)
        .collect();
    writes
        .into_iter()
        .map(|r| {
            let faulted = r.fault.is_some();
            let ok = (200..300).contains(&r.status);
            let effect = match (r.changed, ok, faulted) {
                (Some(true), _, _) => Effect::Change,
                (_, _, true) => Effect::Faulted,
                (_, true, _) => Effect::NoOp,
                (_, false, _) => Effect::Refused,
            };
            HostWrite {
                seq: r.seq,
                at: r.time.parse().unwrap_or(Timestamp::UNIX_EPOCH),
                target: target(r, &prefixes),
                request: format!("{} {} {}", r.verb, r.path, r.status),
                effect,
                faulted,
                conflict: effect == Effect::Refused
                    && r.status == 409
                    && matches!(r.verb.as_str(), "update" | "patch"),
            }
        })
        .collect()
}

/// The object a write targets: `resource[/sub] namespace/name`.
fn target(r: &RequestRecord, prefixes: &BTreeSet<String>) -> String {
    let resource = match &r.subresource {
        Some(sub) => format!("{}/{sub}", r.resource),
        None => r.resource.clone(),
    };
    let meta = r.body.as_ref().map(|b| &b["metadata"]);
    let name = match (&r.name, meta) {
        (Some(name), _) => name.clone(),
        (None, Some(meta)) => match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(name), _) if !name.is_empty() => name.to_string(),
            (_, Some(prefix)) => format!("{prefix}*"),
            _ => "?".to_string(),
        },
        (None, None) => "?".to_string(),
    };
    // The sim's generated names are the prefix and five characters.
    let name = match prefixes
        .iter()
        .find(|p| name.len() == p.len() + 5 && name.starts_with(p.as_str()))
    {
        Some(prefix) => format!("{prefix}*"),
        None => name,
    };
    let ns = r.namespace.as_deref().unwrap_or_default();
    format!("{resource} {ns}/{name}")
}

/// The changes each object needed: the fault-free run's changes per target.
pub fn needed(writes: &[HostWrite]) -> BTreeMap<String, u64> {
    let mut needed = BTreeMap::new();
    for w in writes.iter().filter(|w| w.effect == Effect::Change) {
        *needed.entry(w.target.clone()).or_default() += 1;
    }
    needed
}

/// Something a schedule did that leaves a host with a stale view for a while.
#[derive(Debug, Clone, PartialEq)]
pub struct Disturbance {
    /// When it began.
    pub from: Timestamp,
    /// Until when it may explain writes: its end plus the time a host takes to see the
    /// world again and reconcile what it missed.
    pub until: Timestamp,
    /// Its cause's name in the report (`a host restart`, `stallWatch on pods`).
    pub what: String,
}

/// The faults on the hosts' reads in `records` (watches, lists, gets), each a disturbance
/// from its request on, for [`HORIZON`] or, a stalled watch, `stall`.
pub fn read_faults(records: &[RequestRecord], stall: SignedDuration) -> Vec<Disturbance> {
    records
        .iter()
        .filter(|r| r.user_agent.contains(HOST_AGENT) && !super::WRITES.contains(&r.verb.as_str()))
        .filter_map(|r| {
            let fault = r.fault.as_deref()?;
            let at: Timestamp = r.time.parse().ok()?;
            let name = fault_name(fault);
            let horizon = match name {
                "stallWatch" => stall,
                _ => HORIZON,
            };
            Some(Disturbance {
                from: at,
                until: at + horizon,
                what: format!("{name} on a {} of {}", r.verb, r.resource),
            })
        })
        .collect()
}

/// The kind of an injected fault as the request log says it (`rule 0: {"stallWatch":…}`:
/// `stallWatch`).
fn fault_name(said: &str) -> &str {
    let fault = said.split_once(": ").map_or(said, |(_, f)| f);
    fault
        .trim_start_matches(['{', '"'])
        .split('"')
        .next()
        .unwrap_or(fault)
}

/// Why a write beyond the needed ones was sent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// An injected fault answered it.
    Fault,
    /// It followed a faulted write to the same object.
    RetryAfterFault,
    /// The server refused it with 409 Conflict: another writer (the workload, the sim's
    /// status controller) changed the object since the host read it.
    Conflict,
    /// It followed a write to the same object the server refused (a stale view).
    RetryAfterRefusal,
    /// The host's view was stale: the disturbance named.
    StaleView(String),
}

impl Cause {
    /// The cause without the fault's resource (`stale view (stallWatch)`), for totals.
    pub fn kind(&self) -> String {
        match self {
            Cause::StaleView(what) => {
                let kind = what.split(" on a ").next().unwrap_or(what);
                format!("stale view ({kind})")
            }
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Fault => write!(f, "answered by a fault"),
            Cause::RetryAfterFault => write!(f, "retry after a faulted write"),
            Cause::Conflict => write!(f, "conflict with another writer (409)"),
            Cause::RetryAfterRefusal => write!(f, "retry after a refused write"),
            Cause::StaleView(what) => write!(f, "stale view ({what})"),
        }
    }
}

/// A run's writes counted against the needed changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteBound {
    /// Every host write.
    pub writes: u64,
    /// Writes that changed their object.
    pub changes: u64,
    /// Changes beyond the needed ones (per object).
    pub extra_changes: u64,
    /// Writes answered 2xx that changed nothing.
    pub no_ops: u64,
    /// Writes answered by an injected fault.
    pub faulted: u64,
    /// Writes the server refused.
    pub refused: u64,
    /// The writes beyond the needed ones, by cause.
    pub causes: BTreeMap<Cause, u64>,
    /// Writes beyond the needed ones nothing in the schedule explains, one sentence per
    /// object naming its counts and writes.
    pub violations: Vec<String>,
}

impl fmt::Display for WriteBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} writes = {} changes ({} beyond the needed) + {} no-ops + {} faulted + {} refused",
            self.writes, self.changes, self.extra_changes, self.no_ops, self.faulted, self.refused
        )?;
        if !self.causes.is_empty() {
            let causes: Vec<String> = self
                .causes
                .iter()
                .map(|(c, n)| format!("{n} {c}"))
                .collect();
            write!(f, "; beyond the needed: {}", causes.join(", "))?;
        }
        Ok(())
    }
}

/// Counts `writes` against `needed` (`None`: this is the fault-free run, whose every write
/// must be a change or a conflict) and explains each one beyond it by the fault that answered
/// it, a conflict with another writer, the faulted or refused write to the same object
/// before it, or the `disturbances` it came during.
pub fn check(
    writes: &[HostWrite],
    needed: Option<&BTreeMap<String, u64>>,
    disturbances: &[Disturbance],
) -> WriteBound {
    let mut bound = WriteBound::default();
    tracing::debug!(?disturbances, "chaos: what disturbed the hosts");
    let mut by_target: BTreeMap<&str, Vec<&HostWrite>> = BTreeMap::new();
    for w in writes {
        by_target.entry(&w.target).or_default().push(w);
        bound.writes += 1;
        match w.effect {
            Effect::Change => bound.changes += 1,
            Effect::NoOp => bound.no_ops += 1,
            Effect::Faulted => bound.faulted += 1,
            Effect::Refused => bound.refused += 1,
        }
    }
    let stale = |w: &HostWrite| {
        disturbances
            .iter()
            .filter(|d| d.from <= w.at && w.at <= d.until)
            .max_by_key(|d| d.until)
            .map(|d| Cause::StaleView(d.what.clone()))
    };
    for (target, ws) in by_target {
        let changes = ws.iter().filter(|w| w.effect == Effect::Change).count() as u64;
        let extra_changes = match needed {
            None => 0,
            Some(needed) => changes.saturating_sub(needed.get(target).copied().unwrap_or(0)),
        };
        bound.extra_changes += extra_changes;
        // Each write's cause, if it has one: the fault that answered it, the faulted or
        // refused write to the object before it, or a stale view.
        let causes: Vec<Option<Cause>> = ws
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if w.faulted {
                    return Some(Cause::Fault);
                }
                let previous = i.checked_sub(1).map(|p| ws[p]);
                let refused_before = previous.is_some_and(|p| p.effect == Effect::Refused);
                // Optimistic concurrency refuses a write that raced another writer, with or
                // without faults; refused again, the host's view stayed stale, which needs a
                // cause of its own (or a host retrying with a stale view would explain itself).
                if w.conflict && !refused_before {
                    return Some(Cause::Conflict);
                }
                // The fault-free run's writes have no other cause.
                needed?;
                match previous {
                    Some(p) if p.faulted => Some(Cause::RetryAfterFault),
                    Some(_) if refused_before && w.effect != Effect::Refused => {
                        Some(Cause::RetryAfterRefusal)
                    }
                    _ => stale(w),
                }
            })
            .collect();
        let mut unexplained: Vec<&HostWrite> = Vec::new();
        // Writes that are not changes are all beyond the needed ones.
        for (w, cause) in ws.iter().zip(&causes) {
            if w.effect == Effect::Change {
                continue;
            }
            match cause {
                Some(c) => *bound.causes.entry(c.clone()).or_default() += 1,
                None => unexplained.push(w),
            }
        }
        // The extra changes are explained by as many changes with a cause.
        let explained: Vec<&Cause> = ws
            .iter()
            .zip(&causes)
            .filter(|(w, _)| w.effect == Effect::Change)
            .filter_map(|(_, c)| c.as_ref())
            .collect();
        // The later changes count as the extra ones (a retry after the change it repeats).
        for cause in explained.iter().rev().take(extra_changes as usize) {
            *bound.causes.entry((*cause).clone()).or_default() += 1;
        }
        let unexplained_changes = extra_changes.saturating_sub(explained.len() as u64);
        if extra_changes > 0 || ws.iter().any(|w| w.effect != Effect::Change) {
            let detail: Vec<String> = ws
                .iter()
                .zip(&causes)
                .map(|(w, c)| format!("{w} at {}: {c:?}", w.at))
                .collect();
            tracing::debug!(
                target,
                changes,
                extra_changes,
                "chaos: writes beyond the needed: {}",
                detail.join("; ")
            );
        }
        if unexplained_changes > 0 || !unexplained.is_empty() {
            let counts = match needed {
                Some(n) => format!(
                    "{changes} changes where the fault-free run needed {}",
                    n.get(target).copied().unwrap_or(0)
                ),
                None => format!("{changes} changes in the fault-free run"),
            };
            let listed: Vec<String> = ws.iter().map(|w| w.to_string()).collect();
            bound.violations.push(format!(
                "{} unexplained writes to {target}: {counts}, {} other writes without a fault, refusal or stale view to explain them: {}",
                unexplained_changes + unexplained.len() as u64,
                unexplained.len(),
                listed.join(", ")
            ));
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A chaos host's patch of Deployment `crd-demo/web` at `ms` milliseconds, answered
    /// `status`, that `changed` the object or not, answered by `fault` if any.
    fn patch(seq: u64, ms: i64, status: u16, changed: bool, fault: Option<&str>) -> RequestRecord {
        RequestRecord {
            seq,
            time: at(ms).to_string(),
            verb: "patch".into(),
            path: "/apis/apps/v1/namespaces/crd-demo/deployments/web".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: Some("crd-demo".into()),
            name: Some("web".into()),
            status,
            user_agent: format!("kubeplug/chaos ({HOST_AGENT}-0)"),
            fault: fault.map(str::to_string),
            changed: Some(changed),
            body: Some(json!({"spec": {"replicas": 2}})),
            ..RequestRecord::default()
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    /// The fault-free run changed `crd-demo/web` once.
    fn needed_once() -> BTreeMap<String, u64> {
        let baseline = host_writes(&[patch(1, 0, 200, true, None)]);
        let bound = check(&baseline, None, &[]);
        assert_eq!(bound.violations, Vec::<String>::new());
        needed(&baseline)
    }

    #[test]
    fn a_doubled_patch_without_a_fault_is_a_violation_naming_the_object_and_counts() {
        let writes = host_writes(&[patch(1, 0, 200, true, None), patch(2, 100, 200, true, None)]);
        let bound = check(&writes, Some(&needed_once()), &[]);
        assert_eq!(
            (bound.writes, bound.changes, bound.extra_changes),
            (2, 2, 1)
        );
        assert_eq!(bound.violations.len(), 1, "{bound:?}");
        let v = &bound.violations[0];
        assert!(
            v.contains("deployments crd-demo/web: 2 changes where the fault-free run needed 1"),
            "{v}"
        );
        assert!(
            v.contains("#2 patch /apis/apps/v1/namespaces/crd-demo/deployments/web 200 (a change)"),
            "{v}"
        );
    }

    #[test]
    fn a_doubled_patch_after_a_fault_on_the_first_is_explained() {
        // The first one changed the object, but a fault cut its answer: the host retried.
        let writes = host_writes(&[
            patch(
                1,
                0,
                200,
                true,
                Some("rule 0: {\"reset\":{\"afterEvents\":0}}"),
            ),
            patch(2, 100, 200, true, None),
        ]);
        let bound = check(&writes, Some(&needed_once()), &[]);
        assert_eq!(bound.violations, Vec::<String>::new());
        assert_eq!(bound.causes, [(Cause::RetryAfterFault, 1)].into());
        // An error answered the first: it changed nothing, and is the write beyond.
        let writes = host_writes(&[
            patch(
                1,
                0,
                503,
                false,
                Some("rule 0: {\"error\":{\"status\":503}}"),
            ),
            patch(2, 100, 200, true, None),
        ]);
        let bound = check(&writes, Some(&needed_once()), &[]);
        assert_eq!(bound.violations, Vec::<String>::new());
        assert_eq!((bound.changes, bound.faulted), (1, 1));
        assert_eq!(bound.causes, [(Cause::Fault, 1)].into());
        assert_eq!(
            bound.to_string(),
            "2 writes = 1 changes (0 beyond the needed) + 0 no-ops + 1 faulted + 0 refused; beyond the needed: 1 answered by a fault"
        );
    }

    #[test]
    fn a_no_op_patch_in_the_fault_free_run_is_a_violation() {
        let writes = host_writes(&[
            patch(1, 0, 200, true, None),
            patch(2, 100, 200, false, None),
        ]);
        let bound = check(&writes, None, &[]);
        assert_eq!(bound.no_ops, 1);
        assert_eq!(bound.violations.len(), 1, "{bound:?}");
        assert!(
            bound.violations[0].contains(
                "#2 patch /apis/apps/v1/namespaces/crd-demo/deployments/web 200 (a no-op)"
            ),
            "{bound:?}"
        );
    }

    #[test]
    fn a_no_op_is_explained_while_a_disturbance_lasts_and_not_after() {
        let restart = Disturbance {
            from: at(50),
            until: at(1000),
            what: "a host restart".into(),
        };
        let during = host_writes(&[
            patch(1, 0, 200, true, None),
            patch(2, 900, 200, false, None),
        ]);
        let bound = check(
            &during,
            Some(&needed_once()),
            std::slice::from_ref(&restart),
        );
        assert_eq!(bound.violations, Vec::<String>::new());
        assert_eq!(
            bound.causes,
            [(Cause::StaleView("a host restart".into()), 1)].into()
        );
        let after = host_writes(&[
            patch(1, 0, 200, true, None),
            patch(2, 1100, 200, false, None),
        ]);
        assert_eq!(
            check(&after, Some(&needed_once()), &[restart])
                .violations
                .len(),
            1
        );
    }

    #[test]
    fn a_conflict_is_explained_once_and_other_refusals_need_a_stale_view() {
        // A 409 on a patch: another writer changed the object since the host read it.
        let conflict = [
            patch(1, 0, 409, false, None),
            patch(2, 100, 200, true, None),
        ];
        let bound = check(&host_writes(&conflict), Some(&needed_once()), &[]);
        assert_eq!(bound.violations, Vec::<String>::new());
        assert_eq!(bound.causes, [(Cause::Conflict, 1)].into());
        assert_eq!(
            check(&host_writes(&conflict), None, &[]).violations,
            Vec::<String>::new()
        );
        // Refused again and again, the host's view stayed stale: that needs a disturbance.
        let again: Vec<RequestRecord> = (0..3)
            .map(|i| patch(i, 6000 + i as i64, 409, false, None))
            .collect();
        let bound = check(&host_writes(&again), Some(&needed_once()), &[]);
        assert_eq!(bound.violations.len(), 1, "{bound:?}");
        assert!(
            bound.violations[0].starts_with("2 unexplained writes"),
            "{bound:?}"
        );
        // A create refused (already exists) is a stale view, explained by a watch fault.
        let exists = RequestRecord {
            verb: "create".into(),
            ..patch(1, 0, 409, false, None)
        };
        let bound = check(
            &host_writes(std::slice::from_ref(&exists)),
            Some(&needed_once()),
            &[],
        );
        assert_eq!(bound.violations.len(), 1, "{bound:?}");
        let watch = RequestRecord {
            verb: "watch".into(),
            fault: Some("rule 1: {\"goneWatch\":{}}".into()),
            changed: None,
            ..patch(0, -10, 410, false, None)
        };
        let stale = read_faults(&[watch], SignedDuration::from_secs(9));
        assert_eq!(stale[0].what, "goneWatch on a watch of deployments");
        let bound = check(&host_writes(&[exists]), Some(&needed_once()), &stale);
        assert_eq!(bound.violations, Vec::<String>::new());
        assert_eq!(
            bound.causes,
            [(
                Cause::StaleView("goneWatch on a watch of deployments".into()),
                1
            )]
            .into()
        );
    }

    #[test]
    fn generated_names_are_counted_by_prefix_and_leases_and_other_clients_are_not_counted() {
        let host = format!("kubeplug/chaos ({HOST_AGENT}-1)");
        let create = RequestRecord {
            verb: "create".into(),
            resource: "events".into(),
            namespace: Some("demo".into()),
            status: 201,
            changed: Some(true),
            user_agent: host.clone(),
            body: Some(json!({"metadata": {"generateName": "web-0."}})),
            ..RequestRecord::default()
        };
        let delete = RequestRecord {
            verb: "delete".into(),
            name: Some("web-0.bcdfg".into()),
            status: 200,
            ..create.clone()
        };
        let lease = RequestRecord {
            verb: "update".into(),
            resource: "leases".into(),
            namespace: Some(LEASE_NAMESPACE.into()),
            name: Some("kubeplug-chaos-host-1".into()),
            ..create.clone()
        };
        let workload = RequestRecord {
            user_agent: "kubeplug-sim/client".into(),
            ..create.clone()
        };
        let writes = host_writes(&[create, delete, lease, workload]);
        let targets: Vec<&str> = writes.iter().map(|w| w.target.as_str()).collect();
        assert_eq!(targets, ["events demo/web-0.*", "events demo/web-0.*"]);
        assert_eq!(
            needed(&writes),
            [("events demo/web-0.*".to_string(), 2)].into()
        );
    }
}
