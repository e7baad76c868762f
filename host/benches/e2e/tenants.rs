//! Phase 9, many tenants on one host (issue 38): T tenant namespaces (`KUBEPLUG_E2E_TENANTS`,
//! default 50; `0` skips the phase), each with a `Plugin` object running image-pinner from a
//! ConfigMap of its namespace under its own config (a distinct revision of one digest), and
//! [`DEPLOYMENTS_PER_TENANT`] small Deployments. One `kubeplug sim` serving the CRDs, one
//! `kubeplug run` with no plugins directory. Measured in one run:
//! - the time from the host's start until every tenant's Plugin is Ready, from a compile
//!   cache warmed by an earlier host (the phase's own cache, under the scratch directory);
//! - RSS per Plugin: RSS with the T Plugins, less RSS of a host on the same objects without
//!   them, over T; idle (Ready, nothing to reconcile yet) and once each has pinned its
//!   Deployments (created after the idle figure); split, for the idle figure, into what
//!   the Plugin object costs refused (its module missing: reported, never loaded) and what
//!   loading it adds (the most that unloading an idle Plugin could save);
//! - the quiet tenants' change→patch p50/p99 at a steady [`QUIET_RATE`] (round-robin over
//!   the tenants), alone, then beside the noisy tenant of `noisy_tenant.rs` doing all it
//!   does at once; `isolation p99` is the second p99 over the first. Each is measured in
//!   `KUBEPLUG_E2E_TENANT_ROUNDS` rounds (default 3) and the rounds' samples pooled: one
//!   round's p99 (its third-slowest change) swung 10x between runs on a shared machine;
//!   the line also shows each round's p99, so the spread is visible.
//!
//! `KUBEPLUG_E2E_ONLY=tenants` runs this phase alone.

use crate::harness::{self, LIMIT, RequestLog, Sim};
use crate::noisy_tenant as noisy;
use crate::tenant_fixtures as fx;
use crate::{Controllers, Pending, Tally};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The number of tenants: `KUBEPLUG_E2E_TENANTS` (default 50, `0` skips the phase).
pub fn tenants() -> usize {
    crate::env_usize("KUBEPLUG_E2E_TENANTS", 50)
}

/// Each tenant's Deployments.
const DEPLOYMENTS_PER_TENANT: usize = 6;
/// The quiet tenants' changes per second, all tenants together, and for how long.
const QUIET_RATE: usize = 20;
const QUIET_SECONDS: usize = 15;
/// How long a host is left to settle before its RSS is read.
const SETTLE: Duration = Duration::from_secs(3);

/// The phase's figures.
pub struct Figures {
    pub tenants: usize,
    /// From the host's start until every tenant's Plugin was Ready (warm compile cache).
    pub ready: Duration,
    /// RSS of the host: on the same objects without Plugins, with the T Plugins Ready and
    /// idle, and after each has pinned its Deployments (MiB).
    pub rss_none: f64,
    /// RSS of the host with the T Plugins refused (their module missing): reported,
    /// never loaded (MiB).
    pub rss_refused: f64,
    pub rss_idle: f64,
    pub rss_reconciled: f64,
    /// The quiet tenants' change→patch latencies (sorted), alone and beside the noisy
    /// tenant, and the change rates reached.
    pub alone: Vec<Duration>,
    pub beside: Vec<Duration>,
    pub alone_rate: f64,
    pub beside_rate: f64,
    /// Each round's p99 (ms), alone and beside the noisy tenant.
    pub alone_rounds: Vec<f64>,
    pub beside_rounds: Vec<f64>,
    /// What the noisy tenant did meanwhile: changes/s reached, modules churned, its
    /// Deployment patches accepted, its looper's calls that ran out their budget.
    pub noisy: noisy::Done,
    pub noisy_patches: usize,
    pub noisy_timeouts: f64,
}

impl Figures {
    /// RSS per Plugin, idle, in KiB.
    pub fn rss_idle_kib(&self) -> f64 {
        (self.rss_idle - self.rss_none) * 1024.0 / self.tenants as f64
    }

