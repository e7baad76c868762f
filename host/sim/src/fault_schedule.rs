//! Fault schedules: a seed and a list of rules (which requests, how often, in which window,
//! which fault), read from YAML (`kubeplug sim --faults FILE`, `POST /sim/faults`) and decided
//! per request deterministically: each rule has its own counter and its own PRNG seeded from
//! the schedule's seed and the rule's index, so the same schedule and the same sequence of
//! requests inject the same faults.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// Every verb a rule may name.
pub const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// A seed and the rules tried, in order, for every API request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Schedule {
    /// Seeds every rule's PRNG (rule `i` draws from a stream derived from `seed` and `i`).
    pub seed: u64,
    /// Tried in order; the first rule that fires injects its fault (at most one per request).
    pub rules: Vec<Rule>,
}

/// Which requests a rule considers; an empty list matches everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Match {
    /// Kubernetes verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); empty = the verbs the fault applies to.
    pub verbs: Vec<String>,
    /// Resources: plural (`deployments`) or plural.group (`deployments.apps`).
    pub resources: Vec<String>,
    /// Kinds (`Deployment`), case-insensitive.
    pub kinds: Vec<String>,
    /// Namespaces in the request path; a cluster-wide request matches none of them.
    pub namespaces: Vec<String>,
    /// Substrings of the `User-Agent` (a replica's identity).
    pub user_agents: Vec<String>,
}

/// One rule: which requests, how often, when, and what goes wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Which requests count.
    #[serde(rename = "match", default)]
    pub matcher: Match,
    /// Fire on this share (0..=1) of the requests in the window, drawn from the rule's PRNG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Fire on every Nth request in the window (1 = all); neither this nor `ratio` = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_nth: Option<u64>,
    /// The window opens after this many matching requests.
    #[serde(default)]
    pub after: u64,
    /// The window stays open for this many matching requests; absent = for ever.
    #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Inject at most this many faults. With no rate, the rule fires on the first N requests
    /// it matches (in its window): "the next N watches" (the sim's counter switches are such).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_faults: Option<u64>,
    /// What goes wrong.
    pub fault: Fault,
}

/// One kind of misbehaviour. In YAML a map with one key (`fault: {closeWatch: {afterEvents:
/// 2}}`) or, for a fault without parameters, its name (`fault: goneWatch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Fault {
    /// A watch ends cleanly after this many events (0 = at once, before any).
    #[serde(rename_all = "camelCase")]
    CloseWatch {
        /// Events sent first.
        #[serde(default)]
        after_events: u64,
    },
    /// A watch goes silent after this many events: no events, no bookmarks, no timeout; the
    /// connection is held open until the client gives up (or the sim stops).
    #[serde(rename_all = "camelCase")]
    StallWatch {
        /// Events sent first.
        #[serde(default)]
        after_events: u64,
    },
    /// A watch answered with HTTP status 410 and a `Status` with reason `Expired`, as a real
    /// server answers a watch from a compacted resourceVersion.
    GoneWatch {},
    /// A watch answered 200 whose only event is an `ERROR` with a 410 `Status` (the in-stream
    /// form a real server uses when the version expires while the watch is being set up).
    GoneWatchEvent {},
    /// A list with a `continue` token answered 410 Expired (only such lists match).
    GoneContinue {},
    /// Every event (and bookmark) of a watch is sent this many milliseconds late, in order.
    DelayEvents {
        /// Delay in milliseconds.
        ms: u64,
    },
    /// An error answer: 429 (with `Retry-After`), 500, 502, 503 or 504.
    #[serde(rename_all = "camelCase")]
    Error {
        /// HTTP status.
        status: u16,
        /// `Retry-After` seconds (default 1 for 429, none otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_seconds: Option<u64>,
    },
    /// No answer for this many milliseconds, then the connection is closed without one.
    Timeout {
        /// Milliseconds before the connection is closed.
        ms: u64,
    },
    /// The connection is aborted mid-body: a watch after this many events, any other
    /// answer after half of its body (a write has then been carried out).
    #[serde(rename_all = "camelCase")]
    Reset {
        /// Events a watch sends first.
        #[serde(default)]
        after_events: u64,
    },
    /// The request is served this many milliseconds late.
    Latency {
        /// Milliseconds.
        ms: u64,
    },
    /// An update or patch answered 409 Conflict instead of being carried out.
    Conflict {},
    /// A list answered with the state as of this many resourceVersions ago (a lagging
    /// cache), bounded by the sim's event history; the whole list, without paging.
    StaleList {
        /// How far behind, in resourceVersions.
        revisions: u64,
    },
}

