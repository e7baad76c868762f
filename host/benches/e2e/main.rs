//! End to end against what users would write instead: kubeplug running image-pinner as a
//! plugin, and a kube-rs `Controller` running the same image-pinner code compiled natively
//! (this bench binary re-executed as that controller), each as its own process against its
//! own `kubeplug sim` process loaded with the same Deployments (the ~6 KB fixture of
//! `tests/fixtures`, each needing one strategic patch).
//!
//! Measured for both, in the same run (issue 15):
//! 1. cold start until every one of `KUBEPLUG_E2E_OBJECTS` (default 10,000) Deployments is
//!    patched: wall time, CPU seconds, API requests and patches, from the sim's request log;
//! 2. no-op reconciles per second: a second process started on the converged objects, every
//!    key queued by its first list and none needing a write;
//! 3. change-to-patch latency p50/p99 from the sim's microsecond timestamps, idle (100 changes
//!    20 ms apart) and under load (changes paced at 1,000/s for 3 s; the rate reached is shown);
//! 4. RSS converged, and per cached object against a run with one object;
//! 5. ten controllers on `KUBEPLUG_E2E_TEN_OBJECTS` (default 1,000): one kubeplug with ten
//!    copies of the plugin against ten kube-rs processes: RSS and CPU summed, list and watch
//!    requests the API server saw;
//! 6. RSS per extra loaded plugin: kubeplug with 100 copies against one, on 10 objects;
//! 7. write conflicts: the controller's Deployment writes of phases 1 and 3 that the API
//!    server refused with 409 Conflict, per 10,000 writes (kubeplug fences each write with
//!    the resourceVersion the plugin decided on; kube-rs's patches carry none);
//! 8. the decision ledger's cost: phases 1 and 4 of kubeplug with its ledger and with
//!    `--no-ledger`, alternated off/on/on/off, medians compared (`ledger_cost.rs`;
//!    `KUBEPLUG_E2E_LEDGER` pairs, default 2, `0` skips it);
//! 9. many tenants on one host: T namespaces each with its own Plugin object, time until all
//!    are Ready, RSS per Plugin, and the quiet tenants' change-to-patch p99 beside a noisy
//!    tenant against alone (`tenants.rs`; `KUBEPLUG_E2E_TENANTS` tenants, default 50, `0`
//!    skips it).
//!
//! Every kubeplug process keeps its ledger in a state directory of its own under the bench's
//! scratch directory, never the user's.
//!
//! It ends with `e2e: throughput X x kube-rs, memory Y x ten kube-rs controllers, p99 Z ms,
//! noop N/s, load p99 R x kube-rs, conflicts C per 10,000 writes, ledger cost T % throughput,
//! M % memory, tenants T, ready S s, rss/plugin K KiB, isolation p99 I x alone`, where R is kubeplug's change-to-patch p99 under the paced load of phase 3 over
//! kube-rs's in the same run (below one: kubeplug answers faster under load), T the cold-start
//! throughput the ledger costs and M the converged RSS it adds, both against `--no-ledger`.
//! `KUBEPLUG_E2E_ONLY=kubeplug` skips the kube-rs runs, `KUBEPLUG_E2E_ONLY=ledger` runs
//! phase 8 alone, `KUBEPLUG_E2E_ONLY=tenants` phase 9; `KUBEPLUG_E2E_HOST_LOG=FILE` keeps kubeplug's log at info level (idle
//! changes answered after more than 100 ms are named on stderr, to be found there). Run with
//! `cargo bench -p kubeplug --bench e2e` after `make plugins`.
//!
//! Every sim is settled (the status of what it loaded written) before a controller starts. A
//! contender whose RSS passes `KUBEPLUG_E2E_RSS_CAP_MIB` (by default what the machine has
//! available less 2 GiB) is stopped and reported, not left to take the machine's memory:
//! `KUBEPLUG_E2E_OBJECTS=100000` needs about 16 GB for the sim alone.

mod baseline;
mod fixtures;
mod harness;
mod ledger_cost;
mod noisy_tenant;
mod tenant_fixtures;
mod tenants;