    /// RSS per Plugin object refused, never loaded, in KiB: what a Plugin costs whatever
    /// becomes of it.
    pub fn rss_object_kib(&self) -> f64 {
        (self.rss_refused - self.rss_none) * 1024.0 / self.tenants as f64
    }

    /// RSS per Plugin loaded and idle beyond its object, in KiB: the most unloading an idle
    /// Plugin could save.
    pub fn rss_loaded_kib(&self) -> f64 {
        (self.rss_idle - self.rss_refused) * 1024.0 / self.tenants as f64
    }

    /// RSS per Plugin once it has reconciled its Deployments, in KiB.
    pub fn rss_reconciled_kib(&self) -> f64 {
        (self.rss_reconciled - self.rss_none) * 1024.0 / self.tenants as f64
    }

    /// Quiet p99 beside the noisy tenant over quiet p99 alone.
    pub fn isolation(&self) -> f64 {
        harness::percentile_ms(&self.beside, 0.99) / harness::percentile_ms(&self.alone, 0.99)
    }

    /// The summary line's part: `tenants T, ready S s, rss/plugin K KiB, isolation p99 R x
    /// alone`.
    pub fn summary(&self) -> String {
        format!(
            "tenants {}, ready {:.1} s, rss/plugin {:.0} KiB, isolation p99 {:.2} x alone",
            self.tenants,
            self.ready.as_secs_f64(),
            self.rss_idle_kib(),
            self.isolation()
        )
    }

    /// The `tenants:` line, every figure.
    pub fn line(&self) -> String {
        let ms = |l: &[Duration], p: f64| harness::percentile_ms(l, p);
        format!(
            "tenants: {} Plugins Ready in {:.1} s (warm compile cache); RSS {:.0} MiB without Plugins, {:.0} MiB with them refused (never loaded), {:.0} MiB idle, {:.0} MiB after reconciles: {:.0} KiB per Plugin idle ({:.0} KiB its object refused, {:.0} KiB more loaded: what unloading it could save at most), {:.0} KiB after reconciles; quiet change->patch ({} changes at {:.1}/s) alone p50 {:.1} ms p99 {:.1} ms max {:.1} ms; beside the noisy tenant ({} changes at {:.1}/s) p50 {:.1} ms p99 {:.1} ms max {:.1} ms; rounds' p99 alone {} ms, beside {} ms; isolation p99 {:.2} x alone; the noisy tenant: {:.0} changes/s, {} Deployment patches, {} modules churned, {:.0} calls out of budget",
            self.tenants,
            self.ready.as_secs_f64(),
            self.rss_none,
            self.rss_refused,
            self.rss_idle,
            self.rss_reconciled,
            self.rss_idle_kib(),
            self.rss_object_kib(),
            self.rss_loaded_kib(),
            self.rss_reconciled_kib(),
            self.alone.len(),
            self.alone_rate,
            ms(&self.alone, 0.5),
            ms(&self.alone, 0.99),
            ms(&self.alone, 1.0),
            self.beside.len(),
            self.beside_rate,
            ms(&self.beside, 0.5),
            ms(&self.beside, 0.99),
            ms(&self.beside, 1.0),
            rounds(&self.alone_rounds),
            rounds(&self.beside_rounds),
            self.isolation(),
            self.noisy.flood_rate,
            self.noisy_patches,
            self.noisy.modules,
            self.noisy_timeouts,
        )
    }
}

