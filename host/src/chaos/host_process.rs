//! A host as a real process: `kubeplug run` started from the `kubeplug` binary against the
//! run's sim, killed with SIGKILL (no drain, writes in flight abandoned), paused with SIGSTOP
//! and resumed with SIGCONT. What its plugins do, its metrics and its live stream are read
//! from its HTTP endpoints on `--listen`.

use super::schedule::HOST_AGENT;
use anyhow::Context;
use std::collections::VecDeque;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most a host may take to serve its endpoints (it is killed and started again after):
/// its first start may compile the TypeScript and Python ports with a cold cache, minutes on
/// 2 cores, and a host killed meanwhile would start the compile over.
const START: Duration = Duration::from_secs(600);
/// The log lines of a host kept for a failure's message.
const KEPT_LINES: usize = 40;

/// The Lease timings of sharded hosts: short, so a paused or killed replica's keys move
/// within the run (a pause longer than [`LEASE`] lets the other replica take them over).
pub const LEASE: Duration = Duration::from_secs(3);

/// Where sharded hosts keep their Leases: a namespace no plugin is granted, so the writes
/// there are the coordination's own (the policy invariant leaves them out).
pub const LEASE_NAMESPACE: &str = "kubeplug-chaos";
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

/// How to start hosts of one run.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// The `kubeplug` binary.
    pub binary: PathBuf,
    /// The sim's kubeconfig file.
    pub kubeconfig: PathBuf,
    /// Plugins and their policies.
    pub plugins: PathBuf,
    /// Where compiled plugins are cached.
    pub compile_cache: Option<PathBuf>,
    /// `--watch-timeout-seconds`.
    pub watch_timeout: Duration,
    /// Run as a member of a sharded ring (`--sharding`) rather than alone.
    pub sharding: bool,
}

/// A running `kubeplug run`; dropping it kills it.
pub struct HostProcess {
    /// Its number (`chaos-host-N`: its identity and User-Agent).
    pub n: u64,
    child: Child,
    addr: SocketAddr,
    lines: Arc<Mutex<VecDeque<String>>>,
    http: reqwest::Client,
}

impl HostProcess {
    /// Starts host number `n`; returns once it serves its endpoints (its plugins loaded and
    /// its controller started). Its requests carry the User-Agent `kubeplug/<version>
    /// (chaos-host-N)`, which fault rules match: the hostname (`HOSTNAME`) names a lone
    /// host, the identity (`--identity`) a sharded one.
    pub async fn start(n: u64, spec: &HostSpec) -> anyhow::Result<HostProcess> {
        let name = format!("{HOST_AGENT}-{n}");
        let mut command = Command::new(&spec.binary);
        command
            .args([
                "run",
                "--watch=false",
                "--plugin-objects=false",
                "--kubeconfig",
            ])
            .arg(&spec.kubeconfig)
            .arg("--plugins")
            .arg(&spec.plugins)
            .arg("--policies")
            .arg(&spec.plugins)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--debounce-ms",
                "50",
                "--qps",
                "100",
            ])
            .args(["--backoff-max-seconds", "1", "--shutdown-timeout", "1"])
            .arg("--watch-timeout-seconds")
            .arg(spec.watch_timeout.as_secs().max(1).to_string())
            .env("HOSTNAME", &name)
            .env("KUBEPLUG_LOG", "warn")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(cache) = &spec.compile_cache {
            command.arg("--compile-cache").arg(cache);
        }
        if spec.sharding {
            command
                .args([
                    "--sharding",
                    "--identity",
                    &name,
                    "--lease-namespace",
                    LEASE_NAMESPACE,
                ])
                .arg("--lease-duration-seconds")
                .arg(LEASE.as_secs_f64().to_string())
                .arg("--renew-deadline-seconds")
                .arg(RENEW_DEADLINE.as_secs_f64().to_string())
                .arg("--retry-period-seconds")
                .arg(RETRY_PERIOD.as_secs_f64().to_string());
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", spec.binary.display()))?;
        let stderr = child.stderr.take().context("the host's stderr")?;
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("{name}-log"))
            .spawn({
                let lines = lines.clone();
                move || drain(stderr, &lines, addr_tx)
            })
            .context("a thread for the host's log")?;
        let mut host = HostProcess {
            n,
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            lines,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .context("an HTTP client")?,
        };
        match tokio::time::timeout(START, addr_rx).await {
            Ok(Ok(addr)) => host.addr = addr,
            Err(_) => anyhow::bail!("{name} did not serve within {START:?}: {}", host.log_tail()),
            Ok(Err(_)) => {
                let status = host.child.wait().ok();
                anyhow::bail!(
                    "{name} exited before it served ({status:?}): {}",
                    host.log_tail()
                );
            }
        }
        Ok(host)
    }

    /// Its last log lines.
    pub fn log_tail(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// What `GET /plugins` says: the plugin files that do not run (with their error), the
    /// plugins of `wanted` not running, and the keys still queued in all.
    pub async fn plugins(&self, wanted: &[&str]) -> anyhow::Result<PluginState> {
        let body: serde_json::Value = self
            .http
            .get(format!("http://{}/plugins", self.addr))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let running = body["running"].as_array().cloned().unwrap_or_default();
        let mut state = PluginState::default();
        for file in body["files"].as_array().into_iter().flatten() {
            if let Some(error) = file["error"].as_str() {
                state.problems.push(format!(
                    "chaos-host-{}: plugin file {} left failed: {error}",
                    self.n,
                    file["file"].as_str().unwrap_or("?")
                ));
            }
        }
        for name in wanted {
            if !running.iter().any(|r| r["name"] == *name) {
                state.problems.push(format!(
                    "chaos-host-{}: plugin {name} is not running",
                    self.n
                ));
            }
        }
        state.queued = running.iter().filter_map(|r| r["queued"].as_u64()).sum();
        Ok(state)
    }

    /// Its name and the base URL of its endpoints.
    pub fn endpoint(&self) -> super::live::Endpoint {
        super::live::Endpoint {
            name: format!("{HOST_AGENT}-{}", self.n),
            base: format!("http://{}", self.addr),
        }
    }

    /// Freezes it (SIGSTOP): its threads stop where they are, its sockets stay open.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal("-STOP")
    }

    /// Lets it run again (SIGCONT).
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .context("cannot run kill")?;
        anyhow::ensure!(status.success(), "kill {signal} {} failed", self.child.id());
        Ok(())
    }

    /// Stops it at once (SIGKILL), as the kernel would: no drain.
    pub fn kill(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a host says about its plugins.
#[derive(Debug, Default)]
pub struct PluginState {
    /// Plugins failed or not running, one sentence each.
    pub problems: Vec<String>,
    /// Keys waiting in its queues.
    pub queued: u64,
}

/// Reads the host's stderr to its end (a pipe left full would block it): sends the address
/// of its `dashboard: http://ADDR/` line, keeps the last lines.
fn drain(
    stderr: impl std::io::Read,
    lines: &Mutex<VecDeque<String>>,
    addr: tokio::sync::oneshot::Sender<SocketAddr>,
) {
    let mut addr = Some(addr);
    for line in std::io::BufReader::new(stderr)
        .lines()
        .map_while(std::io::Result::ok)
    {
        if let Some(found) = line
            .strip_prefix("dashboard: http://")
            .and_then(|rest| rest.trim_end_matches('/').parse().ok())
            && let Some(tx) = addr.take()
        {
            let _ = tx.send(found);
        }
        let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}
