//! `kubeplug chaos`: the host against a fault-injecting API server. For each schedule of a
//! seed: an embedded sim with the seed controllers' kinds, a host running the four seed
//! plugins, a workload changing specs steadily while a random fault schedule is active and
//! the host is killed and started again at a random point; then quiet, and the invariants
//! checked against a fault-free run of the same workload (issue 36).

mod host_process;
pub mod invariants;
pub mod report;
mod rng;
pub mod schedule;
pub mod snapshot;
pub mod workload;

pub use report::{Outcome, Report, Violation, Writes};
pub use schedule::FaultPlan;
pub use workload::{Expected, Workload};

use crate::app::HostConfig;
use crate::controller::ControllerConfig;
use crate::queue::{QueueConfig, RateLimitConfig};
use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use host_process::HostProcess;
use kubeplug_sim::Sim;
use snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The seed plugins every run loads, from the plugins directory, under their sample policies.
pub const SEED_PLUGINS: [&str; 4] = [
    "image-pinner",
    "change-logger",
    "sample-controller",
    "customcluster",
];

const POLICIES: [&str; 4] = [
    include_str!("../../samples/policies/image-pinner.policy.yaml"),
    include_str!("../../samples/policies/change-logger.policy.yaml"),
    include_str!("../../samples/policies/sample-controller.policy.yaml"),
    include_str!("../../samples/policies/customcluster.policy.yaml"),
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
    /// How many schedules run at once (each with its own sim and hosts; the fault-free run
    /// runs first, alone).
    pub jobs: usize,
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
            jobs: 2,
        }
    }
}

/// Runs the fault-free run and every schedule; the report says what went wrong where.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<Report> {
    let dir = plugin_dir(&config.plugins)?;
    let workload = Workload::generate(config.seed, config.window);
    let expected = workload.expected();
    tracing::info!(
        seed = config.seed,
        steps = workload.steps.len(),
        "chaos: the fault-free run"
    );
    let (mut baseline, snapshot, problems) = run_one(config, dir.path(), &workload, None).await?;
    baseline.violations = invariants::check(&snapshot, &expected, None, &problems);
    let reference = snapshot.comparable();
    let indexes: Vec<u64> = match config.only {
        Some(i) => vec![i],
        None => (0..config.schedules).collect(),
    };
    let (dir, workload, expected, reference) = (dir.path(), &workload, &expected, &reference);
    let schedule = |index: u64| async move {
        let plan = FaultPlan::generate(config.seed, index, config.window);
        tracing::info!(seed = config.seed, schedule = index, faults = %plan.describe(), "chaos: a schedule");
        let (mut outcome, snapshot, problems) =
            run_one(config, dir, workload, Some((index, &plan))).await?;
        outcome.violations = invariants::check(&snapshot, expected, Some(reference), &problems);
        tracing::info!(
            seed = config.seed,
            schedule = index,
            violations = outcome.violations.len(),
            faults = outcome.faults,
            "chaos: schedule done"
        );
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

/// A private plugins directory with the four seed plugins and their sample policies (the
/// directory may hold other plugins, such as the slow-loading TypeScript and Python ports).
fn plugin_dir(plugins: &Path) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("kubeplug-chaos-")
        .tempdir()?;
    for (name, policy) in SEED_PLUGINS.iter().zip(POLICIES) {
        let file = plugins.join(format!("{name}.wasm"));
        std::fs::copy(&file, dir.path().join(format!("{name}.wasm"))).with_context(|| {
            format!(
                "{} is missing: build the plugins first (`make plugins`)",
                file.display()
            )
        })?;
        std::fs::write(dir.path().join(format!("{name}.policy.yaml")), policy)?;
    }
    Ok(dir)
}

fn host_config(config: &ChaosConfig, dir: &Path, n: u64) -> HostConfig {
    HostConfig {
        plugins: Some(dir.to_path_buf()),
        policies: dir.to_path_buf(),
        objects: None,
        watch: false,
        debounce: Duration::from_millis(50),
        listen: None,
        access: crate::server::Access::default(),
        compile_cache: config.compile_cache.clone(),
        controller: ControllerConfig {
            host_name: format!("{}-{n}", schedule::HOST_AGENT),
            // Retries back off to 1 s at most, so a run settles within seconds of its faults.
            queue: QueueConfig {
                rate_limit: RateLimitConfig {
                    max_delay: Duration::from_secs(1),
                    qps: 100.0,
                    ..RateLimitConfig::default()
                },
                ..QueueConfig::default()
            },
            watch_timeout: config.watch_timeout,
            ..ControllerConfig::default()
        },
        shutdown_timeout: Duration::from_secs(1),
        coordination: None,
    }
}

