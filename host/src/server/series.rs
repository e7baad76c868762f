//! The dashboard's plots and per-plugin view, kept by the host in memory and bounded.
//!
//! Every [`STEP`] a sampler reads the host's own metrics (the text `/metrics` serves, so
//! what is plotted is what Prometheus scrapes, but per plugin whatever
//! `--metrics-per-plugin-limit`) and keeps, per running plugin, one point per
//! step for the last [`WINDOW`]: reconciles and errors (any result but `success`) and denied
//! actions in the step, call latency p50 and p99 (from the step's share of
//! `kubeplug_reconcile_duration_seconds`), queue depth, and writes waiting for the plugin's
//! write budget. A stream subscriber keeps each plugin's recent audit decisions, denials and
//! failed actions (with the rule that decided) and reconcile errors. At most
//! [`MAX_PLUGINS`] plugins are tracked; a plugin that stops running is forgotten at the next
//! step. `GET /api/plugins` answers every plugin's points plus one for the step under way;
//! `GET /api/plugins/{name}` one plugin's, with its policy, grants, revision and records.

use super::ServerState;
use crate::stream::{Record, RecordType, StreamHub};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a point is taken.
pub const STEP: Duration = Duration::from_secs(5);
/// How far back the plots go.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Points kept per plugin.
pub const POINTS: usize = (WINDOW.as_secs() / STEP.as_secs()) as usize;
/// The most plugins tracked.
pub const MAX_PLUGINS: usize = 256;
/// Recent audit decisions kept per plugin.
const RECENT_AUDITS: usize = 25;
/// Denials, failed actions and reconcile errors kept per plugin.
const RECENT_PROBLEMS: usize = 10;
/// The most bytes of a policy document shown.
const MAX_POLICY_BYTES: u64 = 16 * 1024;

/// One step of one plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Point {
    /// When the step ended, in milliseconds since the Unix epoch.
    pub t: i64,
    /// The step's length in seconds (rates are counts over it).
    pub dt: f64,
    /// Reconciles that ended in the step.
    pub reconciles: u64,
    /// Those that did not succeed.
    pub errors: u64,
    /// Actions denied by the policy in the step.
    pub denied: u64,
    /// Median call latency in the step, in seconds (`None` without calls).
    pub p50: Option<f64>,
    /// 99th percentile call latency in the step, in seconds.
    pub p99: Option<f64>,
    /// Keys in the plugin's queue at the end of the step.
    pub depth: f64,
    /// Writes waiting for the plugin's write budget at the end of the step.
    pub waiting: usize,
}

/// A plugin's cumulative counters, as read from the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
struct Counters {
    reconciles: u64,
    errors: u64,
    denied: u64,
    /// Duration histogram: (upper bound, cumulative count), sorted by bound.
    buckets: Vec<(f64, u64)>,
    depth: f64,
}

#[derive(Debug, Default)]
struct PluginState {
    last: Counters,
    last_at: Option<jiff::Timestamp>,
    points: VecDeque<Point>,
    audits: VecDeque<Arc<Record>>,
    problems: VecDeque<Arc<Record>>,
}

/// The series of every plugin; clones share them.
#[derive(Debug, Clone, Default)]
pub struct Series {
    plugins: Arc<Mutex<BTreeMap<String, PluginState>>>,
}

impl Series {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginState>> {
        self.plugins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one point per running plugin from `metrics` (the metrics text), at `now`;
    /// forgets plugins not in `running`.
    fn sample(&self, metrics: &str, running: &[String], now: jiff::Timestamp) {
        let counters = parse_metrics(metrics);
        let mut plugins = self.lock();
        plugins.retain(|name, _| running.contains(name));
        for name in running {
            if !plugins.contains_key(name) && plugins.len() >= MAX_PLUGINS {
                continue;
            }
            let state = plugins.entry(name.clone()).or_default();
            let current = counters.get(name).cloned().unwrap_or_default();
            let point = step(state, &current, name, now);
            state.last = current;
            state.last_at = Some(now);
            if state.points.len() == POINTS {
                state.points.pop_front();
            }
            state.points.push_back(point);
        }
    }

