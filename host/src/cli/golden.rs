//! Golden tests of a plugin's actions: what `kubeplug eval --expect FILE` and `kubeplug test
//! DIR` compare a call's actions with.
//!
//! An expectation is the document `kubeplug eval --format yaml` prints (or its JSON form), so
//! recording one is saving that output. Only `actions` (and `target`, when present) are
//! compared: `plugin` (its digest changes with every build) and `logs` (what the plugin wrote
//! to its log import and stderr) are shown, not checked. Any other top-level key is refused,
//! so a misspelt `action:` cannot pass as an empty expectation.
//!
//! Order counts only where the contract gives it a meaning. The executor sends a call's writes
//! (patch, create, delete) to the API server in the order returned, so their order is
//! compared; so is the order of its Events and of its log lines, each among themselves. How
//! the three streams interleave is not, and of several requeue-after actions only the shortest
//! counts (the host keeps only that one).

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use std::path::Path;

/// Top-level keys of eval's output that an expectation may hold but that are not compared.
const SHOWN_ONLY: &[&str] = &["plugin", "logs", "droppedLogs"];

/// The action kinds of the contract, as eval prints them (the `action` field).
fn action_kinds() -> impl Iterator<Item = &'static str> {
    crate::contract::ACTION_NAMES.iter().map(|(wire, _)| *wire)
}

/// What a call is expected to return, read from a YAML or JSON file.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    /// The object reconciled, when the file names it.
    target: Option<Value>,
    /// The actions, in the file's order.
    actions: Vec<Value>,
}

impl Expectation {
    /// Reads an expectation file; errors name the file and what in it is wrong.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read expectation {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("expectation {}", path.display()))
    }

    /// Parses an expectation from YAML or JSON text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let doc: Value = serde_saphyr::from_str(text).context("is not valid YAML or JSON")?;
        let Value::Object(mut doc) = doc else {
            bail!(
                "is not a mapping with `actions` (save the output of `kubeplug eval --format yaml`)"
            );
        };
        for key in doc.keys() {
            if key != "target" && key != "actions" && !SHOWN_ONLY.contains(&key.as_str()) {
                bail!(
                    "has an unknown key `{key}` (known: target, actions, {})",
                    SHOWN_ONLY.join(", ")
                );
            }
        }
        let actions = match doc.remove("actions") {
            Some(Value::Array(actions)) => actions,
            Some(Value::Null) => Vec::new(),
            Some(other) => bail!("`actions` is not a list but {}", type_name(&other)),
            None => bail!("has no `actions` list (write `actions: []` when none are expected)"),
        };
        for (i, action) in actions.iter().enumerate() {
            let kind = action.get("action").and_then(Value::as_str);
            match kind {
                Some(kind) if action_kinds().any(|k| k == kind) => {}
                Some(kind) => bail!(
                    "actions[{i}] has an unknown action `{kind}` (known: {})",
                    action_kinds().collect::<Vec<_>>().join(", ")
                ),
                None => bail!("actions[{i}] has no `action` field naming its kind"),
            }
        }
        Ok(Expectation {
            target: doc.remove("target"),
            actions,
        })
    }

    /// Compares eval's output document (`{target, actions, ...}`) with this expectation:
    /// `Err` holds a readable diff (`-` expected, `+` actual) of what differs.
    pub fn check(&self, output: &Value) -> Result<(), String> {
        let actual_actions = output["actions"].as_array().cloned().unwrap_or_default();
        let target = self.target.as_ref().map(|_| output["target"].clone());
        let expected = comparable(self.target.clone(), &self.actions);
        let actual = comparable(target, &actual_actions);
        if expected == actual {
            return Ok(());
        }
        let (e, a) = (yaml(&expected), yaml(&actual));
        Err(format!(
            "--- expected\n+++ actual\n(writes, events and logs each in order; of requeues, the shortest)\n{}",
            line_diff(&e, &a)
        ))
    }

    /// The number of actions expected.
    pub fn action_count(&self) -> usize {
        self.actions.len()
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The form compared: writes, events and logs each in order, the shortest requeue.
fn comparable(target: Option<Value>, actions: &[Value]) -> Value {
    let mut out = Map::new();
    let of = |kinds: &[&str]| -> Vec<Value> {
        actions
            .iter()
            .filter(|a| kinds.contains(&a["action"].as_str().unwrap_or("")))
            .cloned()
            .collect()
    };
    for (name, kinds) in [
        ("writes", &["patch", "create", "delete"][..]),
        ("events", &["event"][..]),
        ("logs", &["log"][..]),
    ] {
        let stream = of(kinds);
        if !stream.is_empty() {
            out.insert(name.into(), Value::Array(stream));
        }
    }
    let shortest = of(&["requeueAfter"])
        .into_iter()
        .min_by_key(|a| a["afterMs"].as_u64().unwrap_or(u64::MAX));
    if let Some(requeue) = shortest {
        out.insert("requeueAfter".into(), requeue);
    }
    if out.is_empty() {
        out.insert("actions".into(), json!([]));
    }
    if let Some(target) = target {
        out.insert("target".into(), target);
    }
    Value::Object(out)
}

/// YAML text of a value, as `kubeplug eval --format yaml` prints it.
pub fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|e| format!("<not printable as YAML: {e}>\n"))
}

