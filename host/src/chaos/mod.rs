//! `kubeplug chaos`: the host against a fault-injecting API server. For each schedule of a
//! seed: an embedded sim with the seed controllers' kinds, hosts running the four seed
//! plugins as `kubeplug run` processes (one, or two sharded replicas), a workload changing
//! specs steadily while a random fault schedule is active, a host killed (SIGKILL) and
//! started again and a replica paused (SIGSTOP) and resumed at random points; then quiet,
//! and the invariants checked against a fault-free run of the same workload (issue 36),
//! among them the write bound ([`write_bound`]): every host write of a schedule beyond the
//! changes the fault-free run needed per object is explained by a fault, a retry or a stale
//! view the schedule made, and the fault-free run sends no no-op or refused write.

mod host_process;
pub mod invariants;
mod live;
mod plugin_set;
pub mod report;
mod rng;
pub mod schedule;
pub mod snapshot;
pub mod workload;
mod write_action;
pub mod write_bound;

pub use host_process::LEASE;
pub use plugin_set::{PluginChoice, PluginSet};
pub use report::{Outcome, Report, Violation, Writes};
pub use schedule::FaultPlan;
pub use workload::{Expected, Workload};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use host_process::{HostProcess, HostSpec};
use kubeplug_sim::Sim;
use snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use write_bound::{Disturbance, HostWrite};

/// The Rust seed plugins, from the plugins directory, under their sample policies (the
/// fault-free run's set; schedules run them or their ports, see [`PluginChoice`]).
pub const SEED_PLUGINS: [&str; 4] = [
    "image-pinner",
    "change-logger",
    "sample-controller",
    "customcluster",
];

const CRDS: [&str; 2] = [
    include_str!("../../../plugins/sample-controller/crd.yaml"),
    include_str!("../../../plugins/customcluster/crd.yaml"),
];

/// Verbs that change something.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// How a chaos run goes.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Seeds the workload and, with each schedule's index, its faults and restart.
    pub seed: u64,
    /// How many schedules (indexes `0..schedules`).
    pub schedules: u64,
    /// Run only this schedule (to reproduce a violation).
    pub only: Option<u64>,
    /// Where the seed plugins' `.wasm` files are (`make plugins` puts them in target/plugins).
    pub plugins: PathBuf,
    /// Where compiled plugins are cached (`None`: compiled at every host start).
    pub compile_cache: Option<PathBuf>,
    /// How long the workload writes (faults are active meanwhile).
    pub window: Duration,
    /// A run is quiet after this long without a host write.
    pub quiet: Duration,
    /// The most a run waits, after its workload, for quiet and for its invariants to hold.
    pub settle: Duration,
    /// The hosts' watch timeout (`kubeplug run --watch-timeout-seconds`): a stalled watch is
    /// abandoned after it plus 5 s, so it must leave room within `settle`.
    pub watch_timeout: Duration,
    /// Which plugins each schedule loads: the Rust seed plugins, their ports, or both
    /// alternately.
    pub plugin_sets: PluginChoice,
    /// How many schedules run at once (each with its own sim and hosts; the fault-free run
    /// runs first, alone).
    pub jobs: usize,
    /// The `kubeplug` binary the hosts run from (`kubeplug run` processes).
    pub binary: PathBuf,
}

impl Default for ChaosConfig {
    fn default() -> Self {
        ChaosConfig {
            seed: 1,
            schedules: 10,
            only: None,
            plugins: PathBuf::from("target/plugins"),
            compile_cache: crate::plugin::default_cache_dir(),
            window: Duration::from_secs(3),
            quiet: Duration::from_millis(1500),
            settle: Duration::from_secs(20),
            watch_timeout: Duration::from_secs(5),
            plugin_sets: PluginChoice::default(),
            jobs: 2,
            binary: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("kubeplug")),
        }
    }
}

