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
            let extra = outcome.writes.total as i64 - self.baseline.writes.total as i64;
            writeln!(f, "{outcome} ({extra:+} writes against the fault-free run)")?;
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
        assert!(text.contains("violation: seed 7, schedule 1 (kubeplug chaos --seed 7 --only 1 --plugin-set ports): Customcluster crd-demo/cc-0 has 5 Pods"), "{text}");
        assert_eq!(
            text.lines().last(),
            Some("chaos: 2 schedules, 1 violations, 7 faults injected, 2 restarts")
        );
    }
}
