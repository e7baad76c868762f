//! `kubeplug run`: the controller host, against a cluster or the embedded API server.

use crate::app::Host;
use crate::cluster::{ClusterArgs, connect_as};
use crate::controller::{DEFAULT_MAX_WRITES_IN_FLIGHT, DEFAULT_WORKERS};
use crate::queue::RateLimitConfig;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `kubeplug run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory of plugins: every `*.wasm` file in it is loaded. Optional: without it the
    /// host runs the `Plugin` objects of the cluster only.
    #[arg(long, env = "KUBEPLUG_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Run tenants' `Plugin` objects (bounded by `PluginPolicy` objects) whenever the API
    /// server serves their CRDs.
    #[arg(long, env = "KUBEPLUG_PLUGIN_OBJECTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub plugin_objects: bool,
    /// A plugin from an OCI registry, oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST], run
    /// without a plugins directory (named after the repository's last component, whose
    /// policy `--policies DIR` holds); repeat for several. Pulled (and verified, with
    /// --verification-config) before the host starts; a tag is resolved once.
    #[arg(
        long = "plugin",
        value_name = "OCI_REFERENCE",
        conflicts_with = "plugins"
    )]
    pub plugin: Vec<crate::oci::OciRef>,
    /// Registry flags, for `--plugin` and `Plugin` objects' `spec.module.image`; the largest
    /// module (`--max-module-mib`) bounds ConfigMap modules too.
    #[command(flatten)]
    pub registry: crate::oci::RegistryArgs,
    /// How often the tag a `Plugin` object's image names is resolved again, in seconds (a
    /// moved tag is a new revision).
    #[arg(long, env = "KUBEPLUG_IMAGE_POLL_SECONDS", default_value_t = crate::plugin_objects::DEFAULT_IMAGE_POLL.as_secs())]
    pub image_poll_seconds: u64,
    /// The most `Plugin` objects this host runs (the oldest first; newer ones are refused
    /// with `TooManyPlugins` until others go).
    #[arg(long, env = "KUBEPLUG_MAX_PLUGIN_OBJECTS", default_value_t = crate::plugin_objects::DEFAULT_MAX_PLUGINS)]
    pub max_plugin_objects: usize,
    /// The namespace kubeplug runs in and keeps its own records in (each `Plugin`'s status
    /// record; the Leases' default too). Tenants must have no rights there. Default: the
    /// pod's namespace ($POD_NAMESPACE, else the service account's), else `default`.
    #[arg(long, env = "KUBEPLUG_HOST_NAMESPACE")]
    pub host_namespace: Option<String>,
    /// The most `Plugin` objects of one namespace this host runs (the oldest first; newer
    /// ones are refused with `TooManyPlugins` naming this cap, while other namespaces' load).
    /// Plugins that cannot load hold no slot. Default: a quarter of `--max-plugin-objects`.
    #[arg(long, env = "KUBEPLUG_MAX_PLUGINS_PER_NAMESPACE")]
    pub max_plugins_per_namespace: Option<usize>,
    /// The most `Plugin` objects whose metrics are labelled each by its own plugin
    /// (`plugin="ns/name"`; `name=` for `workqueue_*`). While more run, every namespaced
    /// series is exported summed per namespace (`plugin="ns/*"`), so the series grow with the
    /// namespaces, not the plugins; `plugin=~"ns/.*"` selects a namespace in either form.
    /// Counters stay monotonic (a namespace's sum keeps what its stopped plugins counted); a
    /// switch of form starts new series. 0: always per namespace. Plugin files keep theirs.
    #[arg(long, env = "KUBEPLUG_METRICS_PER_PLUGIN_LIMIT", default_value_t = crate::metrics::DEFAULT_PER_PLUGIN_LIMIT)]
    pub metrics_per_plugin_limit: usize,
    /// Directory of plugin policies (`<plugin>.policy.yaml`); default: beside the plugins.
    /// A plugin without a policy runs in dry-run.
    #[arg(long, env = "KUBEPLUG_POLICIES")]
    pub policies: Option<PathBuf>,
    /// Follow changes of the plugins and policies (hot reload); SIGHUP rescans either way.
    #[arg(long, env = "KUBEPLUG_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,
    /// Serve the dashboard /, /metrics, /healthz, /readyz, /plugins and the live stream
    /// /api/wds/logs on this address (e.g. 0.0.0.0:8080).
    #[arg(long, env = "KUBEPLUG_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// A file holding the bearer token that the dashboard, /plugins and the live stream
    /// require (/healthz, /readyz and /metrics stay open).
    #[arg(long, env = "KUBEPLUG_LISTEN_TOKEN_FILE")]
    pub listen_token_file: Option<PathBuf>,
    /// An origin (https://dash.example.com) whose pages may open the live stream's
    /// WebSocket, besides the server's own; repeatable.
    #[arg(long, env = "KUBEPLUG_ALLOW_ORIGIN", value_delimiter = ',')]
    pub allow_origin: Vec<String>,
    /// A host name (dash.example.com, or .example.com for it and every name under it) that
    /// requests to the dashboard, /plugins and the live stream may name in their Host header,
    /// on any port; repeatable. IP literals and localhost are always allowed; any other name
    /// gets 403, so a page on a name rebound to this server's address (DNS rebinding) cannot
    /// read them. /healthz, /readyz and /metrics answer any Host: kubelet probes and
    /// Prometheus scrapes keep working by pod IP or Service name, and they expose nothing a
    /// rebinding page could abuse.
    #[arg(
        long,
        env = "KUBEPLUG_ALLOW_HOST",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    pub allow_host: Vec<String>,
    /// With --watch: quiet time after a file event before rescanning, in milliseconds.
    #[arg(long, env = "KUBEPLUG_DEBOUNCE_MS", default_value_t = 50)]
    pub debounce_ms: u64,
    /// Which cluster, and which namespace.
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
    /// Workers per plugin: its plugin calls at once (a worker does not wait for its writes).
    #[arg(long, env = "KUBEPLUG_WORKERS", default_value_t = DEFAULT_WORKERS)]
    pub workers: usize,
    /// Calls with writes in flight at once, over every plugin: the cap of each plugin's
    /// adaptive limit (which grows while the API server answers fast and halves on 429/5xx).
    #[arg(long, env = "KUBEPLUG_MAX_WRITES_IN_FLIGHT", default_value_t = DEFAULT_MAX_WRITES_IN_FLIGHT)]
    pub max_writes_in_flight: usize,
    /// Re-enqueue every cached key this often, in seconds (0: never).
    #[arg(long, env = "KUBEPLUG_RESYNC_SECONDS", default_value_t = 0)]
    pub resync_seconds: u64,
    /// Fill each watch's cache from a streaming list (a watch with `sendInitialEvents`, the
    /// API server's WatchList feature) instead of paged lists, whose continue tokens expire
    /// when a list outlasts the API server's history. Only for API servers that serve it.
    #[arg(long, env = "KUBEPLUG_STREAMING_LISTS")]
    pub streaming_lists: bool,
    /// Server-side timeout of each watch request, in seconds: the API server ends the stream
    /// then and the watch resumes from its last version; a stream that has sent nothing (no
    /// change, no bookmark) for this long plus 5 s is abandoned.
    #[arg(long, env = "KUBEPLUG_WATCH_TIMEOUT_SECONDS", default_value_t = crate::cluster::DEFAULT_WATCH_TIMEOUT.as_secs())]
    pub watch_timeout_seconds: u64,
    /// How long a key waits for the caches to show the objects its calls created before it is
    /// reconciled anyway, in seconds (as client-go's expectations); the watch ends the wait as
    /// soon as it delivers them.
    #[arg(long, env = "KUBEPLUG_EXPECTATION_WAIT_SECONDS", default_value_t = crate::controller::DEFAULT_EXPECTATION_WAIT.as_secs())]
    pub expectation_wait_seconds: u64,
    /// Retries per second across all keys of a plugin (token bucket).
    #[arg(long, env = "KUBEPLUG_QPS", default_value_t = RateLimitConfig::default().qps)]
    pub qps: f64,
    /// Token bucket burst.
    #[arg(long, env = "KUBEPLUG_BURST", default_value_t = RateLimitConfig::default().burst)]
    pub burst: u32,
    /// First per-key retry delay, in milliseconds (doubles on each failure).
    #[arg(long, env = "KUBEPLUG_BACKOFF_BASE_MS", default_value_t = RateLimitConfig::default().base_delay.as_millis() as u64)]
    pub backoff_base_ms: u64,
    /// Longest per-key retry delay, in seconds.
    #[arg(long, env = "KUBEPLUG_BACKOFF_MAX_SECONDS", default_value_t = RateLimitConfig::default().max_delay.as_secs())]
    pub backoff_max_seconds: u64,
    /// Limits of each plugin call (`--timeout-ms`, `--memory-mib`), as `kubeplug eval` has.
    #[command(flatten)]
    pub limits: super::call_limits::CallLimitArgs,
    /// On SIGINT/SIGTERM, how long to wait for calls in flight, in seconds; writes still
    /// waiting for a plugin's write budget are skipped at once (audited), and workers still
    /// busy after this are abandoned.
    #[arg(long, env = "KUBEPLUG_SHUTDOWN_TIMEOUT", value_name = "SECONDS", default_value_t = crate::controller::DEFAULT_SHUTDOWN_TIMEOUT.as_secs())]
    pub shutdown_timeout: u64,
    /// Where precompiled plugins are cached (default: ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
    /// Where the decision ledger (every reconcile: why, what, the verdicts, the writes) is
    /// kept (default: $XDG_STATE_HOME/kubeplug, else ~/.local/state/kubeplug). `kubeplug
    /// why` reads it.
    #[arg(long, env = "KUBEPLUG_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Keep no decision ledger.
    #[arg(long, env = "KUBEPLUG_NO_LEDGER")]
    pub no_ledger: bool,
    /// The most the ledger keeps, in MiB: the oldest entries go first.
    #[arg(long, env = "KUBEPLUG_LEDGER_MAX_MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub ledger_max_mib: u64,
    /// How long the ledger keeps an entry, in hours.
    #[arg(long, env = "KUBEPLUG_LEDGER_MAX_AGE_HOURS", default_value_t = 168, value_parser = clap::value_parser!(u64).range(1..=87_600))]
    pub ledger_max_age_hours: u64,
    /// Several replicas: only the one holding the Lease (--lease-name) reconciles; the
    /// others keep their caches warm and take over when it goes.
    #[arg(long, env = "KUBEPLUG_LEADER_ELECT", conflicts_with = "sharding")]
    pub leader_elect: bool,
    /// Several replicas: each reconciles the keys rendezvous hashing gives it among the
    /// replicas whose member Lease (<lease-name>-<identity>) is current.
    #[arg(long, env = "KUBEPLUG_SHARDING")]
    pub sharding: bool,
    /// The leader Lease's name (with --sharding: the ring's name).
    #[arg(long, env = "KUBEPLUG_LEASE_NAME", default_value = "kubeplug")]
    pub lease_name: String,
    /// The namespace of the Leases (default: `--host-namespace`).
    #[arg(long, env = "KUBEPLUG_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a Lease holds without renewal, in seconds.
    #[arg(long, env = "KUBEPLUG_LEASE_DURATION_SECONDS", default_value_t = 15.0)]
    pub lease_duration_seconds: f64,
    /// How long a leader (or ring member) keeps trying to renew before it stops
    /// reconciling, in seconds; shorter than the lease duration.
    #[arg(long, env = "KUBEPLUG_RENEW_DEADLINE_SECONDS", default_value_t = 10.0)]
    pub renew_deadline_seconds: f64,
    /// How often to try to acquire or renew the Lease and read the ring, in seconds.
    #[arg(long, env = "KUBEPLUG_RETRY_PERIOD_SECONDS", default_value_t = 2.0)]
    pub retry_period_seconds: f64,
    /// This replica's name in the Leases (default: the hostname plus a random suffix).
    #[arg(long, env = "KUBEPLUG_IDENTITY")]
    pub identity: Option<String>,
}