    /// The points of `name` (all plugins when `None`), each followed by the step under way.
    fn points(&self, metrics: &str, only: Option<&str>) -> BTreeMap<String, Vec<Point>> {
        let counters = parse_metrics(metrics);
        let now = jiff::Timestamp::now();
        let plugins = self.lock();
        plugins
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .map(|(name, state)| {
                let current = counters.get(name).cloned().unwrap_or_default();
                let mut points: Vec<Point> = state.points.iter().copied().collect();
                points.push(step(state, &current, name, now));
                (name.clone(), points)
            })
            .collect()
    }

    /// Keeps `record` if it concerns a tracked plugin: audits, and denials, failures and
    /// reconcile errors apart.
    fn keep(&self, record: &Arc<Record>) {
        let Some(plugin) = record.plugin.as_deref() else {
            return;
        };
        let problem = match record.kind {
            RecordType::Audit => {
                record.json.contains(r#""decision":"denied""#)
                    || record.json.contains(r#""decision":"failed""#)
            }
            RecordType::Reconcile => {
                record.level >= crate::stream::Level::Warn
                    || record.json.contains(r#""result":"conflict""#)
            }
            _ => false,
        };
        if record.kind != RecordType::Audit && !problem {
            return;
        }
        let mut plugins = self.lock();
        let Some(state) = plugins.get_mut(plugin) else {
            return;
        };
        let push = |list: &mut VecDeque<Arc<Record>>, max| {
            if list.len() == max {
                list.pop_front();
            }
            list.push_back(record.clone());
        };
        if record.kind == RecordType::Audit {
            push(&mut state.audits, RECENT_AUDITS);
        }
        if problem {
            push(&mut state.problems, RECENT_PROBLEMS);
        }
    }

    /// The records kept for `name`: (recent audits, recent problems), newest first.
    fn records(&self, name: &str) -> Option<(Vec<Value>, Vec<Value>)> {
        let plugins = self.lock();
        let state = plugins.get(name)?;
        let json = |list: &VecDeque<Arc<Record>>| {
            list.iter()
                .rev()
                .filter_map(|r| serde_json::from_str(&r.json).ok())
                .collect()
        };
        Some((json(&state.audits), json(&state.problems)))
    }

    /// Samples `metrics` every [`STEP`] and keeps the records `hub` publishes, until the
    /// returned task is aborted.
    pub fn start(
        &self,
        hub: &StreamHub,
        metrics: impl Fn() -> (String, Vec<String>) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let series = self.clone();
        let mut sub = hub.subscribe_internal();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(STEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let replay = std::mem::take(&mut sub.replay);
            let mut replayed = false;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let (text, running) = metrics();
                        series.sample(&text, &running, jiff::Timestamp::now());
                        if !replayed {
                            replayed = true;
                            for record in &replay {
                                series.keep(record);
                            }
                        }
                    }
                    record = sub.next() => match record {
                        Some(record) => series.keep(&record),
                        None => return,
                    },
                }
            }
        })
    }
}

/// The point of the step from `state`'s last counters to `current`, ending `now`. A counter
/// that went down (the plugin was removed and added again) counts from zero.
fn step(state: &PluginState, current: &Counters, name: &str, now: jiff::Timestamp) -> Point {
    let last = &state.last;
    let delta = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
    let reset = current.reconciles < last.reconciles;
    let buckets: Vec<(f64, u64)> = current
        .buckets
        .iter()
        .map(|&(le, n)| {
            let before = match reset {
                true => 0,
                false => last
                    .buckets
                    .iter()
                    .find(|(l, _)| *l == le)
                    .map_or(0, |b| b.1),
            };
            (le, delta(n, before))
        })
        .collect();
    let dt = state.last_at.map_or(STEP.as_secs_f64(), |at| {
        now.duration_since(at).as_secs_f64().max(0.001)
    });
    Point {
        t: now.as_millisecond(),
        dt,
        reconciles: delta(current.reconciles, last.reconciles),
        errors: delta(current.errors, last.errors),
        denied: delta(current.denied, last.denied),
        p50: quantile(&buckets, 0.5),
        p99: quantile(&buckets, 0.99),
        depth: current.depth,
        waiting: crate::actions::waiting::waiting(name),
    }
}