/// Runs the fault-free run and every schedule; the report says what went wrong where.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<Report> {
    let dir = plugin_dir(&config.plugins, PluginSet::Rust)?;
    let workload = Workload::generate(config.seed, config.window);
    let expected = workload.expected();
    tracing::info!(
        seed = config.seed,
        steps = workload.steps.len(),
        "chaos: the fault-free run"
    );
    let (mut baseline, snapshot, problems, log) =
        run_one(config, dir.path(), &workload, None).await?;
    baseline.violations = invariants::check(&snapshot, &expected, None, &problems);
    baseline.bound = write_bound::check(&log.writes, None, &[]);
    baseline
        .violations
        .extend(baseline.bound.violations.iter().cloned());
    // How many changes an object needs varies a little with timing even without faults (a
    // status reporting how many of its children it saw so far): the fault-free run runs
    // twice, and each object needs the larger of its two counts.
    let (_, _, _, again) = run_one(config, dir.path(), &workload, None).await?;
    let mut needed = write_bound::needed(&log.writes);
    for (object, changes) in write_bound::needed(&again.writes) {
        let n = needed.entry(object).or_default();
        *n = (*n).max(changes);
    }
    tracing::debug!(?needed, "chaos: the changes the fault-free runs needed");
    let needed = &needed;
    let reference = snapshot.comparable();
    let indexes: Vec<u64> = match config.only {
        Some(i) => vec![i],
        None => (0..config.schedules).collect(),
    };
    // The ports' directory, made once before the schedules run concurrently, if any needs it.
    let ports_dir = match indexes
        .iter()
        .any(|i| config.plugin_sets.for_schedule(*i) == PluginSet::Ports)
    {
        true => Some(plugin_dir(&config.plugins, PluginSet::Ports)?),
        false => None,
    };
    let (rust_dir, ports_dir) = (dir.path(), ports_dir.as_ref().map(|d| d.path()));
    let (workload, expected, reference) = (&workload, &expected, &reference);
    let schedule = |index: u64| async move {
        let plan = FaultPlan::generate(config.seed, index, config.window);
        tracing::info!(seed = config.seed, schedule = index, faults = %plan.describe(), "chaos: a schedule");
        let set = config.plugin_sets.for_schedule(index);
        let dir = match set {
            PluginSet::Rust => rust_dir,
            PluginSet::Ports => ports_dir.expect("made above for every ports schedule"),
        };
        let (mut outcome, snapshot, problems, log) =
            run_one(config, dir, workload, Some((index, &plan))).await?;
        outcome.plugins = set;
        outcome.violations = invariants::check(&snapshot, expected, Some(reference), &problems);
        outcome.bound = tracing::debug_span!("bound", schedule = index)
            .in_scope(|| write_bound::check(&log.writes, Some(needed), &log.disturbances));
        outcome
            .violations
            .extend(outcome.bound.violations.iter().cloned());
        tracing::info!(
            seed = config.seed,
            schedule = index,
            violations = outcome.violations.len(),
            faults = outcome.faults,
            "chaos: schedule done"
        );
        // Said as they happen: a long run stopped early still shows what broke.
        for what in &outcome.violations {
            tracing::warn!(
                seed = config.seed,
                schedule = index,
                "chaos: violation: {what}"
            );
        }
        anyhow::Ok(outcome)
    };
    // `buffered` runs up to `jobs` schedules at once and yields them in index order.
    let schedules: Vec<Outcome> = futures::stream::iter(indexes)
        .map(schedule)
        .buffered(config.jobs.max(1))
        .try_collect()
        .await?;
    Ok(Report {
        seed: config.seed,
        baseline,
        schedules,
    })
}

/// A private plugins directory with `set`'s plugins and their policies (the plugins
/// directory holds others too).
fn plugin_dir(plugins: &Path, set: PluginSet) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("kubeplug-chaos-")
        .tempdir()?;
    set.install(plugins, dir.path())?;
    Ok(dir)
}

/// How long a replica paused past its Lease may explain writes after it resumed: measured
/// on seed 1's schedules, up to 8.6 s (three Leases).
const PAST_LEASE_HORIZON: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// A run's host writes and what disturbed the hosts' views meanwhile.
struct WriteLog {
    writes: Vec<HostWrite>,
    disturbances: Vec<Disturbance>,
}