use harness::{LIMIT, Process, RequestLog, Sim};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(kubeconfig) = std::env::var(baseline::BASELINE_ENV) {
        baseline::run(&kubeconfig);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("KUBEPLUG_E2E_OBJECTS", 10_000).max(2);
    let ten_n = env_usize("KUBEPLUG_E2E_TEN_OBJECTS", 1_000).max(1);
    let only_kubeplug = std::env::var("KUBEPLUG_E2E_ONLY").is_ok_and(|v| v == "kubeplug");
    let only_ledger = std::env::var("KUBEPLUG_E2E_ONLY").is_ok_and(|v| v == "ledger");
    let tmp = tempfile::tempdir().unwrap();
    if std::env::var("KUBEPLUG_E2E_ONLY").is_ok_and(|v| v == "tenants") {
        let figures = tenants::measure(tmp.path(), tenants::tenants().max(1));
        println!("{}", figures.line());
        println!("e2e: {}", figures.summary());
        return;
    }
    let dir = Inputs {
        scratch: tmp.path(),
        objects: fixtures::write_objects(&tmp.path().join("objects"), n),
        one: fixtures::write_objects(&tmp.path().join("one"), 1),
        ten: fixtures::write_objects(&tmp.path().join("ten"), ten_n),
        few: fixtures::write_objects(&tmp.path().join("few"), PLUGIN_RSS_OBJECTS),
        plugins: fixtures::write_plugins(&tmp.path().join("plugins-1"), 1),
        plugins10: fixtures::write_plugins(&tmp.path().join("plugins-10"), 10),
        plugins100: fixtures::write_plugins(&tmp.path().join("plugins-100"), 100),
    };
    // The first kubeplug run compiles the plugin into the compile cache: measured apart, as
    // Cranelift's memory is not what a running host holds per object.
    if only_ledger {
        // The first run compiles the plugin into the compile cache: not one of the measured.
        rss_with_one_object(&dir, Contender::Kubeplug);
        let cost = ledger_cost::measure(&dir, n, ledger_cost::pairs().max(1));
        println!("e2e: {}", cost.summary());
        return;
    }
    let cold_compile = rss_with_one_object(&dir, Contender::Kubeplug);
    println!(
        "Kubeplug: RSS {cold_compile:.0} MiB with one object, right after compiling the plugin"
    );
    let kubeplug =
        single(&dir, n, Contender::Kubeplug).expect("kubeplug converged within the memory cap");
    let kubeplug_ten = ten(&dir, ten_n, Contender::Kubeplug);
    let per_plugin = rss_per_plugin(&dir);
    let ledger = match ledger_cost::pairs() {
        0 => None,
        pairs => Some(ledger_cost::measure(&dir, n, pairs)),
    };
    let tenants = match tenants::tenants() {
        0 => None,
        t => Some(tenants::measure(dir.scratch, t)),
    };
    let (kube_rs, kube_rs_ten) = if only_kubeplug {
        (None, None)
    } else {
        (
            single(&dir, n, Contender::KubeRs),
            Some(ten(&dir, ten_n, Contender::KubeRs)),
        )
    };
    report(
        n,
        ten_n,
        (&kubeplug, kube_rs.as_ref()),
        (&kubeplug_ten, kube_rs_ten.as_ref()),
        per_plugin,
        cold_compile,
        (ledger.as_ref(), tenants.as_ref()),
    );
}

/// Where a kubeplug process's log goes and at which level: `KUBEPLUG_E2E_HOST_LOG=FILE`
/// keeps it (info level) for diagnosis, else it is dropped (warn).
fn host_log() -> (Stdio, &'static str) {
    match std::env::var_os(HOST_LOG_ENV) {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("{HOST_LOG_ENV}={path:?}: {e}"));
            (Stdio::from(file), "info")
        }
        None => (Stdio::null(), "warn"),
    }
}

/// The bench's files, written once.
struct Inputs<'a> {
    scratch: &'a Path,
    objects: std::path::PathBuf,
    one: std::path::PathBuf,
    ten: std::path::PathBuf,
    few: std::path::PathBuf,
    plugins: std::path::PathBuf,
    plugins10: std::path::PathBuf,
    plugins100: std::path::PathBuf,
}

/// Objects in the sim when RSS per loaded plugin is measured.
const PLUGIN_RSS_OBJECTS: usize = 10;
/// Idle changes the latency is measured over.
const IDLE_CHANGES: usize = 100;
/// An idle change answered later than this is named on stderr.
const SLOW_IDLE: Duration = Duration::from_millis(100);
/// Where the host's log goes, when set (otherwise it is dropped).
const HOST_LOG_ENV: &str = "KUBEPLUG_E2E_HOST_LOG";
/// The paced change rate of the loaded latency phase, and how long it lasts.
const LOAD_RATE: usize = 1_000;
const LOAD_SECONDS: usize = 3;
const LOAD_WRITERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Contender {
    Kubeplug,
    KubeRs,
}

/// Whether kubeplug keeps its decision ledger (the default) or runs with `--no-ledger`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ledger {
    On,
    Off,
}