impl Fault {
    /// The verbs this fault can apply to.
    pub fn verbs(&self) -> &'static [&'static str] {
        match self {
            Self::CloseWatch { .. }
            | Self::StallWatch { .. }
            | Self::GoneWatch {}
            | Self::GoneWatchEvent {}
            | Self::DelayEvents { .. } => &["watch"],
            Self::GoneContinue {} | Self::StaleList { .. } => &["list"],
            Self::Conflict {} => &["update", "patch"],
            Self::Error { .. }
            | Self::Timeout { .. }
            | Self::Reset { .. }
            | Self::Latency { .. } => VERBS,
        }
    }

    /// The fault's name as written in YAML.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CloseWatch { .. } => "closeWatch",
            Self::StallWatch { .. } => "stallWatch",
            Self::GoneWatch {} => "goneWatch",
            Self::GoneWatchEvent {} => "goneWatchEvent",
            Self::GoneContinue {} => "goneContinue",
            Self::DelayEvents { .. } => "delayEvents",
            Self::Error { .. } => "error",
            Self::Timeout { .. } => "timeout",
            Self::Reset { .. } => "reset",
            Self::Latency { .. } => "latency",
            Self::Conflict {} => "conflict",
            Self::StaleList { .. } => "staleList",
        }
    }
}

/// The fault as its JSON form (`{"closeWatch":{"afterEvents":2}}`), for logs and records.
impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

/// A schedule that does not parse or makes no sense; `at` names where (`rules[2].ratio`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct ScheduleError {
    /// Where: `faults` for the document, `rules[i]` and a field path below it.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

fn error(at: impl Into<String>, message: impl Into<String>) -> ScheduleError {
    ScheduleError {
        at: at.into(),
        message: message.into(),
    }
}

const RULE_FIELDS: &[&str] = &[
    "match",
    "ratio",
    "everyNth",
    "after",
    "for",
    "maxFaults",
    "fault",
];

impl Schedule {
    /// Parses and validates a YAML (or JSON) schedule.
    pub fn from_yaml(text: &str) -> Result<Self, ScheduleError> {
        let value: Value =
            serde_saphyr::from_str(text).map_err(|e| error("faults", e.to_string()))?;
        Self::from_value(value)
    }

    /// Parses and validates a schedule already read as a JSON value.
    pub fn from_value(value: Value) -> Result<Self, ScheduleError> {
        let Value::Object(mut top) = value else {
            return Err(error(
                "faults",
                "a schedule is a mapping with `seed` and `rules`",
            ));
        };
        if let Some(key) = top.keys().find(|k| !matches!(k.as_str(), "seed" | "rules")) {
            return Err(error(
                "faults",
                format!("unknown field `{key}` (expected `seed`, `rules`)"),
            ));
        }
        let seed = take::<u64>(&mut top, "seed", "seed")?.unwrap_or(0);
        let rules = match top.remove("rules") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(rules)) => rules
                .into_iter()
                .enumerate()
                .map(|(i, rule)| parse_rule(rule, &format!("rules[{i}]")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(error("rules", "expected a list of rules")),
        };
        let schedule = Self { seed, rules };
        schedule.validate()?;
        Ok(schedule)
    }

    /// Checks every rule: rates in range, known verbs that the fault applies to, sensible
    /// fault parameters.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        for (i, rule) in self.rules.iter().enumerate() {
            rule.validate(&format!("rules[{i}]"))?;
        }
        Ok(())
    }
}

fn take<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<T>, ScheduleError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| error(at, e.to_string())),
    }
}