/// A line diff of two texts: unchanged lines with two spaces, removed with `- `, added with
/// `+ `; runs of more than six unchanged lines are shortened to three on each side.
pub fn line_diff(expected: &str, actual: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // Past this size a quadratic table is not worth it: show both sides whole.
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        return format!("expected:\n{expected}\nactual:\n{actual}");
    }
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', a[i]));
            i += 1;
        } else {
            lines.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..lines.len()).filter(|&k| lines[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= 3);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in lines.iter().enumerate() {
        if *mark == ' ' && !near(k) {
            if !skipped {
                out.push_str("  ...\n");
                skipped = true;
            }
            continue;
        }
        skipped = false;
        out.push(*mark);
        out.push(' ');
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(name: &str, image: &str) -> Value {
        json!({"action": "patch", "patchType": "strategic",
            "target": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": name},
            "body": {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}})
    }

    fn log(message: &str) -> Value {
        json!({"action": "log", "level": "info", "message": message})
    }

    fn event(reason: &str) -> Value {
        json!({"action": "event", "reason": reason, "eventType": "Normal", "message": "m",
            "eventAction": "Reconcile", "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "p"}})
    }

    fn output(actions: Vec<Value>) -> Value {
        json!({"plugin": {"name": "p", "digest": "sha256:1"},
            "target": {"kind": "Deployment", "name": "web"}, "actions": actions, "logs": []})
    }

    #[test]
    fn the_yaml_eval_prints_is_an_expectation_it_meets() {
        let out = output(vec![
            patch("web", "nginx:1.13"),
            log("1.0"),
            json!({"action": "requeueAfter", "afterMs": 5000}),
        ]);
        let expectation = Expectation::parse(&yaml(&out)).unwrap();
        assert_eq!(expectation.action_count(), 3);
        expectation.check(&out).unwrap();
        // A rebuilt plugin (another digest) with other log lines still meets it.
        let mut rebuilt = out.clone();
        rebuilt["plugin"]["digest"] = "sha256:2".into();
        rebuilt["logs"] = json!([{"message": "hello"}]);
        expectation.check(&rebuilt).unwrap();
    }

    #[test]
    fn order_counts_within_writes_events_and_logs_only() {
        let expected = output(vec![
            patch("a", "x"),
            log("one"),
            event("E1"),
            patch("b", "y"),
            log("two"),
            json!({"action": "requeueAfter", "afterMs": 100}),
        ]);
        let e = Expectation::parse(&yaml(&expected)).unwrap();
        // Interleaving differs, each stream in order, a longer requeue added: met.
        e.check(&output(vec![
            json!({"action": "requeueAfter", "afterMs": 900}),
            log("one"),
            log("two"),
            patch("a", "x"),
            patch("b", "y"),
            event("E1"),
            json!({"action": "requeueAfter", "afterMs": 100}),
        ]))
        .unwrap();
        // Two writes swapped: not met.
        let diff = e
            .check(&output(vec![
                patch("b", "y"),
                patch("a", "x"),
                log("one"),
                log("two"),
                event("E1"),
                json!({"action": "requeueAfter", "afterMs": 100}),
            ]))
            .unwrap_err();
        assert!(diff.contains("- ") && diff.contains("+ "), "{diff}");
        // Two log lines swapped: not met.
        assert!(
            e.check(&output(vec![
                patch("a", "x"),
                patch("b", "y"),
                log("two"),
                log("one"),
                event("E1"),
                json!({"action": "requeueAfter", "afterMs": 100}),
            ]))
            .is_err()
        );
    }

    #[test]
    fn a_mismatch_shows_the_changed_line_with_context() {
        let e = Expectation::parse(&yaml(&output(vec![patch("web", "nginx:1.13")]))).unwrap();
        let diff = e
            .check(&output(vec![patch("web", "nginx:1.25")]))
            .unwrap_err();
        let minus: Vec<_> = diff.lines().filter(|l| l.starts_with("- ")).collect();
        let plus: Vec<_> = diff.lines().filter(|l| l.starts_with("+ ")).collect();
        assert_eq!(minus.len(), 1, "{diff}");
        assert!(minus[0].contains("nginx:1.13"), "{diff}");
        assert!(plus[0].contains("nginx:1.25"), "{diff}");
        let missing = e.check(&output(vec![])).unwrap_err();
        assert!(missing.contains("+ actions: []"), "{missing}");
    }

    #[test]
    fn the_target_is_compared_when_the_file_names_it() {
        let with_target =
            Expectation::parse("target: {kind: Deployment, name: other}\nactions: []\n").unwrap();
        let diff = with_target.check(&output(vec![])).unwrap_err();
        assert!(diff.contains("- ") && diff.contains("other"), "{diff}");
        Expectation::parse("actions: []")
            .unwrap()
            .check(&output(vec![]))
            .unwrap();
    }

    #[test]
    fn bad_expectations_say_what_is_wrong() {
        let err = |text: &str| format!("{:#}", Expectation::parse(text).unwrap_err());
        assert!(err("- a\n- b\n").contains("is not a mapping with `actions`"));
        assert!(err("target: {}\n").contains("has no `actions` list"));
        assert!(err("action: []\n").contains("unknown key `action`"));
        assert!(err("actions: 3\n").contains("`actions` is not a list but a number"));
        assert!(err("actions: [{level: info}]\n").contains("actions[0] has no `action` field"));
        assert!(
            err("actions: [{action: patch}, {action: scale}]\n")
                .contains("actions[1] has an unknown action `scale`")
        );
        assert!(err("actions: [").contains("is not valid YAML or JSON"));
        assert!(
            Expectation::parse("{\"actions\": []}")
                .unwrap()
                .action_count()
                == 0
        );
    }

    #[test]
    fn strings_that_look_like_other_scalars_survive_the_yaml_round_trip() {
        let out = output(vec![
            log("1.13"),
            log("true"),
            log("null"),
            log("~"),
            log("0x10"),
            log("a: b"),
            log("- x"),
            log("multi\nline"),
            log(""),
        ]);
        let back: Value = serde_saphyr::from_str(&yaml(&out)).unwrap();
        assert_eq!(back, out, "{}", yaml(&out));
    }

    #[test]
    fn line_diff_marks_changes_and_shortens_long_unchanged_runs() {
        let a: String = (0..20).map(|i| format!("l{i}\n")).collect();
        let b = a.replace("l10\n", "L10\n");
        let d = line_diff(&a, &b);
        assert!(d.contains("- l10\n+ L10\n"), "{d}");
        assert!(d.contains("  l7\n") && !d.contains("  l6\n"), "{d}");
        assert!(d.contains("  ...\n"), "{d}");
    }
}