/// Runs the phase with `t` tenants, its files under `scratch`.
pub fn measure(scratch: &Path, t: usize) -> Figures {
    let dir = scratch.join(format!("tenants-{t}"));
    let with_plugins = fx::write_tenants(&dir.join("plugins"), t, fx::Plugins::Running);
    let without = fx::write_tenants(&dir.join("none"), t, fx::Plugins::None);
    let refused = fx::write_tenants(&dir.join("refused"), t, fx::Plugins::Refused);
    warm_compile_cache(scratch);
    let rss_none = rss_without_plugins(&without, scratch, t);
    let rss_refused = rss_with_refused_plugins(&refused, scratch, t);

    let sim = Sim::start_serving(&with_plugins, scratch, &fx::crds());
    let host = start_host(&sim, scratch, t);
    let ready = wait_ready(&sim, t, Instant::now());
    println!(
        "Tenants: {t} Plugins Ready {:.1} s after the host started",
        ready.as_secs_f64()
    );
    std::thread::sleep(SETTLE);
    let rss_idle = host.rss_mib();
    let mut log = sim.log_from_start();
    create_and_pin(&sim, &mut log, t);
    std::thread::sleep(SETTLE);
    let rss_reconciled = host.rss_mib();
    println!(
        "Tenants: RSS {rss_none:.0} MiB without Plugins, {rss_idle:.0} MiB with {t} idle, {rss_reconciled:.0} MiB once they pinned their Deployments"
    );

    let (alone, alone_rate, alone_rounds) = paced_rounds(&sim, &mut log, t);
    report_latencies("alone", &alone, alone_rate);
    let parts = noisy::Parts::from_env();
    noisy::install(sim.port, parts);
    wait_noisy_running(&sim, &host, parts);
    let timeouts_before = looper_timeouts(&host);
    let load = noisy::Load::start(sim.port, QUIET_RATE * noisy::FLOOD_FACTOR, parts);
    let (beside, beside_rate, beside_rounds) = paced_rounds(&sim, &mut log, t);
    let done = load.stop();
    report_latencies(
        &format!("beside the noisy tenant ({parts:?})"),
        &beside,
        beside_rate,
    );
    let noisy_timeouts = looper_timeouts(&host) - timeouts_before;
    let noisy_patches = sim
        .log_from_start()
        .next()
        .iter()
        .filter_map(harness::deployment_patch)
        .filter(|&(name, ok, by_bench)| ok && !by_bench && noisy::is_noisy(name))
        .count();
    Figures {
        tenants: t,
        ready,
        rss_none,
        rss_refused,
        rss_idle,
        rss_reconciled,
        alone,
        beside,
        alone_rate,
        beside_rate,
        alone_rounds,
        beside_rounds,
        noisy: done,
        noisy_patches,
        noisy_timeouts,
    }
}

fn report_latencies(when: &str, latencies: &[Duration], rate: f64) {
    println!(
        "Tenants: quiet change to patch {when}: {} changes at {rate:.1}/s, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latencies.len(),
        harness::percentile_ms(latencies, 0.5),
        harness::percentile_ms(latencies, 0.99),
        harness::percentile_ms(latencies, 1.0),
    );
}

/// A `kubeplug run` of Plugin objects only (no plugins directory), compile cache under
/// `scratch/tenants-cache`, allowed `t` Plugins and the noisy tenant's three
/// (`--max-plugin-objects` is 256 by default), each with series of its own.
fn start_host(sim: &Sim, scratch: &Path, t: usize) -> Controllers {
    let port = harness::free_port();
    let state_dir = harness::state_dir(scratch);
    let (log, level) = crate::host_log();
    let max_plugins = (t + 8).max(256);
    let process = Command::new(harness::kubeplug_bin())
        .args(["run", "--watch=false", "--kubeconfig"])
        .arg(&sim.kubeconfig)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--max-plugin-objects", &max_plugins.to_string()])
        // The noisy looper's timeouts are read from its own series, at every T.
        .args(["--metrics-per-plugin-limit", &max_plugins.to_string()])
        .arg("--state-dir")
        .arg(&state_dir)
        .env_remove("KUBEPLUG_NO_LEDGER")
        .env_remove("KUBEPLUG_PLUGINS")
        .env("KUBEPLUG_CACHE_DIR", scratch.join("tenants-cache"))
        .env("KUBEPLUG_LOG", level)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Controllers {
        processes: vec![harness::Process(process)],
        status_port: Some(port),
        state_dir: Some(state_dir),
    }
}