fn parse_rule(value: Value, at: &str) -> Result<Rule, ScheduleError> {
    let Value::Object(mut map) = value else {
        return Err(error(
            at,
            "a rule is a mapping with `match`, a rate and `fault`",
        ));
    };
    if let Some(key) = map.keys().find(|k| !RULE_FIELDS.contains(&k.as_str())) {
        return Err(error(
            at,
            format!(
                "unknown field `{key}` (expected one of {})",
                RULE_FIELDS.join(", ")
            ),
        ));
    }
    let field = |name: &str| format!("{at}.{name}");
    let matcher = take::<Match>(&mut map, "match", &field("match"))?.unwrap_or_default();
    let ratio = take::<f64>(&mut map, "ratio", &field("ratio"))?;
    let every_nth = take::<u64>(&mut map, "everyNth", &field("everyNth"))?;
    let after = take::<u64>(&mut map, "after", &field("after"))?.unwrap_or(0);
    let window = take::<u64>(&mut map, "for", &field("for"))?;
    let max_faults = take::<u64>(&mut map, "maxFaults", &field("maxFaults"))?;
    let fault = match map.remove("fault") {
        None | Some(Value::Null) => {
            return Err(error(field("fault"), "missing: every rule names one fault"));
        }
        Some(Value::String(name)) => parse_fault(
            Value::Object(Map::from_iter([(name, Value::Object(Map::new()))])),
            &field("fault"),
        )?,
        Some(Value::Object(m)) if m.len() == 1 => {
            let (name, params) = m.into_iter().next().unwrap_or_default();
            let params = if params.is_null() {
                Value::Object(Map::new())
            } else {
                params
            };
            parse_fault(
                Value::Object(Map::from_iter([(name, params)])),
                &field("fault"),
            )?
        }
        Some(_) => {
            return Err(error(
                field("fault"),
                "expected one fault: a name (`goneWatch`) or a mapping with one key (`closeWatch: {afterEvents: 2}`)",
            ));
        }
    };
    Ok(Rule {
        matcher,
        ratio,
        every_nth,
        after,
        window,
        max_faults,
        fault,
    })
}

fn parse_fault(value: Value, at: &str) -> Result<Fault, ScheduleError> {
    let name = value
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    serde_json::from_value(value).map_err(|e| {
        let message = e.to_string();
        if message.starts_with("unknown variant") {
            error(at, message)
        } else {
            error(format!("{at}.{name}"), message)
        }
    })
}

impl Rule {
    /// A rule that injects `fault` into every request it applies to.
    pub fn new(fault: Fault) -> Self {
        Self {
            matcher: Match::default(),
            ratio: None,
            every_nth: None,
            after: 0,
            window: None,
            max_faults: None,
            fault,
        }
    }

    fn validate(&self, at: &str) -> Result<(), ScheduleError> {
        let field = |name: &str| format!("{at}.{name}");
        if self.ratio.is_some() && self.every_nth.is_some() {
            return Err(error(at, "give `ratio` or `everyNth`, not both"));
        }
        if let Some(r) = self.ratio
            && !(0.0..=1.0).contains(&r)
        {
            return Err(error(field("ratio"), format!("{r} is not between 0 and 1")));
        }
        if self.every_nth == Some(0) {
            return Err(error(field("everyNth"), "must be at least 1"));
        }
        if self.window == Some(0) {
            return Err(error(
                field("for"),
                "must be at least 1 (or absent: for ever)",
            ));
        }
        let applies = self.fault.verbs();
        for (j, verb) in self.matcher.verbs.iter().enumerate() {
            if !VERBS.contains(&verb.as_str()) {
                return Err(error(
                    format!("{at}.match.verbs[{j}]"),
                    format!(
                        "unknown verb `{verb}` (expected one of {})",
                        VERBS.join(", ")
                    ),
                ));
            }
            if !applies.contains(&verb.as_str()) {
                return Err(error(
                    format!("{at}.match.verbs[{j}]"),
                    format!(
                        "a `{}` fault does not apply to `{verb}` (only to {})",
                        self.fault.name(),
                        applies.join(", ")
                    ),
                ));
            }
        }
        let fault_at = format!("{at}.fault.{}", self.fault.name());
        match &self.fault {
            Fault::Error { status, .. } if !matches!(status, 429 | 500 | 502 | 503 | 504) => {
                Err(error(
                    format!("{fault_at}.status"),
                    format!("{status} is not one of 429, 500, 502, 503, 504"),
                ))
            }
            Fault::DelayEvents { ms: 0 } | Fault::Latency { ms: 0 } | Fault::Timeout { ms: 0 } => {
                Err(error(format!("{fault_at}.ms"), "must be at least 1"))
            }
            Fault::StaleList { revisions: 0 } => {
                Err(error(format!("{fault_at}.revisions"), "must be at least 1"))
            }
            _ => Ok(()),
        }
    }