/// The `q` quantile of a histogram's cumulative buckets, interpolated within the bucket as
/// Prometheus' `histogram_quantile` does; the largest finite bound for the `+Inf` bucket.
fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = (0.0, 0u64);
    for &(le, n) in buckets {
        if n as f64 >= rank {
            if le.is_infinite() {
                return Some(below.0);
            }
            let inside = (n - below.1) as f64;
            let share = match inside > 0.0 {
                true => (rank - below.1 as f64) / inside,
                false => 1.0,
            };
            return Some(below.0 + (le - below.0) * share);
        }
        below = (le, n);
    }
    Some(below.0)
}

/// Each plugin's counters in a metrics text.
fn parse_metrics(text: &str) -> HashMap<String, Counters> {
    let mut out: HashMap<String, Counters> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |wanted: &str| {
            labels.split(',').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == wanted).then(|| v.trim_matches('"'))
            })
        };
        let count = value.max(0.0) as u64;
        let plugin = match name {
            "workqueue_depth" => label("name"),
            _ => label("plugin"),
        };
        let Some(plugin) = plugin else {
            continue;
        };
        match name {
            "kubeplug_reconcile_total" => {
                let c = out.entry(plugin.to_string()).or_default();
                c.reconciles += count;
                if label("result") != Some("success") {
                    c.errors += count;
                }
            }
            "kubeplug_actions_total" if label("decision") == Some("denied") => {
                out.entry(plugin.to_string()).or_default().denied += count;
            }
            "kubeplug_reconcile_duration_seconds_bucket" => {
                let le = match label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(le) => match le.parse() {
                        Ok(le) => le,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                let c = out.entry(plugin.to_string()).or_default();
                c.buckets.push((le, count));
                c.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            "workqueue_depth" => out.entry(plugin.to_string()).or_default().depth = value,
            _ => {}
        }
    }
    out
}

/// What the plot endpoints need: the server's state and the series.
#[derive(Clone)]
pub(super) struct PlotState {
    /// What runs.
    pub server: ServerState,
    /// What was sampled.
    pub series: Series,
}

/// The metrics text and the running plugins.
fn read(state: &ServerState) -> (String, Vec<String>) {
    (
        state.controller.metrics_text_per_plugin(),
        state.controller.plugins(),
    )
}

/// The answer of `GET /api/plugins`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesReport {
    /// Seconds per step.
    pub step_seconds: u64,
    /// Seconds the plots cover.
    pub window_seconds: u64,
    /// Each plugin's points, oldest first, the step under way last.
    pub plugins: BTreeMap<String, Vec<Point>>,
}

/// `GET /api/plugins`: every plugin's points.
pub(super) async fn all(State(state): State<PlotState>) -> Json<SeriesReport> {
    let (text, _) = read(&state.server);
    Json(SeriesReport {
        step_seconds: STEP.as_secs(),
        window_seconds: WINDOW.as_secs(),
        plugins: state.series.points(&text, None),
    })
}

/// The answer of `GET /api/plugins/{name}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginView {
    pub name: String,
    pub declared: String,
    pub version: String,
    pub digest: String,
    pub reconciles: String,
    pub mode: crate::policy::Mode,
    /// The policy file in force; `None` for the dry-run default.
    pub policy: Option<String>,
    /// Its text (the first 16 KiB).
    pub policy_document: Option<String>,
    /// The grants in force, as the host reads them.
    pub grants: String,
    /// Its limits in force.
    pub limits: String,
    /// Recent audit decisions, newest first.
    pub audits: Vec<Value>,
    /// Recent denials, failed actions and reconcile errors, newest first.
    pub problems: Vec<Value>,
    /// Seconds per step.
    pub step_seconds: u64,
    /// Its points.
    pub points: Vec<Point>,
    /// For a Plugin object's instance: the status the host computed for it (conditions,
    /// digest, grant, rollout), as `kubectl get plugin -o yaml` shows it once written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_status: Option<Value>,
}