/// Starts host `n`, starting it again (as a pod would be restarted) while starting fails.
async fn start_host(spec: &HostSpec, n: u64) -> anyhow::Result<HostProcess> {
    let mut tries = 0;
    loop {
        match HostProcess::start(n, spec).await {
            Ok(host) => return Ok(host),
            Err(err) if tries < 10 => {
                tracing::warn!(
                    host = n,
                    "chaos: the host did not start, starting it again: {err:#}"
                );
                tries += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(err) => return Err(err.context("the host did not start in 10 tries")),
        }
    }
}

/// The hosts' writes in the request log, but for the Lease renewals of sharded replicas
/// (steady, and no reconcile's doing).
fn host_writes(sim: &Sim) -> Writes {
    let mut writes = Writes::default();
    for r in sim.requests().records() {
        if r.user_agent.contains(schedule::HOST_AGENT)
            && WRITES.contains(&r.verb.as_str())
            && r.resource != "leases"
        {
            writes.total += 1;
            let resource = match &r.subresource {
                Some(sub) => format!("{}/{sub}", r.resource),
                None => r.resource.clone(),
            };
            *writes.by_resource.entry(resource).or_default() += 1;
        }
    }
    writes
}

/// What the hosts say about their plugins: the problems of all, and the keys still queued.
async fn plugin_state(hosts: &[&HostProcess], wanted: &[&str]) -> (Vec<String>, u64) {
    let mut problems = Vec::new();
    let mut queued = 0;
    for host in hosts {
        match host.plugins(wanted).await {
            Ok(state) => {
                problems.extend(state.problems);
                queued += state.queued;
            }
            Err(err) => problems.push(format!("chaos-host-{}: GET /plugins failed: {err}", host.n)),
        }
    }
    (problems, queued)
}

/// Waits (at most until `deadline`) until the hosts have not written for `quiet` and their
/// queues are empty: a host slowed by the machine's load still has keys queued, so quiet is
/// a condition on the hosts, not only an interval.
async fn quiet(sim: &Sim, hosts: &[&HostProcess], quiet: Duration, deadline: Instant) {
    let mut seen = host_writes(sim).total;
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = host_writes(sim).total;
        if now != seen {
            seen = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            if plugin_state(hosts, &[]).await.1 == 0 {
                return;
            }
            since = Instant::now();
        }
    }
}