/// One contender's controllers (one process, or ten kube-rs ones), and kubeplug's status port
/// and state directory (its own, under the bench's scratch directory).
struct Controllers {
    processes: Vec<Process>,
    status_port: Option<u16>,
    state_dir: Option<std::path::PathBuf>,
}

impl Controllers {
    fn start(
        who: Contender,
        sim: &Sim,
        plugins: &Path,
        dir: &Inputs,
        kube_rs_count: usize,
        noop: Option<usize>,
    ) -> Controllers {
        Controllers::start_with(who, sim, plugins, dir, kube_rs_count, noop, Ledger::On)
    }

    /// [`Controllers::start`], kubeplug with its decision ledger or with `--no-ledger`.
    fn start_with(
        who: Contender,
        sim: &Sim,
        plugins: &Path,
        dir: &Inputs,
        kube_rs_count: usize,
        noop: Option<usize>,
        ledger: Ledger,
    ) -> Controllers {
        match who {
            Contender::Kubeplug => {
                let port = harness::free_port();
                let state_dir = harness::state_dir(dir.scratch);
                let (log, level) = host_log();
                let mut command = Command::new(harness::kubeplug_bin());
                command
                    .args(["run", "--watch=false", "--kubeconfig"])
                    .arg(&sim.kubeconfig)
                    .arg("--plugins")
                    .arg(plugins)
                    .args(["--listen", &format!("127.0.0.1:{port}")])
                    // Its own ledger, not the user's (~/.local/state/kubeplug), which a
                    // second host could not open while another holds it.
                    .arg("--state-dir")
                    .arg(&state_dir)
                    .env_remove("KUBEPLUG_NO_LEDGER")
                    .env("KUBEPLUG_CACHE_DIR", dir.scratch.join("cache"))
                    .env("KUBEPLUG_LOG", level)
                    .stdout(Stdio::null())
                    .stderr(log);
                if ledger == Ledger::Off {
                    command.arg("--no-ledger");
                }
                Controllers {
                    processes: vec![Process(command.spawn().unwrap())],
                    status_port: Some(port),
                    state_dir: Some(state_dir),
                }
            }
            Contender::KubeRs => {
                let processes = (0..kube_rs_count)
                    .map(|_| {
                        let mut command = Command::new(std::env::current_exe().unwrap());
                        command
                            .env(baseline::BASELINE_ENV, &sim.kubeconfig)
                            .stdout(Stdio::piped())
                            .stderr(Stdio::null());
                        if let Some(count) = noop {
                            command.env(baseline::NOOP_ENV, count.to_string());
                        }
                        Process(command.spawn().unwrap())
                    })
                    .collect();
                Controllers {
                    processes,
                    status_port: None,
                    state_dir: None,
                }
            }
        }
    }

    fn rss_mib(&self) -> f64 {
        self.processes
            .iter()
            .map(|p| harness::rss_mib(p.pid()))
            .sum()
    }

    fn cpu_seconds(&self) -> f64 {
        self.processes
            .iter()
            .map(|p| harness::cpu_seconds(p.pid()))
            .sum()
    }

    /// The objects in kubeplug's cache, from its `/metrics`.
    fn cache_objects(&self) -> Option<f64> {
        let page = harness::http_get(self.status_port?, "/metrics")?;
        Some(harness::metric_sum(&page, "kubeplug_cache_objects"))
    }

    /// kubeplug's reconciles so far, from its `/metrics`.
    fn reconciles(&self) -> Option<f64> {
        self.metric("kubeplug_reconcile_total")
    }

    /// The sum of one of kubeplug's counters, from its `/metrics`.
    fn metric(&self, name: &str) -> Option<f64> {
        let page = harness::http_get(self.status_port?, "/metrics")?;
        Some(harness::metric_sum(&page, name))
    }
}

/// What the request log showed of the controllers' Deployment patches.
#[derive(Default)]
struct Tally {
    /// The controllers' requests, not the bench's own.
    requests: usize,
    patches: usize,
    failed: usize,
    per_object: HashMap<String, usize>,
    /// When kubeplug's cache first held every object (its list done), from the start.
    listed: Option<Duration>,
}

impl Tally {
    fn add(&mut self, records: &[serde_json::Value]) {
        for r in records {
            if !harness::by_bench(r) {
                self.requests += 1;
            }
            if let Some((name, ok, false)) = harness::deployment_patch(r) {
                self.patches += 1;
                match ok {
                    true => *self.per_object.entry(name.to_string()).or_default() += 1,
                    false => self.failed += 1,
                }
            }
        }
    }