/// `GET /api/plugins/{name}` (a Plugin object's `namespace/name` as one segment, `%2F`):
/// one plugin's view; 400 for a name that cannot be a plugin's,
/// 404 for one that does not run.
pub(super) async fn one(State(state): State<PlotState>, Path(name): Path<String>) -> Response {
    if !crate::stream::is_instance_name(&name) {
        return (
            StatusCode::BAD_REQUEST,
            "the plugin name is not an instance name (a DNS-1123 label, or namespace/name of a Plugin object)\n",
        )
            .into_response();
    }
    let controller = &state.server.controller;
    let (Some(plugin), Some(policy)) = (controller.plugin(&name), controller.policy(&name)) else {
        return (StatusCode::NOT_FOUND, "no such plugin runs\n").into_response();
    };
    let policy_document = match &policy.source {
        Some(path) => read_capped(path).await,
        None => None,
    };
    let (text, _) = read(&state.server);
    let points = state
        .series
        .points(&text, Some(&name))
        .remove(&name)
        .unwrap_or_default();
    let (audits, problems) = state.series.records(&name).unwrap_or_default();
    Json(PluginView {
        declared: plugin.declared_name().to_string(),
        version: plugin.metadata().version.clone(),
        digest: plugin.digest().to_string(),
        reconciles: plugin.metadata().reconciles.to_string(),
        mode: policy.mode,
        policy: policy.source.as_ref().map(|p| p.display().to_string()),
        policy_document,
        grants: grants_text(&policy.grants),
        limits: format!("{:#?}", policy.limits),
        audits,
        problems,
        step_seconds: STEP.as_secs(),
        points,
        object_status: state
            .server
            .plugin_statuses
            .as_ref()
            .and_then(|s| s.get(&name)),
        name,
    })
    .into_response()
}

/// The grants in force, one line each: namespaces, cluster scope, reads, writes per kind.
fn grants_text(grants: &crate::policy::Grants) -> String {
    use crate::policy::{Namespaces, Rules};
    use std::fmt::Write;
    let mut out = String::new();
    let list = |items: Vec<String>| match items.is_empty() {
        true => "none".to_string(),
        false => items.join(", "),
    };
    match &grants.namespaces {
        Namespaces::All => out.push_str("namespaces: all\n"),
        Namespaces::Only {
            names,
            selector,
            cluster,
        } => {
            let _ = writeln!(out, "namespaces: {}", list(names.iter().cloned().collect()));
            if let Some(selector) = selector {
                let _ = writeln!(out, "namespaces labelled: {selector:?}");
            }
            let _ = writeln!(out, "cluster-scoped objects seen: {cluster}");
        }
    }
    let _ = writeln!(out, "cluster-scoped writes: {}", grants.cluster_scoped);
    let reads = grants.reads.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "reads (beyond its kind): {}", list(reads));
    match &grants.rules {
        Rules::Any => out.push_str("writes: any (no policy: dry-run, audited only)\n"),
        Rules::Only(rules) => {
            let mut kinds: Vec<_> = rules.iter().collect();
            kinds.sort_by_key(|(kind, _)| kind.to_string());
            for (kind, rule) in kinds {
                let verbs = rule
                    .verbs
                    .iter()
                    .filter_map(|v| serde_json::to_value(v).ok()?.as_str().map(str::to_string))
                    .collect();
                let fields = rule.fields.iter().map(|f| f.as_str().to_string()).collect();
                let _ = writeln!(out, "{kind}: {}; fields: {}", list(verbs), list(fields));
            }
        }
    }
    out
}

/// The first [`MAX_POLICY_BYTES`] of a policy file, if it can be read.
async fn read_capped(path: &std::path::Path) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path).await.ok()?;
    let mut text = Vec::new();
    file.take(MAX_POLICY_BYTES)
        .read_to_end(&mut text)
        .await
        .ok()?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// Starts the sampler of `state`'s series.