    fn matches(&self, request: &RequestInfo<'_>) -> bool {
        let m = &self.matcher;
        let verb_ok = if m.verbs.is_empty() {
            self.fault.verbs().contains(&request.verb)
        } else {
            m.verbs.iter().any(|v| v == request.verb)
        };
        let resource_ok = m.resources.is_empty()
            || m.resources.iter().any(|r| {
                *r == request.resource
                    || r.split_once('.')
                        .is_some_and(|(p, g)| p == request.resource && g == request.group)
            });
        let kind_ok =
            m.kinds.is_empty() || m.kinds.iter().any(|k| k.eq_ignore_ascii_case(request.kind));
        let ns_ok = m.namespaces.is_empty()
            || request
                .namespace
                .is_some_and(|ns| m.namespaces.iter().any(|n| n == ns));
        let agent_ok = m.user_agents.is_empty()
            || m.user_agents
                .iter()
                .any(|a| request.user_agent.contains(a.as_str()));
        let continued_ok = !matches!(self.fault, Fault::GoneContinue {}) || request.continued;
        verb_ok && resource_ok && kind_ok && ns_ok && agent_ok && continued_ok
    }
}

/// What a rule looks at in a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    /// Kubernetes verb.
    pub verb: &'a str,
    /// Resource plural.
    pub resource: &'a str,
    /// API group (empty for core).
    pub group: &'a str,
    /// Kind name.
    pub kind: &'a str,
    /// Namespace in the path.
    pub namespace: Option<&'a str>,
    /// `User-Agent`.
    pub user_agent: &'a str,
    /// A list with a `continue` token.
    pub continued: bool,
}

/// A fault a rule decided to inject.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// The schedule's seed (logged so a run can be replayed).
    pub seed: u64,
    /// Index of the rule that fired.
    pub rule: usize,
    /// What to do.
    pub fault: Fault,
}

/// A rule's counters in a running schedule.
#[derive(Debug, Clone, Default, PartialEq)]
struct Counts {
    matched: u64,
    injected: u64,
    rng: u64,
}

/// A schedule being applied: the rules and their counters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Active {
    schedule: Schedule,
    counts: Vec<Counts>,
}

impl Active {
    /// Starts `schedule` with fresh counters.
    pub(crate) fn new(schedule: Schedule) -> Self {
        let counts = (0..schedule.rules.len() as u64)
            .map(|i| {
                let mut state = schedule.seed ^ (i + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
                Counts {
                    rng: super::faults::splitmix(&mut state),
                    ..Counts::default()
                }
            })
            .collect();
        Self { schedule, counts }
    }

    /// The fault for this request, if a rule fires: rules are tried in order, each matching
    /// one counts the request, and the first that fires wins (later rules do not see it).
    pub(crate) fn decide(&mut self, request: &RequestInfo<'_>) -> Option<Injection> {
        for (i, (rule, counts)) in self
            .schedule
            .rules
            .iter()
            .zip(self.counts.iter_mut())
            .enumerate()
        {
            if !rule.matches(request) {
                continue;
            }
            counts.matched += 1;
            let n = counts.matched;
            if n <= rule.after || rule.window.is_some_and(|w| n > rule.after + w) {
                continue;
            }
            if rule.max_faults.is_some_and(|m| counts.injected >= m) {
                continue;
            }
            let fire = match (rule.every_nth, rule.ratio) {
                (Some(k), _) => (n - rule.after).is_multiple_of(k.max(1)),
                (None, Some(ratio)) => {
                    let draw = super::faults::splitmix(&mut counts.rng);
                    ((draw >> 11) as f64 / (1u64 << 53) as f64) < ratio
                }
                (None, None) => true,
            };
            if fire {
                counts.injected += 1;
                return Some(Injection {
                    seed: self.schedule.seed,
                    rule: i,
                    fault: rule.fault.clone(),
                });
            }
        }
        None
    }

    /// The schedule with its counters (for `GET /sim/faults`).
    pub(crate) fn report(&self) -> ScheduleReport {
        let rules: Vec<RuleReport> = self
            .schedule
            .rules
            .iter()
            .zip(&self.counts)
            .map(|(rule, c)| RuleReport {
                rule: rule.clone(),
                matched: c.matched,
                injected: c.injected,
            })
            .collect();
        ScheduleReport {
            seed: self.schedule.seed,
            injected: rules.iter().map(|r| r.injected).sum(),
            rules,
        }
    }
}

/// A running schedule as `GET /sim/faults` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleReport {
    /// The schedule's seed.
    pub seed: u64,
    /// Faults injected so far, all rules together.
    pub injected: u64,
    /// Each rule with its counters.
    pub rules: Vec<RuleReport>,
}

