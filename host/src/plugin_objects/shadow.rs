//! Shadow rollout: a Plugin's new revision first runs in dry-run beside the live one, on the
//! same keys, and the two revisions' decisions are compared per key before the new one may
//! write. A key's verdict compares each side's latest decision for it (what it would patch,
//! create, delete or report), so it follows the object as both sides see it change.
//!
//! The new revision is promoted once enough keys were compared (`reconciles`) or enough time
//! passed (`duration`) with at most `maxDiffering` keys differing, or at once when the tenant
//! sets `promote: true`; otherwise the live revision keeps running and status says why.

use super::spec::{RolloutSpec, parse_duration};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Keys compared before promotion when the shadow names neither a count nor a duration.
pub const DEFAULT_RECONCILES: u64 = 10;
/// Differing keys kept as examples in status.
pub const MAX_EXAMPLES: usize = 3;
/// Decision lines kept per side in one example.
const MAX_EXAMPLE_LINES: usize = 4;
/// Bytes kept of one decision line in an example (the digest covers the whole line).
const MAX_EXAMPLE_LINE_BYTES: usize = 512;
/// Bytes of a key shown in an example (an object key is at most 317).
const MAX_KEY_BYTES: usize = 512;
/// Bytes of a report's message.
const MAX_MESSAGE_BYTES: usize = 2048;

/// `status.rollout`, as the host writes it and keeps it in its own records
/// ([`super::records`]): typed, so a report read back from a record is checked field by
/// field before it is shown again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutReport {
    /// `Shadowing`, `Promoted` or `Held`.
    pub phase: String,
    /// `sha256:<hex>` of the candidate module.
    pub candidate: String,
    /// The Plugin generation the candidate came from.
    pub generation: i64,
    /// Keys both revisions decided on.
    pub keys_compared: u64,
    /// Keys on which they agree.
    pub agreeing: u64,
    /// Keys on which they differ.
    pub differing: u64,
    /// A few differing keys with both sides' decisions.
    pub examples: Vec<Example>,
    /// One line for humans.
    pub message: String,
}

/// One differing key of a rollout report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// The key (`namespace/name`).
    pub key: String,
    /// The live revision's first decision lines.
    pub live: Vec<String>,
    /// The candidate's first decision lines.
    pub shadow: Vec<String>,
}

/// The phases a rollout report may be in.
pub const PHASES: [&str; 3] = ["Shadowing", "Promoted", "Held"];

impl RolloutReport {
    /// Checks a report read from anywhere but this process: known phase, a digest, counts
    /// that add up, bounded examples. The error names the field, never its value.
    pub fn check(&self) -> Result<(), &'static str> {
        if !PHASES.contains(&self.phase.as_str()) {
            return Err("rollout.phase");
        }
        if !super::records::is_digest(&self.candidate) {
            return Err("rollout.candidate");
        }
        if self.generation < 0 {
            return Err("rollout.generation");
        }
        if self.agreeing.checked_add(self.differing) != Some(self.keys_compared) {
            return Err("rollout.keysCompared");
        }
        if self.examples.len() > MAX_EXAMPLES {
            return Err("rollout.examples");
        }
        for e in &self.examples {
            if e.key.len() > MAX_KEY_BYTES {
                return Err("rollout.examples.key");
            }
            for lines in [&e.live, &e.shadow] {
                if lines.len() > MAX_EXAMPLE_LINES
                    || lines.iter().any(|l| l.len() > MAX_EXAMPLE_LINE_BYTES)
                {
                    return Err("rollout.examples.lines");
                }
            }
        }
        if self.message.len() > MAX_MESSAGE_BYTES {
            return Err("rollout.message");
        }
        Ok(())
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

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
        for line in &mut lines {
            if line.len() > MAX_EXAMPLE_LINE_BYTES {
                *line = cut(line, MAX_EXAMPLE_LINE_BYTES);
            }
        }
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
        let examples: Vec<Example> = self
            .verdicts
            .iter()
            .filter(|(_, agree)| !**agree)
            .take(MAX_EXAMPLES)
            .map(|(key, _)| {
                let side = |m: &HashMap<String, Decided>| {
                    m.get(key).map(|d| d.lines.clone()).unwrap_or_default()
                };
                Example {
                    key: cut(key, MAX_KEY_BYTES),
                    live: side(&self.live),
                    shadow: side(&self.shadow),
                }
            })
            .collect();
        let report = RolloutReport {
            phase: phase.to_string(),
            candidate: format!("sha256:{candidate}"),
            generation,
            keys_compared: self.compared(),
            agreeing: self.compared() - self.differing(),
            differing: self.differing(),
            examples,
            message: cut(message, MAX_MESSAGE_BYTES),
        };
        serde_json::to_value(report).unwrap_or(Value::Null)
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
        let report = c.report("Held", &"ab".repeat(32), 2, "m");
        assert_eq!(report["differing"], 1);
        let typed: RolloutReport = serde_json::from_value(report.clone()).unwrap();
        assert_eq!(typed.check(), Ok(()));
        assert_eq!(report["examples"][0]["key"], "b");
        assert_eq!(report["examples"][0]["shadow"][0], "patch b 1");
    }

    #[test]
    fn a_report_read_back_is_checked_field_by_field() {
        let mut c = Comparison::default();
        c.live("a", vec!["x".repeat(10_000)]);
        c.shadow("a", vec![]);
        let report = c.report("Held", &"c".repeat(64), 1, "m");
        let good: RolloutReport = serde_json::from_value(report).unwrap();
        assert_eq!(good.check(), Ok(()));
        assert!(good.examples[0].live[0].len() <= MAX_EXAMPLE_LINE_BYTES);
        let mut bad = good.clone();
        bad.phase = "Promoted after 500 agreeing keys".into();
        assert_eq!(bad.check(), Err("rollout.phase"));
        let mut bad = good.clone();
        bad.agreeing = 500;
        assert_eq!(bad.check(), Err("rollout.keysCompared"));
        let mut bad = good.clone();
        bad.candidate = "sha256:fff".into();
        assert_eq!(bad.check(), Err("rollout.candidate"));
        let extra = serde_json::json!({"phase": "Held", "candidate": good.candidate, "generation": 1,
            "keysCompared": 0, "agreeing": 0, "differing": 0, "examples": [], "message": "",
            "injected": true});
        assert!(serde_json::from_value::<RolloutReport>(extra).is_err());
    }
}
