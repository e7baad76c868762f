//! Hot reload cost: time from writing a new plugin version into the plugins directory to the
//! new version's first reconcile (through inotify, the debounce and the swap), the same with
//! the rescan called directly (the baseline without file watching), and the host's memory
//! over 1,000 reloads of the same plugin (alternating two versions, so each is a real swap).
//!
//! The API server runs as a separate `kubeplug sim` process, so the memory measured is the
//! host's. Run: `make plugins && cargo bench -p kubeplug --bench reload` (`RELOAD_BENCH_RELOADS`
//! changes the number of reloads).

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use kubeplug::controller::{Controller, ControllerConfig};
use kubeplug::plugin::{PluginRuntime, RuntimeConfig};
use kubeplug::policy::Decision;
use kubeplug::reload::{ReloadConfig, Reloader};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const SAMPLES: usize = 41;
const POLICY: &str = include_str!("../../tests/fixtures/pinner.policy.yaml");

fn test_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("KUBEPLUG_TEST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    path
}

/// Resident memory of this process, from /proc.
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = percentile(&samples, 0.5);
    println!(
        "{what:<44} p50 {:7.1} ms  p90 {:7.1} ms  max {:7.1} ms  ({} samples)",
        ms(p50),
        ms(percentile(&samples, 0.9)),
        ms(*samples.last().unwrap()),
        samples.len()
    );
    p50
}

/// Writes `bytes` to a temporary name and renames it over `path`.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_file_name(".pinner.wasm.tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits for the first executed patch by plugin `version`.
async fn first_reconcile(rx: &mut mpsc::UnboundedReceiver<String>, version: &str) {
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            v = rx.recv() => if v.as_deref() == Some(version) { return },
            _ = &mut deadline => panic!("no reconcile by {version} within 30 s"),
        }
    }
}

/// The embedded API server in a process of its own (`kubeplug sim`), so this process's
/// memory is the host's alone (the server keeps a history of every object version).
async fn start_sim(dir: &Path) -> anyhow::Result<(SimProcess, kube::Client)> {
    let kubeconfig = dir.join("sim.kubeconfig");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args([
            "sim",
            "--port",
            "0",
            "--status-delay",
            "20",
            "--auto-create-namespaces",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .env("KUBEPLUG_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(SimProcess)?;
    let start = Instant::now();
    while !kubeconfig.exists() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(30),
            "kubeplug sim did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok((child, kube::Client::try_from(config)?))
}

/// The `kubeplug sim` process, killed when dropped.
struct SimProcess(std::process::Child);

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let reloads: usize = std::env::var("RELOAD_BENCH_RELOADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let versions = [
        ("1.0.0", std::fs::read(test_plugin("pinner-v1"))?),
        ("2.0.0", std::fs::read(test_plugin("pinner-v2"))?),
    ];
    let work = tempfile::tempdir()?;
    let (_sim, client) = start_sim(work.path()).await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "bench")
        .create(&PostParams::default(), &deployment)
        .await?;

    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins)?;
    let file = plugins.join("pinner.wasm");
    std::fs::write(&file, &versions[0].1)?;
    std::fs::write(plugins.join("pinner.policy.yaml"), POLICY)?;
    let plugin_runtime = Arc::new(PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(work.path().join("cache")),
        ..RuntimeConfig::default()
    })?);
    let config = ControllerConfig::default();
    let mut audit = config.audit.subscribe();
    let (tx, mut patched) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(record) = audit.recv().await {
            if record.action == "patch" && record.decision == Decision::Executed {
                let _ = tx.send(record.plugin.version.clone());
            }
        }
    });
    let controller = Controller::new(client, config);
    let reloader = Reloader::new(
        plugin_runtime,
        controller.clone(),
        ReloadConfig::new(&plugins, &plugins),
    );
    reloader.rescan(false).await?;
    first_reconcile(&mut patched, "1.0.0").await;
    let debounce = ReloadConfig::new(&plugins, &plugins).debounce;
    println!(
        "hot reload: pinner {} KB, debounce {} ms, 2 worker threads",
        versions[1].1.len() / 1024,
        debounce.as_millis()
    );

    // Through the file watcher, as operators see it.
    let watch = reloader.watch()?;
    let start = Instant::now();
    replace(&file, &versions[1].1);
    first_reconcile(&mut patched, "2.0.0").await;
    println!(
        "{:<44} {:7.1} ms (compiles v2, fills the cache)",
        "first load of a new file (cold)",
        start.elapsed().as_secs_f64() * 1000.0
    );
    let mut watched = Vec::new();
    for i in 0..SAMPLES {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (version, bytes) = &versions[i % 2];
        while patched.try_recv().is_ok() {}
        let start = Instant::now();
        replace(&file, bytes);
        first_reconcile(&mut patched, version).await;
        watched.push(start.elapsed());
    }
    drop(watch);
    let through_watch = report("file write -> first reconcile (file watch)", watched);

    // Baseline: the rescan called right after the write (no event delivery, no debounce).
    let mut direct = Vec::new();
    let mut next = SAMPLES;
    for _ in 0..SAMPLES {
        let (version, bytes) = &versions[next % 2];
        next += 1;
        while patched.try_recv().is_ok() {}
        let start = Instant::now();
        replace(&file, bytes);
        reloader.rescan(false).await?;
        first_reconcile(&mut patched, version).await;
        direct.push(start.elapsed());
    }
    let baseline = report("file write -> first reconcile (direct rescan)", direct);
    println!(
        "{:<44} {:7.2}x (the difference is event delivery + debounce)",
        "file watch / direct rescan",
        through_watch.as_secs_f64() / baseline.as_secs_f64()
    );

    // Memory over many reloads of the same plugin.
    let before = rss_mib();
    let mut marks = vec![(0, before)];
    for i in 1..=reloads {
        let (version, bytes) = &versions[next % 2];
        next += 1;
        replace(&file, bytes);
        reloader.rescan(false).await?;
        first_reconcile(&mut patched, version).await;
        if i % (reloads / 4).max(1) == 0 {
            marks.push((i, rss_mib()));
        }
    }
    let after = rss_mib();
    let marks: Vec<String> = marks.iter().map(|(i, m)| format!("{i}: {m:.1}")).collect();
    println!("RSS (MiB) after N reloads: {}", marks.join(", "));
    println!(
        "{:<44} {:7.2}x ({before:.1} -> {after:.1} MiB)",
        format!("RSS after {reloads} reloads / before"),
        after / before
    );
    controller.shutdown().await;
    Ok(())
}
