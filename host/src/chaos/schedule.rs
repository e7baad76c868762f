//! Fault plans: for a seed and a schedule index, the sim's fault schedule active during the
//! workload (a few rules drawn from every fault kind, at moderate rates, on the hosts'
//! requests only), the point at which the host is killed and started again, and, in some
//! plans, a second replica (the two sharding the keys) frozen for a while and resumed.

use super::host_process::LEASE;
use super::rng::Rng;
use kubeplug_sim::{Fault, Match, Rule, Schedule};
use std::time::Duration;

/// The User-Agent substring of every host's requests: the rules match it, so the workload's
/// own writes are never faulted.
pub const HOST_AGENT: &str = "chaos-host";

/// Resources a rule may be narrowed to (empty: any).
const RESOURCES: &[&str] = &["", "deployments", "pods", "foos", "customclusters"];

/// What goes wrong in one schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Active from the workload's start to its end.
    pub schedule: Schedule,
    /// When, after the workload's start, the host is killed.
    pub restart_at: Duration,
    /// How long the host stays down before a new one starts.
    pub restart_pause: Duration,
    /// How many hosts run: 1, or 2 sharded replicas (`kubeplug run --sharding`).
    pub replicas: u64,
    /// With two replicas: the second one frozen (SIGSTOP) for a while, then resumed.
    pub pause: Option<Pause>,
}

/// A replica frozen and resumed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pause {
    /// When, after the workload's start, it is frozen.
    pub at: Duration,
    /// How long it stays frozen: shorter than its Lease in some plans, longer (the other
    /// replica takes its keys over meanwhile) in others.
    pub length: Duration,
}

impl FaultPlan {
    /// The plan of schedule `index` of `seed`, for a workload lasting `window`.
    pub fn generate(seed: u64, index: u64, window: Duration) -> Self {
        let mut rng = Rng::from_parts(&[seed, index, 0x5c4e_d01e]);
        let rules = (0..rng.range(1, 3)).map(|_| rule(&mut rng)).collect();
        let window_ms = window.as_millis() as u64;
        let mut plan = FaultPlan {
            schedule: Schedule {
                seed: rng.next_u64() >> 1,
                rules,
            },
            restart_at: Duration::from_millis(
                rng.range(window_ms * 15 / 100, window_ms * 85 / 100),
            ),
            restart_pause: Duration::from_millis(rng.range(0, 500)),
            replicas: 1,
            pause: None,
        };
        // Drawn after the rest, so the faults and restart of a plan do not depend on it.
        if rng.range(0, 1) == 1 {
            let lease_ms = LEASE.as_millis() as u64;
            let length = match rng.range(0, 1) {
                0 => rng.range(300, lease_ms * 3 / 4),
                _ => rng.range(lease_ms + 1000, lease_ms + 3000),
            };
            plan.replicas = 2;
            plan.pause = Some(Pause {
                at: Duration::from_millis(rng.range(window_ms / 10, window_ms * 6 / 10)),
                length: Duration::from_millis(length),
            });
        }
        plan
    }

    /// The fault names of the rules and the pause, for the report (`error(503), stallWatch;
    /// 2 replicas, one paused 4.2 s at 0.9 s`).
    pub fn describe(&self) -> String {
        let faults = self.faults();
        match self.pause {
            Some(p) => format!(
                "{faults}; {} replicas, one paused {:.1} s at {:.1} s",
                self.replicas,
                p.length.as_secs_f64(),
                p.at.as_secs_f64()
            ),
            None => faults,
        }
    }

    fn faults(&self) -> String {
        self.schedule
            .rules
            .iter()
            .map(|r| {
                let on = r.matcher.resources.first().map_or("", String::as_str);
                match on {
                    "" => r.fault.to_string(),
                    on => format!("{} on {on}", r.fault),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One rule: a fault of any kind with its parameters, on one resource or all: watch faults
/// on 50 to 100 % of the matching watches (1 to 5 faults), others on 10 to 40 % of the
/// matching requests (3 to 20 faults).
fn rule(rng: &mut Rng) -> Rule {
    let fault = match rng.range(0, 11) {
        0 => Fault::CloseWatch {
            after_events: rng.range(0, 5),
        },
        1 => Fault::StallWatch {
            after_events: rng.range(0, 3),
        },
        2 => Fault::GoneWatch {},
        3 => Fault::GoneWatchEvent {},
        4 => Fault::GoneContinue {},
        5 => Fault::DelayEvents {
            ms: rng.range(50, 500),
        },
        6 => Fault::Error {
            status: *rng.pick(&[429, 500, 502, 503, 504]),
            retry_after_seconds: None,
        },
        7 => Fault::Timeout {
            ms: rng.range(100, 1500),
        },
        8 => Fault::Reset {
            after_events: rng.range(0, 3),
        },
        9 => Fault::Latency {
            ms: rng.range(20, 300),
        },
        10 => Fault::Conflict {},
        _ => Fault::StaleList {
            revisions: rng.range(1, 20),
        },
    };
    let resource = *rng.pick(RESOURCES);
    // A host opens few watches (one per kind, again after each end): a watch fault fires on
    // most of them, while other faults hit a share of the many lists and writes.
    let watch = fault.verbs() == ["watch"];
    let (ratio, after, max_faults) = match watch {
        true => (0.5 + rng.unit() * 0.5, 0, rng.range(1, 5)),
        false => (0.1 + rng.unit() * 0.3, rng.range(0, 2), rng.range(3, 20)),
    };
    Rule {
        matcher: Match {
            resources: match resource {
                "" => Vec::new(),
                r => vec![r.to_string()],
            },
            user_agents: vec![HOST_AGENT.to_string()],
            ..Match::default()
        },
        ratio: Some(ratio),
        every_nth: None,
        after,
        window: None,
        max_faults: Some(max_faults),
        fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_the_same_for_the_same_seed_and_index_and_valid() {
        let window = Duration::from_secs(3);
        let a = FaultPlan::generate(1, 4, window);
        assert_eq!(a, FaultPlan::generate(1, 4, window));
        assert_ne!(a, FaultPlan::generate(1, 5, window));
        assert!(a.restart_at >= Duration::from_millis(450) && a.restart_at <= window);
        let mut kinds = std::collections::BTreeSet::new();
        for index in 0..200 {
            let plan = FaultPlan::generate(9, index, window);
            assert!((1..=3).contains(&plan.schedule.rules.len()));
            let json = serde_json::to_value(&plan.schedule).unwrap();
            assert_eq!(Schedule::from_value(json).unwrap(), plan.schedule);
            kinds.extend(plan.schedule.rules.iter().map(|r| r.fault.name()));
        }
        assert_eq!(kinds.len(), 12, "every fault kind is drawn: {kinds:?}");
        let pauses: Vec<Pause> = (0..200)
            .filter_map(|i| FaultPlan::generate(9, i, window).pause)
            .collect();
        assert!((60..140).contains(&pauses.len()), "{}", pauses.len());
        assert!(pauses.iter().any(|p| p.length < LEASE));
        assert!(pauses.iter().any(|p| p.length > LEASE));
        assert!(pauses.iter().all(|p| p.at < window));
    }
}
