//! `kubeplug run`: the controller host, against a cluster or the embedded API server.

use crate::cluster::{ClusterArgs, connect};
use crate::controller::{Controller, ControllerConfig, PluginInstance};
use crate::plugin::{Limits, Plugin, PluginRuntime, RuntimeConfig};
use crate::policy::Policy;
use crate::queue::{QueueConfig, RateLimitConfig};
use anyhow::{Context, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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
    /// Where precompiled plugins are cached (default: ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
}

/// Sample objects the embedded API server starts with: Deployments the reference plugins act on.
pub const SAMPLE_MANIFESTS: &str = include_str!("../../samples/demo.yaml");

/// Loads every `.wasm` file in `dir`; a file that fails is reported on one line and skipped.
pub async fn load_plugins(runtime: &PluginRuntime, dir: &Path) -> anyhow::Result<Vec<Arc<Plugin>>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read plugins directory {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    paths.sort();
    // Compile in parallel (each load compiles on a blocking thread), report in file order.
    let loads = futures::future::join_all(paths.iter().map(|p| runtime.load_file(p))).await;
    let mut plugins: Vec<Arc<Plugin>> = Vec::new();
    for (path, loaded) in paths.iter().zip(loads) {
        match loaded {
            Ok(p) if plugins.iter().any(|q| q.name() == p.name()) => {
                tracing::warn!(path = %path.display(), plugin = p.name(), "skipped: another file already provides a plugin with this name");
            }
            Ok(p) => {
                tracing::info!(plugin = p.name(), version = %p.metadata().version, path = %path.display(), "loaded");
                plugins.push(p);
            }
            Err(err) => tracing::warn!(path = %path.display(), "skipped plugin: {err}"),
        }
    }
    if plugins.is_empty() {
        tracing::warn!(dir = %dir.display(), "no plugins loaded: nothing will be reconciled");
    }
    Ok(plugins)
}

/// Each plugin under its policy `<dir>/<name>.policy.yaml`; without one it runs in dry-run.
/// A plugin whose policy cannot be read or is malformed is reported on one line and not
/// started; the others are unaffected.
pub fn with_policies(plugins: Vec<Arc<Plugin>>, dir: &Path) -> Vec<PluginInstance> {
    let mut instances = Vec::new();
    for plugin in plugins {
        let file = dir.join(format!("{}.policy.yaml", plugin.name()));
        let instance = PluginInstance::new(plugin);
        if !file.exists() {
            tracing::warn!(plugin = %instance.name, policy = %file.display(), "no policy: running in dry-run (actions are audited, not sent)");
            instances.push(instance);
            continue;
        }
        match Policy::read(&file, &instance.name) {
            Ok(policy) => instances.push(instance.with_policy(policy)),
            Err(err) => tracing::error!(plugin = %instance.name, "plugin not started: {err}"),
        }
    }
    instances
}

/// Runs the controller until SIGINT or SIGTERM, then drains and exits 0.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
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
    let plugins = load_plugins(&runtime, &args.plugins).await?;
    let config = ControllerConfig {
        namespace: args.cluster.namespace.clone(),
        workers: args.workers,
        queue: QueueConfig {
            rate_limit: RateLimitConfig {
                base_delay: Duration::from_millis(args.backoff_base_ms),
                max_delay: Duration::from_secs(args.backoff_max_seconds),
                qps: args.qps,
                burst: args.burst,
            },
            ..QueueConfig::default()
        },
        limits: Limits {
            timeout: Duration::from_millis(args.timeout_ms),
            memory_bytes: args.memory_mib << 20,
            ..Limits::default()
        },
        resync: (args.resync_seconds > 0).then(|| Duration::from_secs(args.resync_seconds)),
        instance: hostname(),
        audit: crate::policy::AuditSink::default(),
    };
    let policies = args.policies.as_deref().unwrap_or(&args.plugins);
    let instances = with_policies(plugins, policies);
    let controller = Controller::start(client, config, instances).await?;
    tracing::info!(plugins = ?controller.plugins(), kinds = controller.watched_kinds().len(), "running; stop with Ctrl-C");
    signals.recv().await;
    tracing::info!("shutting down: finishing in-flight reconciles");
    controller.shutdown().await;
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

/// SIGINT and SIGTERM, caught from the moment they are installed: installing them before
/// announcing readiness means an early signal still drains instead of killing the process.
struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