pub(super) fn start(state: &PlotState) -> tokio::task::JoinHandle<()> {
    let reader = state.server.clone();
    state.series.start(&state.server.hub, move || read(&reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP x
workqueue_depth{name="a"} 3
kubeplug_reconcile_total{plugin="a",result="success"} 8
kubeplug_reconcile_total{plugin="a",result="error"} 2
kubeplug_actions_total{plugin="a",action="patch",decision="denied"} 4
kubeplug_actions_total{plugin="a",action="patch",decision="executed"} 5
kubeplug_reconcile_duration_seconds_bucket{le="0.001",plugin="a"} 5
kubeplug_reconcile_duration_seconds_bucket{le="0.01",plugin="a"} 9
kubeplug_reconcile_duration_seconds_bucket{le="+Inf",plugin="a"} 10
"#;

    #[test]
    fn metrics_become_counters_per_plugin() {
        let c = &parse_metrics(METRICS)["a"];
        assert_eq!((c.reconciles, c.errors, c.denied), (10, 2, 4));
        assert_eq!(c.depth, 3.0);
        assert_eq!(c.buckets.len(), 3);
        assert_eq!(quantile(&c.buckets, 0.5), Some(0.001));
        let p99 = quantile(&c.buckets, 0.99).unwrap();
        assert_eq!(
            p99, 0.01,
            "the +Inf bucket is reported at the largest bound"
        );
        assert_eq!(quantile(&[(1.0, 0), (f64::INFINITY, 0)], 0.5), None);
        let p = quantile(&[(1.0, 2), (2.0, 4)], 0.75).unwrap();
        assert!((p - 1.5).abs() < 1e-9, "{p}");
    }

    #[test]
    fn points_are_per_step_bounded_and_forgotten_with_their_plugin() {
        let series = Series::default();
        let running = vec!["a".to_string()];
        let t0 = jiff::Timestamp::from_second(1_000_000).unwrap();
        series.sample(METRICS, &running, t0);
        let more = METRICS.replace("result=\"success\"} 8", "result=\"success\"} 11");
        series.sample(&more, &running, t0 + jiff::SignedDuration::from_secs(5));
        let points = series.points(&more, None).remove("a").unwrap();
        assert_eq!(points.len(), 3, "two steps and the one under way");
        assert_eq!(points[0].reconciles, 10);
        assert_eq!(points[1].reconciles, 3);
        assert_eq!(points[1].dt, 5.0);
        assert_eq!(points[2].reconciles, 0);
        let total: u64 = points.iter().map(|p| p.reconciles).sum();
        assert_eq!(total, 13, "the plotted total is the counter's");
        for i in 0..POINTS + 10 {
            series.sample(
                &more,
                &running,
                t0 + jiff::SignedDuration::from_secs(10 + i as i64),
            );
        }
        assert_eq!(series.lock()["a"].points.len(), POINTS);
        series.sample(&more, &[], t0);
        assert!(series.lock().is_empty());
        let many: Vec<String> = (0..MAX_PLUGINS + 5).map(|i| format!("p{i}")).collect();
        series.sample("", &many, t0);
        assert_eq!(series.lock().len(), MAX_PLUGINS);
    }

    #[test]
    fn denials_and_errors_are_kept_apart_from_audits() {
        let series = Series::default();
        series.sample(METRICS, &["a".to_string()], jiff::Timestamp::now());
        let record = |kind, level, fields: Value| {
            let Value::Object(fields) = fields else {
                unreachable!()
            };
            Arc::new(Record::new(kind, level, "m", fields))
        };
        use crate::stream::Level;
        let denied = record(
            RecordType::Audit,
            Level::Warn,
            serde_json::json!({"plugin": "a", "decision": "denied", "grant": "fields"}),
        );
        let executed = record(
            RecordType::Audit,
            Level::Debug,
            serde_json::json!({"plugin": "a", "decision": "executed"}),
        );
        let failed = record(
            RecordType::Reconcile,
            Level::Warn,
            serde_json::json!({"plugin": "a", "result": "error"}),
        );
        let other = record(
            RecordType::Audit,
            Level::Warn,
            serde_json::json!({"plugin": "b", "decision": "denied"}),
        );
        for r in [&denied, &executed, &failed, &other] {
            series.keep(r);
        }
        for _ in 0..RECENT_AUDITS + 3 {
            series.keep(&executed);
        }
        let (audits, problems) = series.records("a").unwrap();
        assert_eq!(audits.len(), RECENT_AUDITS);
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0]["result"], "error");
        assert_eq!(problems[1]["grant"], "fields");
        assert!(series.records("b").is_none());
    }
}
