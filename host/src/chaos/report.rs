//! The report of a chaos run: one outcome per schedule (and the fault-free run), every
//! violation with the seed and schedule that reproduce it, and the summary line.

use super::PluginSet;
use std::collections::BTreeMap;
use std::fmt;

/// Writes the hosts sent (create, update, patch, delete), from the sim's request log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    /// Every write request, answered or not.
    pub total: u64,
    /// By resource (`pods`, `events`, `deployments/status`).
    pub by_resource: BTreeMap<String, u64>,
}

impl fmt::Display for Writes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .by_resource
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        write!(f, "{} ({})", self.total, parts.join(", "))
    }
}

/// What happened in one run.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The schedule's index; `None` for the fault-free run.
    pub index: Option<u64>,
    /// The fault rules (empty for the fault-free run).
    pub plan: String,
    /// The plugins it ran (the fault-free run: the Rust ones).
    pub plugins: PluginSet,
    /// Faults the sim injected.
    pub faults: u64,
    /// Host restarts.
    pub restarts: u64,
    /// Host writes.
    pub writes: Writes,
    /// Host writes counted against the needed changes, those beyond explained.
    pub bound: super::write_bound::WriteBound,
    /// Milliseconds from the end of the workload until the run was quiet and checked.
    pub settle_ms: u64,
    /// Broken invariants.
    pub violations: Vec<String>,
}

/// A broken invariant and how to reproduce it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The seed.
    pub seed: u64,
    /// The schedule index (`None`: the fault-free run).
    pub schedule: Option<u64>,
    /// The plugins that run ran.
    pub plugins: PluginSet,
    /// What was wrong.
    pub what: String,
}

/// The whole run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The fault-free run every schedule is compared with.
    pub baseline: Outcome,
    /// One per schedule, in order.
    pub schedules: Vec<Outcome>,
}

impl Report {
    /// Every violation, the fault-free run's first.
    pub fn violations(&self) -> Vec<Violation> {
        std::iter::once(&self.baseline)
            .chain(&self.schedules)
            .flat_map(|o| {
                o.violations.iter().map(|what| Violation {
                    seed: self.seed,
                    schedule: o.index,
                    plugins: o.plugins,
                    what: what.clone(),
                })
            })
            .collect()
    }

    /// Faults injected over every schedule.
    pub fn faults(&self) -> u64 {
        self.schedules.iter().map(|o| o.faults).sum()
    }

    /// Host restarts over every schedule.
    pub fn restarts(&self) -> u64 {
        self.schedules.iter().map(|o| o.restarts).sum()
    }

    /// The writes beyond the needed changes over every schedule, by cause (a stale view by
    /// its kind of disturbance).
    pub fn write_causes(&self) -> BTreeMap<String, u64> {
        let mut causes = BTreeMap::new();
        for (cause, n) in self.schedules.iter().flat_map(|o| &o.bound.causes) {
            *causes.entry(cause.kind()).or_default() += n;
        }
        causes
    }

    /// `chaos: N schedules, V violations, F faults injected, R restarts`.
    pub fn summary(&self) -> String {
        format!(
            "chaos: {} schedules, {} violations, {} faults injected, {} restarts",
            self.schedules.len(),
            self.violations().len(),
            self.faults(),
            self.restarts()
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.violations.len() {
            0 => "ok".to_string(),
            n => format!("{n} violations"),
        };
        match self.index {
            None => write!(
                f,
                "fault-free run: {} writes, settled in {} ms; {}: {verdict}",
                self.writes, self.settle_ms, self.bound
            ),
            Some(i) => write!(
                f,
                "schedule {i} ({} plugins): {} faults injected [{}], {} restarts, {} writes, settled in {} ms; {}: {verdict}",
                self.plugins,
                self.faults,
                self.plan,
                self.restarts,
                self.writes,
                self.settle_ms,
                self.bound
            ),
        }
    }
}

/// The outcomes, extra writes against the fault-free run, every violation, then the summary
/// line last.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.baseline)?;
        for outcome in &self.schedules {
            writeln!(f, "{outcome}")?;
        }
        let causes = self.write_causes();
        if !causes.is_empty() {
            let causes: Vec<String> = causes.iter().map(|(c, n)| format!("{n} {c}")).collect();
            writeln!(
                f,
                "writes beyond the needed changes, over every schedule: {}",
                causes.join(", ")
            )?;
        }
        for v in self.violations() {
            let run = match v.schedule {
                Some(i) => format!(
                    "schedule {i} (kubeplug chaos --seed {} --only {i} --plugin-set {})",
                    v.seed, v.plugins
                ),
                None => "the fault-free run".to_string(),
            };
            writeln!(f, "violation: seed {}, {run}: {}", v.seed, v.what)?;
        }
        write!(f, "{}", self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::super::write_bound::{Cause, WriteBound};
    use super::*;

    #[test]
    fn the_report_lists_each_violation_with_its_seed_and_ends_with_the_summary() {
        let report = Report {
            seed: 7,
            baseline: Outcome::default(),
            schedules: vec![
                Outcome {
                    index: Some(0),
                    faults: 3,
                    restarts: 1,
                    bound: WriteBound {
                        causes: [
                            (Cause::Fault, 2),
                            (Cause::StaleView("stallWatch on a watch of pods".into()), 1),
                        ]
                        .into(),
                        ..WriteBound::default()
                    },
                    ..Outcome::default()
                },
                Outcome {
                    index: Some(1),
                    faults: 4,
                    restarts: 1,
                    plugins: PluginSet::Ports,
                    violations: vec!["Customcluster crd-demo/cc-0 has 5 Pods".into()],
                    ..Outcome::default()
                },
            ],
        };
        let text = report.to_string();
        assert!(
            text.contains("writes beyond the needed changes, over every schedule: 2 answered by a fault, 1 stale view (stallWatch)"),
            "{text}"
        );
        assert!(text.contains("violation: seed 7, schedule 1 (kubeplug chaos --seed 7 --only 1 --plugin-set ports): Customcluster crd-demo/cc-0 has 5 Pods"), "{text}");
        assert_eq!(
            text.lines().last(),
            Some("chaos: 2 schedules, 1 violations, 7 faults injected, 2 restarts")
        );
    }
}