    /// Follows the log until `n` objects were patched, or until the controllers' RSS passes
    /// `cap_mib` (then `Err` with the RSS reached): a controller that would take the machine's
    /// memory is stopped, not left to take the sim down with it.
    fn until_patched_within(
        &mut self,
        log: &mut RequestLog,
        n: usize,
        who: Contender,
        controllers: &Controllers,
        cap_mib: f64,
    ) -> Result<(), f64> {
        let start = Instant::now();
        while self.per_object.len() < n {
            assert!(
                start.elapsed() < LIMIT,
                "{who:?}: {} of {n} patched",
                self.per_object.len()
            );
            std::thread::sleep(Duration::from_millis(100));
            self.add(&log.next());
            if self.listed.is_none() && controllers.cache_objects().is_some_and(|c| c >= n as f64) {
                self.listed = Some(start.elapsed());
            }
            let rss = controllers.rss_mib();
            if rss > cap_mib {
                return Err(rss);
            }
        }
        Ok(())
    }

    fn twice(&self) -> usize {
        self.per_object.values().filter(|&&c| c > 1).count()
    }
}

/// One controller on N objects: phases 1 to 4.
struct Single {
    wall: Duration,
    cpu: f64,
    tally: Tally,
    rss_mib: f64,
    rss_one_mib: f64,
    idle: Vec<Duration>,
    loaded: Vec<Duration>,
    load_rate: f64,
    noop_rate: f64,
    writes: Writes,
    /// One converged object's JSON as the API server serves it, and without managedFields
    /// (which kubeplug's cache drops), in bytes.
    served_bytes: (usize, usize),
}

/// The controller's Deployment writes in the request log, and those refused with 409.
#[derive(Default)]
struct Writes {
    sent: usize,
    conflicts: usize,
}

impl Writes {
    /// Counts the writes of every record but the bench's own.
    fn of(records: &[serde_json::Value]) -> Writes {
        let mut writes = Writes::default();
        for r in records {
            let write = matches!(
                r["verb"].as_str(),
                Some("patch" | "update" | "create" | "delete")
            );
            if write && r["resource"] == "deployments" && !harness::by_bench(r) {
                writes.sent += 1;
                if r["status"] == 409 {
                    writes.conflicts += 1;
                }
            }
        }
        writes
    }

    /// Conflicts per 10,000 writes.
    fn per_10k(&self) -> f64 {
        self.conflicts as f64 * 10_000.0 / self.sent.max(1) as f64
    }
}

/// The RSS a contender may reach: `KUBEPLUG_E2E_RSS_CAP_MIB`, or what the machine has
/// available when it starts less 2 GiB (the sim holds about 150 KB per object; kube-rs's
/// controller took 266 KB per object at 10,000, with every reconcile running at once).
fn rss_cap_mib() -> f64 {
    if let Ok(cap) = std::env::var("KUBEPLUG_E2E_RSS_CAP_MIB") {
        return cap
            .parse()
            .expect("KUBEPLUG_E2E_RSS_CAP_MIB is a number of MiB");
    }
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(f64::INFINITY);
    (available_kib / 1024.0 - 2048.0).max(1024.0)
}

/// Phases 1 to 4 of one contender; `None` when it passed the memory cap before converging.
fn single(dir: &Inputs, n: usize, who: Contender) -> Option<Single> {
    let sim = Sim::start(&dir.objects, dir.scratch);
    let mut log = sim.log_from_start();
    let cap = rss_cap_mib();
    let t0 = Instant::now();
    let controller = Controllers::start(who, &sim, &dir.plugins, dir, 1, None);
    let mut tally = Tally::default();
    if let Err(rss) = tally.until_patched_within(&mut log, n, who, &controller, cap) {
        println!(
            "{who:?}: stopped at RSS {rss:.0} MiB (cap {cap:.0} MiB) after {:.1?}, {} of {n} objects patched, {} patches sent",
            t0.elapsed(),
            tally.per_object.len(),
            tally.patches
        );
        return None;
    }
    let wall = t0.elapsed();
    let cpu = controller.cpu_seconds();
    // Late patches (a reconcile of a stale cache) count too.
    std::thread::sleep(Duration::from_secs(3));
    tally.add(&log.next());
    let rss_mib = controller.rss_mib();
    let served_bytes = served_bytes(&sim);
    println!(
        "{who:?}: converged in {wall:.2?}, {cpu:.1} CPU s, {} requests, {} patches ({} refused, {} objects patched more than once), RSS {rss_mib:.0} MiB",
        tally.requests,
        tally.patches,
        tally.failed,
        tally.twice()
    );
    if let Some(listed) = tally.listed {
        println!("{who:?}: its cache held all {n} objects {listed:.2?} after start");
    }
    let idle = idle_latencies(&sim, &mut log, n);
    let (loaded, load_rate) = loaded_latencies(&sim, &mut log, n);
    println!(
        "{who:?}: change to patch idle p50 {:.1} ms p99 {:.1} ms; at {load_rate:.0} changes/s p50 {:.1} ms p99 {:.1} ms",
        harness::percentile_ms(&idle, 0.5),
        harness::percentile_ms(&idle, 0.99),
        harness::percentile_ms(&loaded, 0.5),
        harness::percentile_ms(&loaded, 0.99),
    );
    // Every write of the phases above, from the whole log (the sim keeps 1,000,000 records).
    let writes = Writes::of(&sim.log_from_start().next());
    println!(
        "{who:?}: {} Deployment writes, {} refused with 409 Conflict ({:.1} per 10,000 writes)",
        writes.sent,
        writes.conflicts,
        writes.per_10k()
    );
    drop(controller);
    let noop_rate = noop_rate(dir, &sim, n, who);
    println!("{who:?}: {noop_rate:.0} no-op reconciles/s");
    drop(sim);
    let rss_one_mib = rss_with_one_object(dir, who);
    Some(Single {
        wall,
        cpu,
        tally,
        rss_mib,
        rss_one_mib,
        idle,
        loaded,
        load_rate,
        noop_rate,
        writes,
        served_bytes,
    })
}

