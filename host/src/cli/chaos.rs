//! `kubeplug chaos`: the seed plugins under random fault schedules and host restarts,
//! checked against a fault-free run of the same workload (see [`crate::chaos`]).

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Options of `kubeplug chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// How many fault schedules to run.
    #[arg(long, default_value_t = 10)]
    pub schedules: u64,
    /// The seed of the workload and of every schedule's faults and restart.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run only this schedule (the index a violation names), after the fault-free run.
    #[arg(long)]
    pub only: Option<u64>,
    /// Directory holding image-pinner, change-logger, sample-controller and customcluster
    /// (`.wasm`), as `make plugins` builds them.
    #[arg(long, env = "KUBEPLUG_PLUGIN_DIR", default_value = "target/plugins")]
    pub plugins: PathBuf,
    /// How long the workload writes while faults are active, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub window_ms: u64,
    /// The most a schedule waits after its workload for quiet and its invariants, in seconds.
    #[arg(long, default_value_t = 20)]
    pub settle_seconds: u64,
    /// Where precompiled plugins are cached (default: ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
    /// The hosts' watch timeout in seconds (as `kubeplug run --watch-timeout-seconds`; 30
    /// there): a stalled watch is abandoned after it plus 5 s, within the settle time.
    #[arg(long, default_value_t = 5)]
    pub watch_timeout_seconds: u64,
    /// Which plugins the schedules run: `rust` (the four seed plugins), `ports`
    /// (image-pinner-py, sample-controller-ts, customcluster-py and the Rust change-logger)
    /// or `alternate` (Rust on even schedules, the ports on odd ones). The fault-free run
    /// is always the Rust one.
    #[arg(long, value_parser = ["rust", "ports", "alternate"], default_value = "alternate")]
    pub plugin_set: String,
    /// How many schedules run at once, each with its own API server and hosts (the
    /// fault-free run runs first, alone); the report keeps index order.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
}

/// Runs the schedules and prints the report; exits 1 when an invariant was broken.
#[cfg(feature = "embedded")]
pub async fn run(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let defaults = crate::chaos::ChaosConfig::default();
    let config = crate::chaos::ChaosConfig {
        seed: args.seed,
        schedules: args.schedules,
        only: args.only,
        plugins: args.plugins,
        compile_cache: args.compile_cache.or(defaults.compile_cache),
        window: Duration::from_millis(args.window_ms.max(150)),
        settle: Duration::from_secs(args.settle_seconds.max(1)),
        watch_timeout: Duration::from_secs(args.watch_timeout_seconds.max(1)),
        plugin_sets: clap::ValueEnum::from_str(&args.plugin_set, false)
            .map_err(|e| anyhow::anyhow!("--plugin-set: {e}"))?,
        jobs: args.jobs as usize,
        binary: std::env::current_exe().context("the path of the kubeplug binary")?,
        ..defaults
    };
    // On Ctrl-C the run is dropped, and with it every host process (killed, not left behind).
    let report = tokio::select! {
        report = crate::chaos::run(&config) => report?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the hosts were stopped"),
    };
    println!("{report}");
    Ok(match report.violations().is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// This build has no embedded API server.
#[cfg(not(feature = "embedded"))]
pub async fn run(_: ChaosArgs) -> anyhow::Result<ExitCode> {
    let _ = (Duration::ZERO, PathBuf::new());
    anyhow::bail!("{}", super::NOT_EMBEDDED)
}