/// Compiles image-pinner into the phase's compile cache: one tenant's Plugin, Ready.
fn warm_compile_cache(scratch: &Path) {
    let objects = fx::write_tenants(&scratch.join("tenants-warm"), 1, fx::Plugins::Running);
    let sim = Sim::start_serving(&objects, scratch, &fx::crds());
    let _host = start_host(&sim, scratch, 1);
    wait_ready(&sim, 1, Instant::now());
}

/// RSS of a host on the tenants' objects (policy, module ConfigMaps) without their Plugins,
/// once it has settled: what RSS per Plugin is counted from.
fn rss_without_plugins(objects: &Path, scratch: &Path, t: usize) -> f64 {
    let sim = Sim::start_serving(objects, scratch, &fx::crds());
    let host = start_host(&sim, scratch, t);
    let start = Instant::now();
    while host.metric("kubeplug_reconcile_total").is_none() {
        assert!(start.elapsed() < LIMIT, "the host never served /metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(SETTLE + SETTLE);
    host.rss_mib()
}

/// RSS of a host on the tenants' objects with their Plugins refused (their module
/// missing), once each refusal is reported and the host has settled.
fn rss_with_refused_plugins(objects: &Path, scratch: &Path, t: usize) -> f64 {
    let sim = Sim::start_serving(objects, scratch, &fx::crds());
    let host = start_host(&sim, scratch, t);
    let start = Instant::now();
    let mut refused = 0;
    while refused < t {
        assert!(
            start.elapsed() < LIMIT,
            "{refused} of {t} Plugins reported refused after {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        refused = plugins(&sim)
            .iter()
            .filter(|p| ready_reason(p).0 == "False")
            .count();
    }
    std::thread::sleep(SETTLE + SETTLE);
    host.rss_mib()
}

/// Waits until the `t` tenants' Plugins are all Ready; the time since `start`.
fn wait_ready(sim: &Sim, t: usize, start: Instant) -> Duration {
    let mut ready = 0;
    while ready < t {
        assert!(
            start.elapsed() < LIMIT,
            "{ready} of {t} Plugins Ready after {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        ready = plugins(sim)
            .iter()
            .filter(|p| p["metadata"]["namespace"].as_str() != Some(noisy::NAMESPACE))
            .filter(|p| ready_reason(p).0 == "True")
            .count();
    }
    start.elapsed()
}

/// Every Plugin the sim holds.
fn plugins(sim: &Sim) -> Vec<Value> {
    harness::http_get(sim.port, fx::PLUGINS)
        .and_then(|body| serde_json::from_str::<Value>(&body).ok())
        .and_then(|list| list["items"].as_array().cloned())
        .unwrap_or_default()
}

/// A Plugin's Ready condition: (status, reason).
fn ready_reason(plugin: &Value) -> (String, String) {
    let ready = plugin["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let field = |k: &str| {
        ready
            .and_then(|c| c[k].as_str())
            .unwrap_or_default()
            .to_string()
    };
    (field("status"), field("reason"))
}

/// Creates every tenant's Deployments (each needing its pinner's patch) and follows the
/// request log until each was patched.
fn create_and_pin(sim: &Sim, log: &mut RequestLog, t: usize) {
    let start = Instant::now();
    for i in 0..t {
        let ns = fx::namespace(i);
        for j in 0..DEPLOYMENTS_PER_TENANT {
            let status = harness::http_send(
                sim.port,
                "POST",
                &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
                "application/json",
                &fx::deployment(&ns, &fx::deployment_name(i, j)).to_string(),
            );
            assert_eq!(status, Some(201), "creating {ns}'s Deployment {j}");
        }
    }
    let want = t * DEPLOYMENTS_PER_TENANT;
    let mut tally = Tally::default();
    while tally.per_object.len() < want {
        assert!(
            start.elapsed() < LIMIT,
            "{} of {want} tenants' Deployments pinned",
            tally.per_object.len()
        );
        std::thread::sleep(Duration::from_millis(100));
        tally.add(&log.next());
    }
    println!(
        "Tenants: {want} Deployments created and pinned in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// `p99, p99, ...` of the rounds, in ms.
fn rounds(p99s: &[f64]) -> String {
    let shown: Vec<String> = p99s.iter().map(|p| format!("{p:.1}")).collect();
    shown.join("/")
}

/// [`paced`] `KUBEPLUG_E2E_TENANT_ROUNDS` times (default 3): the pooled latencies (sorted),
/// the mean rate reached and each round's p99 (ms).
fn paced_rounds(sim: &Sim, log: &mut RequestLog, t: usize) -> (Vec<Duration>, f64, Vec<f64>) {
    let n = crate::env_usize("KUBEPLUG_E2E_TENANT_ROUNDS", 3).max(1);
    let (mut pooled, mut rate, mut p99s) = (Vec::new(), 0.0, Vec::new());
    for _ in 0..n {
        let (latencies, r) = paced(sim, log, t);
        p99s.push(harness::percentile_ms(&latencies, 0.99));
        pooled.extend(latencies);
        rate += r / n as f64;
    }
    pooled.sort();
    (pooled, rate, p99s)
}

/// The quiet tenants' change→patch latencies: [`QUIET_RATE`] changes per second for
/// [`QUIET_SECONDS`], round-robin over the tenants (each Deployment changed at most once, so
/// at most T × [`DEPLOYMENTS_PER_TENANT`] changes); the latencies (sorted) and the rate
/// reached.
fn paced(sim: &Sim, log: &mut RequestLog, t: usize) -> (Vec<Duration>, f64) {
    log.next();
    let changes = (QUIET_RATE * QUIET_SECONDS).min(t * DEPLOYMENTS_PER_TENANT);
    let targets: Vec<(String, String)> = (0..changes)
        .map(|k| {
            let (i, j) = (k % t, k / t);
            (fx::namespace(i), fx::deployment_name(i, j))
        })
        .collect();
    let mut pending = Pending::new(targets.iter().map(|(_, name)| name.clone()));
    let mut unpinner = harness::Unpinner::new(sim.port);
    let period = Duration::from_secs(1) / QUIET_RATE as u32;
    let start = Instant::now();
    for (k, (ns, name)) in targets.iter().enumerate() {
        if let Some(wait) = (start + period * k as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        assert!(unpinner.unpin_in(ns, name), "the bench's patch failed");
        pending.add(&log.next());
    }
    let rate = changes as f64 / start.elapsed().as_secs_f64();
    pending.wait(log, Duration::from_millis(50));
    let mut out = pending.latencies;
    out.sort();
    (out, rate)
}

/// Waits until the noisy tenant's Plugins run and its looper (if shown) has spent a call's
/// whole budget.
fn wait_noisy_running(sim: &Sim, host: &Controllers, parts: noisy::Parts) {
    let start = Instant::now();
    loop {
        let reasons: Vec<(String, String)> = plugins(sim)
            .iter()
            .filter(|p| p["metadata"]["namespace"] == noisy::NAMESPACE)
            .map(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                (name.to_string(), ready_reason(p).1)
            })
            .collect();
        let running = reasons.iter().filter(|(_, r)| r == "Running").count();
        if running == parts.plugins() && (!parts.looper || looper_timeouts(host) > 0.0) {
            println!(
                "Tenants: the noisy tenant runs ({:.1} s)",
                start.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the noisy tenant never ran: {reasons:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The noisy looper's calls that ran out their budget, from the host's `/metrics`.
fn looper_timeouts(host: &Controllers) -> f64 {
    let Some(port) = host.status_port else {
        return 0.0;
    };
    let page = harness::http_get(port, "/metrics").unwrap_or_default();
    page.lines()
        .filter(|l| l.starts_with("kubeplug_reconcile_total{"))
        .filter(|l| l.contains("plugin=\"noisy/looper\"") && l.contains("result=\"timeout\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