/// The size of one converged Deployment as served, with and without managedFields.
fn served_bytes(sim: &Sim) -> (usize, usize) {
    let path = format!(
        "/apis/apps/v1/namespaces/{}/deployments/d00000",
        harness::NAMESPACE
    );
    let body = harness::http_get(sim.port, &path).expect("the sim serves d00000");
    let mut object: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let served = object.to_string().len();
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    (served, object.to_string().len())
}

/// Matches the bench's changes to the controller's patches that follow them. The log is in
/// the order requests were answered, while each record's time is when it arrived: a
/// controller's patch can be logged before the change it answers (it arrives after the
/// change was stored but may be answered first), so patches are matched by time, in
/// whichever order they are read.
struct Pending {
    changed: HashMap<String, Option<k8s_openapi::jiff::Timestamp>>,
    /// The latest controller patch of each name seen while its change was not yet read.
    early: HashMap<String, k8s_openapi::jiff::Timestamp>,
    latencies: Vec<Duration>,
}

impl Pending {
    fn new<I: IntoIterator<Item = String>>(names: I) -> Pending {
        Pending {
            changed: names.into_iter().map(|n| (n, None)).collect(),
            early: HashMap::new(),
            latencies: Vec::new(),
        }
    }

    fn add(&mut self, records: &[serde_json::Value]) {
        for r in records {
            let Some((name, true, by_bench)) = harness::deployment_patch(r) else {
                continue;
            };
            let Some(changed) = self.changed.get_mut(name) else {
                continue;
            };
            let Some(at) = harness::timestamp(r) else {
                continue;
            };
            let fixed = match (by_bench, *changed) {
                (true, None) => {
                    *changed = Some(at);
                    match self.early.remove(name) {
                        Some(fixed) if fixed >= at => (at, fixed),
                        _ => continue,
                    }
                }
                (false, Some(change)) if at >= change => (change, at),
                (false, None) => {
                    self.early.insert(name.to_string(), at);
                    continue;
                }
                _ => continue,
            };
            let micros = fixed.1.duration_since(fixed.0).as_micros().max(0) as u64;
            self.latencies.push(Duration::from_micros(micros));
            self.changed.remove(name);
        }
    }

    /// Follows the log until every change was patched back.
    fn wait(&mut self, log: &mut RequestLog, poll: Duration) {
        let start = Instant::now();
        while !self.changed.is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{} changes never patched back",
                self.changed.len()
            );
            std::thread::sleep(poll);
            self.add(&log.next());
        }
    }
}

/// Idle change-to-patch latency: one Deployment at a time set back to alpine, 20 ms apart.
/// A change answered later than [`SLOW_IDLE`] is named, with when it was made, to be found
/// in the host's log (`KUBEPLUG_E2E_HOST_LOG`).
fn idle_latencies(sim: &Sim, log: &mut RequestLog, n: usize) -> Vec<Duration> {
    log.next();
    let mut out = Vec::new();
    let mut unpinner = harness::Unpinner::new(sim.port);
    for i in 0..IDLE_CHANGES {
        let name = format!("d{:05}", (i * 97) % n);
        let mut pending = Pending::new([name.clone()]);
        let at = std::time::SystemTime::now();
        assert!(unpinner.unpin(&name), "the bench's patch failed");
        pending.wait(log, Duration::from_millis(2));
        if let Some(slow) = pending.latencies.iter().find(|l| **l > SLOW_IDLE) {
            let at = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            eprintln!(
                "  slow idle change: {name} (changed at {:.3} s since the epoch) answered after {slow:?}",
                at.as_secs_f64()
            );
        }
        out.extend(pending.latencies);
        std::thread::sleep(Duration::from_millis(20));
    }
    out.sort();
    out
}