/// One run: the fault-free one (`plan` `None`) or schedule `index`. Returns its outcome
/// (without violations), the final objects, what is wrong beyond them (plugins left
/// failed, endpoints that no longer answer) and its writes with what disturbed them.
async fn run_one(
    config: &ChaosConfig,
    dir: &Path,
    workload: &Workload,
    plan: Option<(u64, &FaultPlan)>,
) -> anyhow::Result<(Outcome, Snapshot, Vec<String>, WriteLog)> {
    let sim = CRDS
        .iter()
        .fold(Sim::builder(), |b, crd| b.manifest(*crd))
        .auto_create_namespaces(true)
        .status_delay(Duration::from_millis(100))
        .request_log_capacity(200_000)
        .record_write_bodies(true)
        .start()
        .await
        .context("cannot start the embedded API server")?;
    sim.apply_yaml(&workload.initial)?;
    let files = tempfile::Builder::new()
        .prefix("kubeplug-chaos-run-")
        .tempdir()?;
    let kubeconfig = files.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    let replicas = plan.map_or(1, |(_, p)| p.replicas);
    let spec = HostSpec {
        binary: config.binary.clone(),
        kubeconfig,
        plugins: dir.to_path_buf(),
        compile_cache: config.compile_cache.clone(),
        watch_timeout: config.watch_timeout,
        sharding: replicas > 1,
    };
    let writer = sim.client()?;
    let started = jiff::Timestamp::now();
    let first = start_host(&spec, 0).await?;
    let second = match replicas > 1 {
        true => Some(start_host(&spec, 1).await?),
        false => None,
    };
    let both: Vec<&HostProcess> = std::iter::once(&first).chain(&second).collect();
    quiet(&sim, &both, config.quiet, Instant::now() + config.settle).await;
    // Two replicas starting hand keys over as their ring forms (a fault-free run has one).
    let ring = (replicas > 1).then(|| Disturbance {
        from: started,
        until: jiff::Timestamp::now() + write_bound::HORIZON,
        what: "two replicas forming their ring".into(),
    });

    if let Some((_, plan)) = plan {
        sim.faults().set_schedule(plan.schedule.clone())?;
    }
    let start = tokio::time::Instant::now();
    tracing::debug!(schedule = ?plan.map(|(i, _)| i), at = %jiff::Timestamp::now(), "chaos: the workload starts");
    let writes = async {
        for step in &workload.steps {
            tokio::time::sleep_until(start + step.at).await;
            workload::apply(&writer, &step.change).await?;
        }
        tokio::time::sleep_until(start + config.window).await;
        anyhow::Ok(())
    };
    let mut restarts = 0;
    // Restarts and pauses, as they happen.
    let disturbed = std::sync::Mutex::new(Vec::from_iter(ring));
    let disturbed = &disturbed;
    // The first host is killed and a new one (the next number) started in its place.
    let restart = async {
        let Some((_, plan)) = plan else {
            return anyhow::Ok(first);
        };
        tokio::time::sleep_until(start + plan.restart_at).await;
        let killed = jiff::Timestamp::now();
        tokio::task::spawn_blocking(move || first.kill()).await?;
        restarts += 1;
        tokio::time::sleep(plan.restart_pause).await;
        let host = start_host(&spec, replicas).await?;
        disturbed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Disturbance {
                from: killed,
                until: jiff::Timestamp::now() + write_bound::HORIZON,
                what: "a host restart".into(),
            });
        Ok(host)
    };
    // The second replica, if any, is frozen and resumed.
    let pause = async {
        let (Some((_, plan)), Some(second)) = (plan, &second) else {
            return anyhow::Ok(());
        };
        let Some(pause) = plan.pause else {
            return Ok(());
        };
        tokio::time::sleep_until(start + pause.at).await;
        let paused = jiff::Timestamp::now();
        second.pause()?;
        tracing::debug!(host = second.n, length = ?pause.length, "chaos: a replica paused");
        tokio::time::sleep(pause.length).await;
        second.resume()?;
        // Paused past its Lease, it lost its keys to the other replica and takes them back
        // when it renews: the ring changes twice, each time within a Lease.
        let (what, horizon) = match pause.length > LEASE {
            true => ("a replica paused past its Lease", PAST_LEASE_HORIZON),
            false => ("a replica paused", write_bound::HORIZON),
        };
        disturbed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Disturbance {
                from: paused,
                until: jiff::Timestamp::now() + horizon,
                what: what.into(),
            });
        Ok(())
    };
    let (written, restarted, paused) = tokio::join!(writes, restart, pause);
    written?;
    paused?;
    let first = restarted?;
    let hosts: Vec<&HostProcess> = std::iter::once(&first).chain(&second).collect();
    let faults = sim.faults().injected();
    sim.faults().clear_schedule();
    for change in &workload.probes {
        workload::apply(&writer, change).await?;
    }

    let settled_from = Instant::now();
    let deadline = settled_from + config.settle;
    let expected = workload.expected();
    let (snapshot, mut problems) = loop {
        quiet(&sim, &hosts, config.quiet, deadline).await;
        let snapshot = Snapshot::read(&sim);
        let (problems, _) = plugin_state(&hosts, &plugin_set::installed(dir)?).await;
        let holds = invariants::check(&snapshot, &expected, None, &problems).is_empty();
        if holds || Instant::now() >= deadline {
            break (snapshot, problems);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let settle_ms = settled_from.elapsed().as_millis() as u64;
    let writes = host_writes(&sim);
    // The bound counts the writes until quiet, before the live check's own change.
    let records = sim.requests().records();
    let stall = write_bound::stall_horizon(config.watch_timeout);
    let mut disturbances = write_bound::read_faults(&records, stall);
    disturbances.extend(
        disturbed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..),
    );
    let log = WriteLog {
        writes: write_bound::host_writes(&records),
        disturbances,
    };
    let endpoints: Vec<live::Endpoint> = hosts.iter().map(|h| h.endpoint()).collect();
    problems.extend(live::check(&endpoints, &writer, Instant::now() + config.settle).await);
    problems.extend(invariants::writes_in_policy(
        &sim.requests().records(),
        &plugin_set::policies_in(dir)?,
    ));
    let outcome = Outcome {
        index: plan.map(|(i, _)| i),
        plan: plan.map(|(_, p)| p.describe()).unwrap_or_default(),
        faults,
        restarts,
        writes,
        settle_ms,
        ..Outcome::default()
    };
    drop(hosts);
    tokio::task::spawn_blocking(move || {
        first.kill();
        drop(second);
    })
    .await?;
    Ok((outcome, snapshot, problems, log))
}
