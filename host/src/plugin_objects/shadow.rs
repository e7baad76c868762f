//! Shadow rollout: a Plugin's new revision first runs in dry-run beside the live one, on the
//! same keys, and the two revisions' decisions are compared per key before the new one may
//! write. A key's verdict compares each side's latest decision for it (what it would patch,
//! create, delete or report), so it follows the object as both sides see it change.
//!
//! The new revision is promoted once enough keys were compared (`reconciles`) or enough time
//! passed (`duration`) with at most `maxDiffering` keys differing, or at once when the tenant
//! sets `promote: true`; otherwise the live revision keeps running and status says why.

use super::spec::{RolloutSpec, parse_duration};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Keys compared before promotion when the shadow names neither a count nor a duration.
pub const DEFAULT_RECONCILES: u64 = 10;
/// Differing keys kept as examples in status.
pub const MAX_EXAMPLES: usize = 3;
/// Decision lines kept per side in one example.
const MAX_EXAMPLE_LINES: usize = 4;

/// One side's latest decision on a key: a digest of all its lines (in any order), and the
/// first few lines for examples. A call may decide up to its action limit; only this much
/// of it is kept per key.
#[derive(Debug, Clone, PartialEq)]
struct Decided {
    digest: [u8; 32],
    lines: Vec<String>,
}

impl Decided {
    fn of(mut lines: Vec<String>) -> Decided {
        use sha2::{Digest, Sha256};
        lines.sort();
        let mut hasher = Sha256::new();
        for line in &lines {
            hasher.update(line.as_bytes());
            hasher.update([0]);
        }
        lines.truncate(MAX_EXAMPLE_LINES);
        Decided {
            digest: hasher.finalize().into(),
            lines,
        }
    }
}

/// The comparison of one candidate revision with the live one.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    live: HashMap<String, Decided>,
    shadow: HashMap<String, Decided>,
    /// Per key both sides decided on: whether they agree.
    verdicts: BTreeMap<String, bool>,
}

/// What to do with a candidate now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep comparing.
    Continue,
    /// Make it the live revision.
    Promote(String),
    /// Its target is reached but it differs too often: the live revision stays.
    Hold(String),
}

impl Comparison {
    /// Records the live revision's latest decision on `key`.
    pub fn live(&mut self, key: &str, decided: Vec<String>) {
        self.live.insert(key.to_string(), Decided::of(decided));
        self.judge(key);
    }

    /// Records the candidate's latest decision on `key`.
    pub fn shadow(&mut self, key: &str, decided: Vec<String>) {
        self.shadow.insert(key.to_string(), Decided::of(decided));
        self.judge(key);
    }

    fn judge(&mut self, key: &str) {
        if let (Some(l), Some(s)) = (self.live.get(key), self.shadow.get(key)) {
            self.verdicts.insert(key.to_string(), l.digest == s.digest);
        }
    }

    /// Keys both sides decided on.
    pub fn compared(&self) -> u64 {
        self.verdicts.len() as u64
    }

    /// Keys on which they decide differently.
    pub fn differing(&self) -> u64 {
        self.verdicts.values().filter(|v| !**v).count() as u64
    }

    /// What to do, `elapsed` after the shadow started.
    pub fn verdict(&self, rollout: &RolloutSpec, elapsed: Duration) -> Verdict {
        if rollout.promote {
            return Verdict::Promote("spec.rollout.promote is set".into());
        }
        let shadow = rollout.shadow.clone().unwrap_or_default();
        let duration = shadow
            .duration
            .as_deref()
            .and_then(|d| parse_duration(d).ok());
        let reconciles = match (shadow.reconciles, duration) {
            (None, None) => Some(DEFAULT_RECONCILES),
            (n, _) => n,
        };
        let by_count = reconciles.is_some_and(|n| self.compared() >= n);
        let by_time = duration.is_some_and(|d| elapsed >= d);
        if !(by_count || by_time) {
            return Verdict::Continue;
        }
        let max = rollout.max_differing.unwrap_or(0);
        let (compared, differing) = (self.compared(), self.differing());
        if differing <= max {
            Verdict::Promote(format!(
                "{compared} keys compared, {differing} differing (maxDiffering {max})"
            ))
        } else {
            Verdict::Hold(format!(
                "{compared} keys compared, {differing} differing, more than maxDiffering {max}: the live revision keeps running; set spec.rollout.promote: true to promote it anyway, or change the spec"
            ))
        }
    }