/// Change-to-patch latency under load: changes paced at [`LOAD_RATE`] per second by
/// [`LOAD_WRITERS`] threads, each to another Deployment; returns the latencies and the rate
/// the API server let the writers reach.
fn loaded_latencies(sim: &Sim, log: &mut RequestLog, n: usize) -> (Vec<Duration>, f64) {
    log.next();
    let changes = (LOAD_RATE * LOAD_SECONDS).min(n);
    // 7919 is prime, so the first `n` multiples name distinct Deployments.
    let names: Vec<String> = (0..changes)
        .map(|i| format!("d{:05}", (i * 7919) % n))
        .collect();
    let mut pending = Pending::new(names.iter().cloned());
    let start = Instant::now();
    let period = Duration::from_secs(1) / LOAD_RATE as u32;
    std::thread::scope(|s| {
        for w in 0..LOAD_WRITERS {
            let names = &names;
            let port = sim.port;
            s.spawn(move || {
                let mut unpinner = harness::Unpinner::new(port);
                for i in (w..names.len()).step_by(LOAD_WRITERS) {
                    let due = start + period * i as u32;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    assert!(unpinner.unpin(&names[i]), "the bench's patch failed");
                }
            });
        }
    });
    let rate = changes as f64 / start.elapsed().as_secs_f64();
    pending.wait(log, Duration::from_millis(50));
    let mut out = pending.latencies;
    out.sort();
    (out, rate)
}

/// A second controller process started on converged objects: every key comes from its first
/// list and needs no write. The rate is between its first and its n-th reconcile.
fn noop_rate(dir: &Inputs, sim: &Sim, n: usize, who: Contender) -> f64 {
    let controller = Controllers::start(who, sim, &dir.plugins, dir, 1, Some(n));
    let start = Instant::now();
    match who {
        Contender::Kubeplug => {
            let mut first: Option<(Instant, f64)> = None;
            loop {
                assert!(
                    start.elapsed() < LIMIT,
                    "kubeplug: no-op reconciles stalled"
                );
                std::thread::sleep(Duration::from_millis(5));
                let Some(count) = controller.reconciles() else {
                    continue;
                };
                let now = Instant::now();
                match first {
                    None if count > 0.0 => first = Some((now, count)),
                    Some((t, c)) if count >= n as f64 => {
                        return (count - c) / now.duration_since(t).as_secs_f64();
                    }
                    _ => {}
                }
            }
        }
        Contender::KubeRs => {
            use std::io::BufRead;
            let mut processes = controller.processes;
            let stdout = processes[0].0.stdout.take().expect("piped");
            let line = std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find(|l| l.starts_with("noop "))
                .expect("the kube-rs controller reports its no-op reconciles");
            let fields: Vec<f64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            (fields[0] - 1.0) / fields[1]
        }
    }
}

/// RSS of the controller with one object cached: what per-object RSS is counted from.
fn rss_with_one_object(dir: &Inputs, who: Contender) -> f64 {
    let sim = Sim::start(&dir.one, dir.scratch);
    let mut log = sim.log_from_start();
    let controller = Controllers::start(who, &sim, &dir.plugins, dir, 1, None);
    Tally::default()
        .until_patched_within(&mut log, 1, who, &controller, f64::INFINITY)
        .expect("no cap");
    std::thread::sleep(Duration::from_secs(3));
    controller.rss_mib()
}

/// Ten controllers of Deployments: phase 5.
struct Ten {
    rss_mib: f64,
    cpu: f64,
    lists: usize,
    watches: usize,
}

fn ten(dir: &Inputs, n: usize, who: Contender) -> Ten {
    let sim = Sim::start(&dir.ten, dir.scratch);
    let mut log = sim.log_from_start();
    let controllers = Controllers::start(who, &sim, &dir.plugins10, dir, 10, None);
    let mut tally = Tally::default();
    tally
        .until_patched_within(&mut log, n, who, &controllers, f64::INFINITY)
        .expect("no cap");
    // Every controller has listed and reconciled everything: wait until quiet.
    let mut quiet_since = Instant::now();
    let start = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(3) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(200));
        let records = log.next();
        if records.iter().any(|r| r["verb"] != "watch") {
            quiet_since = Instant::now();
        }
        tally.add(&records);
    }
    let all = sim.log_from_start().next();
    let count = |verb: &str| {
        all.iter()
            .filter(|r| {
                r["verb"] == verb && r["resource"] == "deployments" && !harness::by_bench(r)
            })
            .count()
    };
    let figures = Ten {
        rss_mib: controllers.rss_mib(),
        cpu: controllers.cpu_seconds(),
        lists: count("list"),
        watches: count("watch"),
    };
    println!(
        "{who:?} x10: RSS {:.0} MiB, {:.1} CPU s, {} lists and {} watches of Deployments, {} patches",
        figures.rss_mib, figures.cpu, figures.lists, figures.watches, tally.patches
    );
    figures
}