/// One rule with its counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    /// The rule as given.
    #[serde(flatten)]
    pub rule: Rule,
    /// Requests it matched.
    pub matched: u64,
    /// Faults it injected.
    pub injected: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(resource: &str) -> RequestInfo<'_> {
        RequestInfo {
            verb: "get",
            resource,
            group: "",
            kind: "Pod",
            namespace: Some("default"),
            user_agent: "kube",
            continued: false,
        }
    }

    #[test]
    fn parses_every_fault_and_both_forms() {
        let s = Schedule::from_yaml(
            r#"
seed: 7
rules:
  - match: {verbs: [watch], resources: [pods], namespaces: [demo], userAgents: ["(a)"]}
    everyNth: 2
    after: 3
    for: 10
    maxFaults: 2
    fault: {closeWatch: {afterEvents: 2}}
  - fault: stallWatch
  - fault: goneWatch
  - fault: {goneWatchEvent: }
  - fault: goneContinue
  - fault: {delayEvents: {ms: 50}}
  - {ratio: 0.5, fault: {error: {status: 429, retryAfterSeconds: 3}}}
  - fault: {timeout: {ms: 100}}
  - fault: {reset: {afterEvents: 1}}
  - fault: {latency: {ms: 5}}
  - match: {kinds: [Deployment]}
    fault: conflict
  - fault: {staleList: {revisions: 3}}
"#,
        )
        .unwrap();
        assert_eq!(s.seed, 7);
        assert_eq!(s.rules.len(), 12);
        assert_eq!(s.rules[0].window, Some(10));
        assert_eq!(s.rules[0].fault, Fault::CloseWatch { after_events: 2 });
        assert_eq!(s.rules[1].fault, Fault::StallWatch { after_events: 0 });
        assert_eq!(s.rules[3].fault, Fault::GoneWatchEvent {});
        assert_eq!(s.rules[10].matcher.kinds, vec!["Deployment"]);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(Schedule::from_value(json).unwrap(), s, "round trip");
    }

    #[test]
    fn errors_name_the_rule_and_field() {
        let cases = [
            (
                "rules: [{fault: goneWatch}, {evryNth: 2, fault: goneWatch}]",
                "rules[1]",
                "evryNth",
            ),
            (
                "rules: [{ratio: 1.5, fault: goneWatch}]",
                "rules[0].ratio",
                "between 0 and 1",
            ),
            (
                "rules: [{ratio: 0.5, everyNth: 2, fault: goneWatch}]",
                "rules[0]",
                "not both",
            ),
            (
                "rules: [{fault: {error: {status: 418}}}]",
                "rules[0].fault.error.status",
                "418",
            ),
            (
                "rules: [{fault: {error: {}}}]",
                "rules[0].fault.error",
                "status",
            ),
            (
                "rules: [{fault: stall}]",
                "rules[0].fault",
                "unknown variant `stall`",
            ),
            (
                "rules: [{fault: {closeWatch: {after: 1}}}]",
                "rules[0].fault.closeWatch",
                "unknown field `after`",
            ),
            (
                "rules: [{match: {verbs: [list]}, fault: stallWatch}]",
                "rules[0].match.verbs[0]",
                "does not apply to `list`",
            ),
            (
                "rules: [{match: {verbs: [fetch]}, fault: {latency: {ms: 1}}}]",
                "rules[0].match.verbs[0]",
                "unknown verb",
            ),
            (
                "rules: [{match: {verb: [get]}, fault: conflict}]",
                "rules[0].match",
                "unknown field `verb`",
            ),
            (
                "rules: [{everyNth: two, fault: conflict}]",
                "rules[0].everyNth",
                "invalid type",
            ),
            ("rules: [{match: {}}]", "rules[0].fault", "missing"),
            ("seed: 1\nrule: []", "faults", "unknown field `rule`"),
            (
                "rules: [{fault: {staleList: {revisions: 0}}}]",
                "rules[0].fault.staleList.revisions",
                "at least 1",
            ),
        ];
        for (yaml, at, message) in cases {
            let err = Schedule::from_yaml(yaml).unwrap_err();
            assert_eq!(err.at, at, "{yaml}: {err}");
            assert!(err.message.contains(message), "{yaml}: {err}");
        }
        assert_eq!(Schedule::from_yaml("rules: [").unwrap_err().at, "faults");
    }

    #[test]
    fn window_rate_and_max() {
        let mut rule = Rule::new(Fault::Conflict {});
        rule.matcher.verbs = vec!["patch".into()];
        let mut rule = Rule {
            after: 2,
            window: Some(6),
            every_nth: Some(2),
            max_faults: Some(2),
            ..rule
        };
        rule.fault = Fault::Latency { ms: 1 };
        rule.matcher.verbs = vec!["get".into()];
        let mut active = Active::new(Schedule {
            seed: 1,
            rules: vec![rule],
        });
        let hits: Vec<bool> = (0..12)
            .map(|_| active.decide(&get("pods")).is_some())
            .collect();
        // Requests 3..=8 are in the window; every 2nd of them fires, at most twice.
        assert_eq!(
            hits,
            [
                false, false, false, true, false, true, false, false, false, false, false, false
            ]
        );
        assert_eq!(active.report().injected, 2);
        assert_eq!(active.report().rules[0].matched, 12);
    }

    #[test]
    fn max_faults_without_a_rate_is_the_next_n_matching_requests() {
        let mut active = Active::new(Schedule {
            seed: 0,
            rules: vec![Rule {
                max_faults: Some(2),
                ..Rule::new(Fault::GoneWatch {})
            }],
        });
        let watch = RequestInfo {
            verb: "watch",
            ..get("pods")
        };
        assert!(
            active.decide(&get("pods")).is_none(),
            "a get is not a watch"
        );
        let hits: Vec<bool> = (0..4).map(|_| active.decide(&watch).is_some()).collect();
        assert_eq!(hits, [true, true, false, false]);
    }

    #[test]
    fn first_rule_that_fires_wins_and_filters_apply() {
        let mut a = Rule::new(Fault::Error {
            status: 503,
            retry_after_seconds: None,
        });
        a.matcher.resources = vec!["deployments.apps".into()];
        let b = Rule::new(Fault::Latency { ms: 1 });
        let mut active = Active::new(Schedule {
            seed: 0,
            rules: vec![a, b],
        });
        let deploy = RequestInfo {
            resource: "deployments",
            group: "apps",
            kind: "Deployment",
            ..get("")
        };
        assert_eq!(active.decide(&deploy).unwrap().rule, 0);
        assert_eq!(active.decide(&get("pods")).unwrap().rule, 1);
        let report = active.report();
        assert_eq!((report.rules[1].matched, report.rules[1].injected), (1, 1));
        let mut gone = Active::new(Schedule {
            seed: 0,
            rules: vec![Rule::new(Fault::GoneContinue {})],
        });
        let list = RequestInfo {
            verb: "list",
            ..get("pods")
        };
        assert!(gone.decide(&list).is_none(), "a first page does not match");
        assert!(
            gone.decide(&RequestInfo {
                continued: true,
                ..list
            })
            .is_some()
        );
    }

    #[test]
    fn ratio_is_deterministic_per_seed_and_rule() {
        let run = |seed| {
            let rule = Rule {
                ratio: Some(0.3),
                ..Rule::new(Fault::Latency { ms: 1 })
            };
            let mut active = Active::new(Schedule {
                seed,
                rules: vec![rule.clone(), rule],
            });
            (0..1000)
                .map(|_| active.decide(&get("pods")).map(|i| i.rule))
                .collect::<Vec<_>>()
        };
        let a = run(42);
        assert_eq!(a, run(42));
        assert_ne!(a, run(43));
        let first = a.iter().filter(|r| **r == Some(0)).count();
        assert!((200..400).contains(&first), "{first}");
    }
}