    /// `status.rollout`: the counts and a few differing keys with both sides' decisions.
    pub fn report(&self, phase: &str, candidate: &str, generation: i64, message: &str) -> Value {
        let examples: Vec<Value> = self
            .verdicts
            .iter()
            .filter(|(_, agree)| !**agree)
            .take(MAX_EXAMPLES)
            .map(|(key, _)| {
                let side = |m: &HashMap<String, Decided>| {
                    m.get(key).map(|d| d.lines.clone()).unwrap_or_default()
                };
                json!({"key": key, "live": side(&self.live), "shadow": side(&self.shadow)})
            })
            .collect();
        json!({
            "phase": phase,
            "candidate": format!("sha256:{candidate}"),
            "generation": generation,
            "keysCompared": self.compared(),
            "agreeing": self.compared() - self.differing(),
            "differing": self.differing(),
            "examples": examples,
            "message": message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::spec::ShadowSpec;
    use super::*;

    fn rollout(reconciles: Option<u64>, max: Option<u64>) -> RolloutSpec {
        RolloutSpec {
            shadow: Some(ShadowSpec {
                reconciles,
                duration: None,
            }),
            max_differing: max,
            promote: false,
        }
    }

    #[test]
    fn keys_agree_on_the_same_decisions_in_any_order() {
        let mut c = Comparison::default();
        c.live("a", vec!["patch x 1".into(), "event x".into()]);
        assert_eq!(c.compared(), 0);
        c.shadow("a", vec!["event x".into(), "patch x 1".into()]);
        c.shadow("b", vec![]);
        c.live("b", vec!["patch b 1".into()]);
        assert_eq!((c.compared(), c.differing()), (2, 1));
        // The latest decisions count: b converges.
        c.live("b", vec![]);
        assert_eq!((c.compared(), c.differing()), (2, 0));
    }

    #[test]
    fn a_huge_decision_is_kept_as_a_digest_and_a_few_lines() {
        let mut c = Comparison::default();
        let many: Vec<String> = (0..10_000).map(|i| format!("patch x {i}")).collect();
        let mut reversed = many.clone();
        reversed.reverse();
        c.live("a", many);
        c.shadow("a", reversed);
        assert_eq!((c.compared(), c.differing()), (1, 0));
        assert!(c.live["a"].lines.len() <= MAX_EXAMPLE_LINES);
        c.shadow("a", vec!["patch x 0".into()]);
        assert_eq!(c.differing(), 1);
    }

    #[test]
    fn promote_hold_or_continue() {
        let mut c = Comparison::default();
        let d = Duration::ZERO;
        c.live("a", vec![]);
        c.shadow("a", vec![]);
        assert_eq!(c.verdict(&rollout(Some(2), None), d), Verdict::Continue);
        c.live("b", vec![]);
        c.shadow("b", vec!["patch b 1".into()]);
        assert!(
            matches!(c.verdict(&rollout(Some(2), None), d), Verdict::Hold(m) if m.contains("1 differing"))
        );
        assert!(matches!(
            c.verdict(&rollout(Some(2), Some(1)), d),
            Verdict::Promote(_)
        ));
        let mut forced = rollout(Some(100), None);
        forced.promote = true;
        assert!(matches!(c.verdict(&forced, d), Verdict::Promote(m) if m.contains("promote")));
        let timed = RolloutSpec {
            shadow: Some(ShadowSpec {
                reconciles: None,
                duration: Some("1s".into()),
            }),
            max_differing: Some(5),
            promote: false,
        };
        assert_eq!(
            c.verdict(&timed, Duration::from_millis(10)),
            Verdict::Continue
        );
        assert!(matches!(
            c.verdict(&timed, Duration::from_secs(2)),
            Verdict::Promote(_)
        ));
        let report = c.report("Held", "ab", 2, "m");
        assert_eq!(report["differing"], 1);
        assert_eq!(report["examples"][0]["key"], "b");
        assert_eq!(report["examples"][0]["shadow"][0], "patch b 1");
    }
}