/// RSS per extra loaded plugin: kubeplug with 100 copies of image-pinner against one copy,
/// each on the same few objects once every copy has reconciled them all (phase 6).
fn rss_per_plugin(dir: &Inputs) -> f64 {
    let rss = |plugins: &Path, count: usize| {
        let sim = Sim::start(&dir.few, dir.scratch);
        let controller = Controllers::start(Contender::Kubeplug, &sim, plugins, dir, 1, None);
        let start = Instant::now();
        let want = (count * PLUGIN_RSS_OBJECTS) as f64;
        while controller.reconciles().is_none_or(|c| c < want) {
            assert!(
                start.elapsed() < LIMIT,
                "{count} plugins never reconciled all"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(3));
        controller.rss_mib()
    };
    let one = rss(&dir.plugins, 1);
    let hundred = rss(&dir.plugins100, 100);
    println!("Kubeplug: RSS {one:.0} MiB with one plugin, {hundred:.0} MiB with 100");
    (hundred - one) / 99.0
}

fn report(
    n: usize,
    ten_n: usize,
    (kp, kr): (&Single, Option<&Single>),
    (kp10, kr10): (&Ten, Option<&Ten>),
    per_plugin_mib: f64,
    cold_compile_mib: f64,
    (ledger, tenants): (Option<&ledger_cost::Cost>, Option<&tenants::Figures>),
) {
    println!();
    println!(
        "e2e: {n} Deployments of {} bytes, each needing one strategic patch",
        fixtures::fixture().to_string().len()
    );
    println!(
        "{:<44} {:>14} {:>14} {:>8}",
        "figure", "kubeplug", "kube-rs", "ratio"
    );
    let row = |name: &str, a: f64, b: Option<f64>, unit: &str| match b {
        Some(b) => println!(
            "{name:<44} {a:>12.1}{unit:>2} {b:>12.1}{unit:>2} {:>7.2}x",
            a / b
        ),
        None => println!("{name:<44} {a:>12.1}{unit:>2} {:>14} {:>8}", "-", "-"),
    };
    let per_object = |s: &Single| (s.rss_mib - s.rss_one_mib) * 1024.0 / (n - 1) as f64;
    row(
        "cold start to converged",
        kp.wall.as_secs_f64(),
        kr.map(|s| s.wall.as_secs_f64()),
        "s",
    );
    row("CPU seconds", kp.cpu, kr.map(|s| s.cpu), "s");
    row(
        "API requests",
        kp.tally.requests as f64,
        kr.map(|s| s.tally.requests as f64),
        "",
    );
    row(
        "patches sent",
        kp.tally.patches as f64,
        kr.map(|s| s.tally.patches as f64),
        "",
    );
    row(
        "patches refused",
        kp.tally.failed as f64,
        kr.map(|s| s.tally.failed as f64),
        "",
    );
    row(
        "objects patched twice or more",
        kp.tally.twice() as f64,
        kr.map(|s| s.tally.twice() as f64),
        "",
    );
    row(
        "conflicts (409) per 10,000 writes",
        kp.writes.per_10k(),
        kr.map(|s| s.writes.per_10k()),
        "",
    );
    row(
        "no-op reconciles per second",
        kp.noop_rate,
        kr.map(|s| s.noop_rate),
        "",
    );
    row(
        "change to patch p50, idle",
        harness::percentile_ms(&kp.idle, 0.5),
        kr.map(|s| harness::percentile_ms(&s.idle, 0.5)),
        "ms",
    );
    row(
        "change to patch p99, idle",
        harness::percentile_ms(&kp.idle, 0.99),
        kr.map(|s| harness::percentile_ms(&s.idle, 0.99)),
        "ms",
    );
    // Of 100 changes the p99 is the second slowest: the slowest is shown too.
    row(
        "change to patch max, idle",
        harness::percentile_ms(&kp.idle, 1.0),
        kr.map(|s| harness::percentile_ms(&s.idle, 1.0)),
        "ms",
    );
    row(
        "changes per second reached (1,000 asked)",
        kp.load_rate,
        kr.map(|s| s.load_rate),
        "",
    );
    row(
        "change to patch p50, loaded",
        harness::percentile_ms(&kp.loaded, 0.5),
        kr.map(|s| harness::percentile_ms(&s.loaded, 0.5)),
        "ms",
    );
    row(
        "change to patch p99, loaded",
        harness::percentile_ms(&kp.loaded, 0.99),
        kr.map(|s| harness::percentile_ms(&s.loaded, 0.99)),
        "ms",
    );
    row("RSS converged", kp.rss_mib, kr.map(|s| s.rss_mib), "Mi");
    row(
        "RSS with one object",
        kp.rss_one_mib,
        kr.map(|s| s.rss_one_mib),
        "Mi",
    );
    row(
        "RSS with one object, compile cache cold",
        cold_compile_mib,
        None,
        "Mi",
    );
    row(
        "RSS per extra cached object",
        per_object(kp),
        kr.map(per_object),
        "Ki",
    );
    let json_mib = |bytes: usize| (bytes * n) as f64 / (1024.0 * 1024.0);
    let (served, stripped) = kp.served_bytes;
    row(
        &format!("RSS converged / objects' JSON ({served} B each)"),
        kp.rss_mib / json_mib(served),
        kr.map(|s| s.rss_mib / json_mib(served)),
        "x",
    );
    row(
        &format!("RSS converged / without managedFields ({stripped} B)"),
        kp.rss_mib / json_mib(stripped),
        kr.map(|s| s.rss_mib / json_mib(stripped)),
        "x",
    );
    row(
        &format!("ten controllers on {ten_n}: RSS"),
        kp10.rss_mib,
        kr10.map(|t| t.rss_mib),
        "Mi",
    );
    row(
        "ten controllers: CPU seconds",
        kp10.cpu,
        kr10.map(|t| t.cpu),
        "s",
    );
    row(
        "ten controllers: lists of Deployments",
        kp10.lists as f64,
        kr10.map(|t| t.lists as f64),
        "",
    );
    row(
        "ten controllers: watches of Deployments",
        kp10.watches as f64,
        kr10.map(|t| t.watches as f64),
        "",
    );
    row(
        "RSS per extra loaded plugin (100 loaded)",
        per_plugin_mib,
        None,
        "Mi",
    );
    if let Some(cost) = ledger {
        println!(
            "{:<44} {:>14} {:>14} {:>8}",
            format!(
                "ledger, medians of {} runs ({})",
                cost.on.len(),
                cost.order()
            ),
            "with ledger",
            "--no-ledger",
            "ratio"
        );
        let medians = |figure: fn(&ledger_cost::Run) -> f64| {
            let (on, off) = cost.medians(figure);
            (on, Some(off))
        };
        let (on, off) = medians(|r| r.wall.as_secs_f64());
        row("ledger: cold start to converged", on, off, "s");
        let (on, off) = medians(|r| r.cpu);
        row("ledger: CPU seconds", on, off, "s");
        let (on, off) = medians(|r| r.rss_mib);
        row("ledger: RSS converged", on, off, "Mi");
        let (on, _) = medians(|r| r.written);
        row("ledger: entries written", on, None, "");
        let (on, _) = medians(|r| r.dropped);
        row("ledger: entries dropped", on, None, "");
        let (on, _) = medians(|r| r.file_mib);
        row("ledger: file size", on, None, "Mi");
    }
    if let Some(t) = tenants {
        println!("{}", t.line());
    }
    let ratio = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    let tenants = tenants.map_or("tenants n/a".to_string(), tenants::Figures::summary);
    let ledger_cost = ledger.map_or("ledger cost n/a".to_string(), |c| {
        format!(
            "ledger cost {:.1} % throughput, {:.1} % memory",
            c.throughput_percent(),
            c.memory_percent()
        )
    });
    println!(
        "e2e: throughput {} x kube-rs, memory {} x ten kube-rs controllers, p99 {:.1} ms, noop {:.0}/s, load p99 {} x kube-rs, conflicts {:.1} per 10,000 writes ({} of {}), {ledger_cost}, {tenants}",
        ratio(kr.map(|s| s.wall.as_secs_f64() / kp.wall.as_secs_f64())),
        ratio(kr10.map(|t| kp10.rss_mib / t.rss_mib)),
        harness::percentile_ms(&kp.idle, 0.99),
        kp.noop_rate,
        ratio(kr.map(|s| {
            harness::percentile_ms(&kp.loaded, 0.99) / harness::percentile_ms(&s.loaded, 0.99)
        })),
        kp.writes.per_10k(),
        kp.writes.conflicts,
        kp.writes.sent
    );
}