/// Pulls each `--plugin` into a private folder as `<last repository component>.wasm`, the
/// plugins directory of this run; two that would share a name are refused.
async fn pull_plugins(
    registries: &crate::oci::Registries,
    args: &RunArgs,
) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("kubeplug-plugins-")
        .tempdir()
        .context("a folder for the pulled plugins")?;
    let mut names = std::collections::HashSet::new();
    for reference in &args.plugin {
        let name = reference
            .repository
            .rsplit('/')
            .next()
            .unwrap_or(&reference.repository)
            .to_string();
        if !names.insert(name.clone()) {
            anyhow::bail!(
                "--plugin {reference}: another --plugin is also named {name:?} (the last component of its repository)"
            );
        }
        let pulled = crate::oci::verification::pull_verified(registries, reference, &args.registry)
            .await
            .with_context(|| format!("--plugin {reference}"))?;
        tracing::info!(plugin = %name, module = %pulled.pinned, sha256 = %pulled.module_digest, cached = pulled.cached, "pulled");
        std::fs::write(dir.path().join(format!("{name}.wasm")), &pulled.bytes)
            .with_context(|| format!("writing the module of {reference}"))?;
    }
    Ok(dir)
}

/// Sample objects the embedded API server starts with: Deployments the reference plugins act on.
pub const SAMPLE_MANIFESTS: &str = include_str!("../../samples/demo.yaml");

