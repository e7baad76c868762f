//! `kubeplug run`: the controller host, against a cluster or the embedded API server.

use crate::cluster::{ClusterArgs, connect};
use crate::controller::{Controller, ControllerConfig};
use crate::plugin::{PluginRuntime, RuntimeConfig};
use crate::reload::{ReloadConfig, Reloader};
use crate::server::{Server, ServerState};
use anyhow::{Context, bail};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Options of `kubeplug run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory of plugins: every `*.wasm` file in it is loaded.
    #[arg(long, env = "KUBEPLUG_PLUGINS")]
    pub plugins: PathBuf,
    /// Directory of plugin policies (`<plugin>.policy.yaml`); default: beside the plugins.
    /// A plugin without a policy runs in dry-run.
    #[arg(long, env = "KUBEPLUG_POLICIES")]
    pub policies: Option<PathBuf>,
    /// Follow changes of the plugins and policies (hot reload); SIGHUP rescans either way.
    #[arg(long, env = "KUBEPLUG_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,
    /// Serve /metrics, /healthz, /readyz and /plugins on this address (e.g. 0.0.0.0:8080).
    #[arg(long, env = "KUBEPLUG_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// With --watch: quiet time after a file event before rescanning, in milliseconds.
    #[arg(long, env = "KUBEPLUG_DEBOUNCE_MS", default_value_t = 50)]
    pub debounce_ms: u64,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Start the embedded API server with sample Deployments and run against it.
    #[arg(long, env = "KUBEPLUG_EMBEDDED")]
    pub embedded: bool,
    /// With --embedded: where to write the kubeconfig for kubectl.
    #[arg(
        long,
        env = "KUBEPLUG_KUBECONFIG_OUT",
        default_value = "kubeplug-embedded.kubeconfig"
    )]
    pub kubeconfig_out: PathBuf,
    /// With --embedded: the port of the embedded API server (0 picks a free one).
    #[arg(long, env = "KUBEPLUG_EMBEDDED_PORT", default_value_t = 0)]
    pub embedded_port: u16,
    /// Workers per plugin.
    #[arg(long, env = "KUBEPLUG_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Re-enqueue every cached key this often, in seconds (0: never).
    #[arg(long, env = "KUBEPLUG_RESYNC_SECONDS", default_value_t = 0)]
    pub resync_seconds: u64,
    /// Retries per second across all keys of a plugin (token bucket).
    #[arg(long, env = "KUBEPLUG_QPS", default_value_t = 10.0)]
    pub qps: f64,
    /// Token bucket burst.
    #[arg(long, env = "KUBEPLUG_BURST", default_value_t = 100)]
    pub burst: u32,
    /// First per-key retry delay, in milliseconds (doubles on each failure).
    #[arg(long, env = "KUBEPLUG_BACKOFF_BASE_MS", default_value_t = 5)]
    pub backoff_base_ms: u64,
    /// Longest per-key retry delay, in seconds.
    #[arg(long, env = "KUBEPLUG_BACKOFF_MAX_SECONDS", default_value_t = 1000)]
    pub backoff_max_seconds: u64,
    /// Time limit of one plugin call, in milliseconds.
    #[arg(long, env = "KUBEPLUG_TIMEOUT_MS", default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Memory limit of one plugin instance, in MiB.
    #[arg(long, env = "KUBEPLUG_MEMORY_MIB", default_value_t = 64)]
    pub memory_mib: usize,
    /// On SIGINT/SIGTERM, how long to wait for calls in flight, in seconds; writes still
    /// waiting for a plugin's write budget are skipped at once (audited), and workers still
    /// busy after this are abandoned.
    #[arg(long, env = "KUBEPLUG_SHUTDOWN_TIMEOUT", value_name = "SECONDS", default_value_t = crate::controller::DEFAULT_SHUTDOWN_TIMEOUT.as_secs())]
    pub shutdown_timeout: u64,
    /// Where precompiled plugins are cached (default: ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
}

/// Sample objects the embedded API server starts with: Deployments the reference plugins act on.
pub const SAMPLE_MANIFESTS: &str = include_str!("../../samples/demo.yaml");

/// Runs the controller until SIGINT or SIGTERM, then drains and exits 0. Plugins come and go
/// with the files in the plugins directory (unless `--watch=false`); SIGHUP rescans.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let settings = super::run_settings::RunSettings::from_args(&args)?;
    let mut signals = ShutdownSignals::install()?;
    if !args.plugins.is_dir() {
        bail!(
            "plugins directory {} does not exist (or is not a directory)",
            args.plugins.display()
        );
    }
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: args
            .compile_cache
            .clone()
            .or_else(crate::plugin::default_cache_dir),
        ..RuntimeConfig::default()
    })?;
    let (client, _sim) = if args.embedded {
        let sim = crate::sim::Sim::builder()
            .port(args.embedded_port)
            .auto_create_namespaces(true)
            .manifest(SAMPLE_MANIFESTS)
            .start()
            .await
            .context("cannot start the embedded API server")?;
        sim.write_kubeconfig(&args.kubeconfig_out)?;
        let kc = args.kubeconfig_out.display();
        eprintln!("embedded API server at {} — try:", sim.url());
        eprintln!("  kubectl --kubeconfig {kc} get deployments -A");
        eprintln!("  kubectl --kubeconfig {kc} -n demo scale deploy web --replicas=3");
        eprintln!("  kubectl --kubeconfig {kc} -n demo set image deploy/web app=alpine");
        (sim.client()?, Some(sim))
    } else {
        (connect(&args.cluster).await?, None)
    };
    let config = ControllerConfig {
        namespace: args.cluster.namespace.clone(),
        workers: settings.workers,
        queue: settings.queue.clone(),
        limits: settings.limits,
        resync: settings.resync,
        instance: hostname(),
        audit: crate::policy::AuditSink::default(),
    };
    let controller = Controller::new(client, config);
    let mut reload = ReloadConfig::new(
        &args.plugins,
        args.policies.as_deref().unwrap_or(&args.plugins),
    );
    reload.debounce = settings.debounce;
    let reloader = Reloader::new(Arc::new(runtime), controller.clone(), reload);
    reloader.rescan(false).await?;
    // Without file events the host still serves what it loaded, and SIGHUP still rescans.
    let _watch = match args.watch {
        true => reloader
            .watch()
            .inspect_err(|err| {
                tracing::error!("{err}: plugins are reloaded on SIGHUP only");
            })
            .ok(),
        false => None,
    };
    let _server = match args.listen {
        Some(addr) => {
            let state = ServerState {
                controller: controller.clone(),
                reloader: reloader.clone(),
            };
            let server = Server::start(addr, state)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            tracing::info!(addr = %server.addr(), "serving /metrics, /healthz, /readyz, /plugins");
            Some(server)
        }
        None => None,
    };
    tracing::info!(plugins = ?controller.plugins(), kinds = controller.watched_kinds().len(), watch = args.watch, "running; stop with Ctrl-C, rescan plugins with SIGHUP");
    while signals.recv().await == Signal::Rescan {
        tracing::info!("SIGHUP: rescanning plugins and policies");
        if let Err(err) = reloader.rescan(true).await {
            tracing::error!("rescan failed, the running plugins are unchanged: {err}");
        }
    }
    let timeout = settings.shutdown_timeout;
    tracing::info!(
        timeout_s = timeout.as_secs(),
        "shutting down: finishing in-flight reconciles, skipping writes still waiting for a write budget"
    );
    let drain = controller.shutdown_within(timeout).await;
    match drain.abandoned {
        0 => tracing::info!(workers = drain.finished, "drained"),
        n => tracing::warn!(
            abandoned = n,
            finished = drain.finished,
            "shutdown timeout reached: {n} workers abandoned in the middle of a call"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "kubeplug".into())
}

/// SIGINT and SIGTERM (stop) and SIGHUP (rescan), caught from the moment they are
/// installed: installing them before announcing readiness means an early signal still
/// drains instead of killing the process.
struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

/// What a received signal asks for.
#[derive(Debug, PartialEq, Eq)]
enum Signal {
    Stop,
    Rescan,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
                hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Stop,
            _ = self.terminate.recv() => Signal::Stop,
            _ = self.hangup.recv() => Signal::Rescan,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Stop
        }
    }
}