/// Starts host `n`, starting it again (as a pod would be restarted) while starting fails.
async fn start_host(
    config: &ChaosConfig,
    sim: &Sim,
    dir: &Path,
    n: u64,
) -> anyhow::Result<HostProcess> {
    let mut tries = 0;
    loop {
        match HostProcess::start(n, sim.kube_config()?, host_config(config, dir, n)).await {
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

/// The hosts' writes in the request log.
fn host_writes(sim: &Sim) -> Writes {
    let mut writes = Writes::default();
    for r in sim.requests().records() {
        if r.user_agent.contains(schedule::HOST_AGENT) && WRITES.contains(&r.verb.as_str()) {
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

/// Waits until the hosts have not written for `quiet` (at most until `deadline`).
async fn quiet(sim: &Sim, quiet: Duration, deadline: Instant) {
    let mut seen = host_writes(sim).total;
    let mut since = Instant::now();
    while since.elapsed() < quiet && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = host_writes(sim).total;
        if now != seen {
            seen = now;
            since = Instant::now();
        }
    }
}

/// One run: the fault-free one (`plan` `None`) or schedule `index`. Returns its outcome
/// (without violations), the final objects and the plugins' problems.
async fn run_one(
    config: &ChaosConfig,
    dir: &Path,
    workload: &Workload,
    plan: Option<(u64, &FaultPlan)>,
) -> anyhow::Result<(Outcome, Snapshot, Vec<String>)> {
    let sim = CRDS
        .iter()
        .fold(Sim::builder(), |b, crd| b.manifest(*crd))
        .auto_create_namespaces(true)
        .status_delay(Duration::from_millis(100))
        .request_log_capacity(200_000)
        .start()
        .await
        .context("cannot start the embedded API server")?;
    sim.apply_yaml(&workload.initial)?;
    let writer = sim.client()?;
    let mut host = start_host(config, &sim, dir, 0).await?;
    quiet(&sim, config.quiet, Instant::now() + config.settle).await;

    if let Some((_, plan)) = plan {
        sim.faults().set_schedule(plan.schedule.clone())?;
    }
    let start = tokio::time::Instant::now();
    let writes = async {
        for step in &workload.steps {
            tokio::time::sleep_until(start + step.at).await;
            workload::apply(&writer, &step.change).await?;
        }
        tokio::time::sleep_until(start + config.window).await;
        anyhow::Ok(())
    };
    let mut restarts = 0;
    let restart = async {
        let Some((_, plan)) = plan else {
            return anyhow::Ok(host);
        };
        tokio::time::sleep_until(start + plan.restart_at).await;
        tokio::task::spawn_blocking(move || host.kill()).await?;
        restarts += 1;
        tokio::time::sleep(plan.restart_pause).await;
        start_host(config, &sim, dir, 1).await
    };
    let (written, restarted) = tokio::join!(writes, restart);
    written?;
    host = restarted?;
    let faults = sim.faults().injected();
    sim.faults().clear_schedule();
    for change in &workload.probes {
        workload::apply(&writer, change).await?;
    }

    let settled_from = Instant::now();
    let deadline = settled_from + config.settle;
    let expected = workload.expected();
    let (snapshot, problems) = loop {
        quiet(&sim, config.quiet, deadline).await;
        let snapshot = Snapshot::read(&sim);
        let problems = host.plugin_problems(&SEED_PLUGINS);
        let holds = invariants::check(&snapshot, &expected, None, &problems).is_empty();
        if holds || Instant::now() >= deadline {
            break (snapshot, problems);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let outcome = Outcome {
        index: plan.map(|(i, _)| i),
        plan: plan.map(|(_, p)| p.describe()).unwrap_or_default(),
        faults,
        restarts,
        writes: host_writes(&sim),
        settle_ms: settled_from.elapsed().as_millis() as u64,
        violations: Vec::new(),
    };
    tokio::task::spawn_blocking(move || host.kill()).await?;
    Ok((outcome, snapshot, problems))
}