/// The custom resources the embedded API server starts with: kubeplug's own CRDs (`Plugin`
/// and `PluginPolicy`, `host/deploy/crds/`, built in so that `run --embedded` serves them from
/// any directory and tenants' Plugin objects work in the demo), and the CRDs of `Foo`
/// (sample-controller) and `Customcluster` (customcluster) with an example object of each.
pub const SAMPLE_CUSTOM_RESOURCES: [&str; 6] = [
    include_str!("../../deploy/crds/plugins.yaml"),
    include_str!("../../deploy/crds/pluginpolicies.yaml"),
    include_str!("../../../plugins/sample-controller/crd.yaml"),
    include_str!("../../../plugins/sample-controller/example.yaml"),
    include_str!("../../../plugins/customcluster/crd.yaml"),
    include_str!("../../../plugins/customcluster/example.yaml"),
];

/// Starts a [`Host`] and runs it until SIGINT or SIGTERM, then drains and exits 0. Plugins come and go
/// with the files in the plugins directory (unless `--watch=false`); SIGHUP rescans.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = super::run_settings::host_config(&args)?;
    // Requests name the replica they come from (API server audit logs, request logs).
    let user_agent = format!(
        "kubeplug/{} ({})",
        env!("CARGO_PKG_VERSION"),
        config
            .coordination
            .as_ref()
            .map_or(config.controller.host_name.as_str(), |c| c
                .identity
                .as_str())
    );
    let registries = crate::oci::Registries::new(&args.registry).context("the registry flags")?;
    if let (Some(dir), Some(_)) = (&args.plugins, &args.registry.verification_config) {
        tracing::warn!(
            plugins = %dir.display(),
            "--verification-config applies to modules from registries (--plugin oci://…, Plugin objects' images); the files in --plugins carry no signature and are not verified"
        );
    }
    let _pulled_dir = if args.plugin.is_empty() {
        None
    } else {
        let dir = pull_plugins(&registries, &args).await?;
        config.plugins = Some(dir.path().to_path_buf());
        if args.policies.is_none() {
            config.policies = dir.path().to_path_buf();
        }
        Some(dir)
    };
    if let Some(objects) = config.objects.as_mut() {
        objects.registries = Some(registries);
        objects.verification = crate::oci::verification::config_of(&args.registry)?;
    }
    if let Some(ledger) = super::run_settings::ledger_config(&args) {
        match crate::ledger::Ledger::open(&ledger) {
            Ok(ledger) => {
                ledger.register_metrics(&config.controller.metrics);
                config.controller.ledger = Some(ledger);
            }
            // Reconciles never wait on the ledger, nor does the host's start.
            Err(err) => tracing::warn!("{err}: running without the decision ledger"),
        }
    }
    let mut signals = ShutdownSignals::install()?;
    let (client, _embedded) = if args.embedded {
        embedded(&args).await?
    } else {
        (connect_as(&args.cluster, &user_agent).await?, None)
    };
    let host = Host::start(client, config).await?;
    if let Some(addr) = host.server_addr() {
        eprintln!("dashboard: http://{addr}/");
    }
    if args.embedded {
        eprintln!("{}", embedded_hints(&args.kubeconfig_out));
    }
    let controller = host.controller();
    tracing::info!(plugins = ?controller.plugins(), kinds = controller.watched_kinds().len(), watch = args.watch, "running; stop with Ctrl-C, rescan plugins with SIGHUP");
    while signals.recv().await == Signal::Rescan {
        tracing::info!("SIGHUP: rescanning plugins and policies");
        if let Err(err) = host.rescan().await {
            tracing::error!("rescan failed, the running plugins are unchanged: {err}");
        }
    }
    host.shutdown().await;
    Ok(ExitCode::SUCCESS)
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

/// Keeps the embedded API server serving while held.
type Embedded = Option<Box<dyn std::any::Any>>;

/// Starts the embedded API server with the sample objects; a client of it.
#[cfg(feature = "embedded")]
async fn embedded(args: &RunArgs) -> anyhow::Result<(kube::Client, Embedded)> {
    let sim = SAMPLE_CUSTOM_RESOURCES
        .iter()
        .fold(kubeplug_sim::Sim::builder(), |b, m| b.manifest(*m))
        .port(args.embedded_port)
        .auto_create_namespaces(true)
        .manifest(SAMPLE_MANIFESTS)
        .start()
        .await
        .context("cannot start the embedded API server")?;
    sim.write_kubeconfig(&args.kubeconfig_out)?;
    eprintln!("embedded API server at {}", sim.url());
    Ok((sim.client()?, Some(Box::new(sim))))
}

/// What to try first against the embedded API server's sample objects (`kubeconfig` names
/// its kubeconfig), then the rest: printed once the host runs, below the dashboard's URL.
pub fn embedded_hints(kubeconfig: &std::path::Path) -> String {
    let kc = format!("kubectl --kubeconfig {}", kubeconfig.display());
    format!(
        "try first:
  {kc} -n demo scale deploy web --replicas=3      # change-logger: Replicas changed: 1 -> 3
  {kc} -n demo set image deploy/web app=alpine    # image-pinner pins it back to nginx:1.13
  {kc} -n demo describe deploy web                # the Events the plugins reported
then:
  {kc} get events -A -w
  {kc} -n crd-demo patch foo example-foo --type merge -p '{{\"spec\":{{\"replicas\":3}}}}'
  {kc} -n crd-demo patch customcluster example-cluster --type merge -p '{{\"spec\":{{\"count\":1,\"message\":\"bonjour\"}}}}'"
    )
}

/// This build has no embedded API server.
#[cfg(not(feature = "embedded"))]
async fn embedded(_: &RunArgs) -> anyhow::Result<(kube::Client, Embedded)> {
    anyhow::bail!("{}", super::NOT_EMBEDDED)
}
