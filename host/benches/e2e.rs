//! End to end against what users would write instead: kubeplug running image-pinner as a
//! plugin, and a kube-rs `Controller` running the same image-pinner code compiled natively
//! (this bench binary re-executed as that controller), each as its own process against its
//! own `kubeplug sim` process loaded with the same `KUBEPLUG_E2E_OBJECTS` Deployments (default
//! 10,000; the ~6 KB fixture of `tests/fixtures`, each needing one strategic patch).
//!
//! Measured today, for both, from the same run: cold start until every Deployment is patched
//! (wall time, CPU seconds, API requests and patches sent, read from the API server's request
//! log), RSS once converged (bytes per cached object), and the idle change-to-patch latency
//! (p50/p99 over 100 changes, from the API server's microsecond timestamps). Not measured yet
//! (issue 15): no-op reconcile rate, latency under load, ten controllers, RSS per plugin.
//!
//! Run with `cargo bench -p kubeplug --bench e2e` after `make plugins`.

use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::controller::{Action as Requeue, Controller};
use kubeplug_sdk::{Action, Reconciler};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set in the child that runs the kube-rs controller: the kubeconfig to use.
const BASELINE_ENV: &str = "KUBEPLUG_E2E_BASELINE_KUBECONFIG";
const NAMESPACE: &str = "bench";
const LIMIT: Duration = Duration::from_secs(900);

fn main() {
    if let Ok(kubeconfig) = std::env::var(BASELINE_ENV) {
        baseline(&kubeconfig);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("KUBEPLUG_E2E_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let tmp = tempfile::tempdir().unwrap();
    write_objects(tmp.path(), n);
    write_plugins(tmp.path());
    let kubeplug = run(tmp.path(), n, Contender::Kubeplug);
    // KUBEPLUG_E2E_ONLY=kubeplug: no baseline (for experiments on kubeplug alone).
    if std::env::var("KUBEPLUG_E2E_ONLY").is_ok_and(|v| v == "kubeplug") {
        println!(
            "kubeplug alone: change to patch p50 {:.1} ms, p99 {:.1} ms, idle",
            percentile(&kubeplug.latency, 0.5).as_secs_f64() * 1e3,
            percentile(&kubeplug.latency, 0.99).as_secs_f64() * 1e3
        );
        return;
    }
    let kube_rs = run(tmp.path(), n, Contender::KubeRs);
    println!();
    println!(
        "e2e: {n} Deployments of {} bytes, each needing one strategic patch",
        fixture().to_string().len()
    );
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "figure", "kubeplug", "kube-rs", "ratio"
    );
    let row = |name: &str, a: f64, b: f64, unit: &str| {
        println!(
            "{:<34} {:>12.1}{unit:>2} {:>12.1}{unit:>2} {:>7.2}x",
            name,
            a,
            b,
            a / b
        );
    };
    row(
        "cold start to converged",
        kubeplug.wall.as_secs_f64(),
        kube_rs.wall.as_secs_f64(),
        "s",
    );
    row("CPU seconds", kubeplug.cpu, kube_rs.cpu, "s");
    row(
        "API requests",
        kubeplug.requests as f64,
        kube_rs.requests as f64,
        "",
    );
    row(
        "patches sent",
        kubeplug.patches as f64,
        kube_rs.patches as f64,
        "",
    );
    row(
        "patches refused",
        kubeplug.failed as f64,
        kube_rs.failed as f64,
        "",
    );
    row(
        "objects patched twice or more",
        kubeplug.twice as f64,
        kube_rs.twice as f64,
        "",
    );
    row("RSS converged", kubeplug.rss_mib, kube_rs.rss_mib, "Mi");
    row(
        "RSS per cached object",
        kubeplug.rss_mib * 1024.0 / n as f64,
        kube_rs.rss_mib * 1024.0 / n as f64,
        "Ki",
    );
    for (name, p) in [
        ("change to patch p50, idle", 0.5),
        ("change to patch p99, idle", 0.99),
    ] {
        row(
            name,
            percentile(&kubeplug.latency, p).as_secs_f64() * 1e3,
            percentile(&kube_rs.latency, p).as_secs_f64() * 1e3,
            "ms",
        );
    }
    println!(
        "e2e (partial): throughput {:.2} x kube-rs, memory {:.2} x kube-rs (one controller each), patches {} vs {}",
        kube_rs.wall.as_secs_f64() / kubeplug.wall.as_secs_f64(),
        kubeplug.rss_mib / kube_rs.rss_mib,
        kubeplug.patches,
        kube_rs.patches
    );
    println!(
        "e2e: p99 {:.1} ms (kube-rs {:.1} ms)",
        percentile(&kubeplug.latency, 0.99).as_secs_f64() * 1e3,
        percentile(&kube_rs.latency, 0.99).as_secs_f64() * 1e3
    );
}

fn fixture() -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/deployment-6k.json"),
    )
    .expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// `n` copies of the fixture, for the sim to load at start.
fn write_objects(dir: &Path, n: usize) {
    let base = fixture();
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut d = base.clone();
            let meta = d["metadata"].as_object_mut().unwrap();
            for field in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
                meta.remove(field);
            }
            meta.insert("name".into(), format!("d{i:05}").into());
            meta.insert("namespace".into(), NAMESPACE.into());
            d.as_object_mut().unwrap().remove("status");
            d
        })
        .collect();
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    // 200 objects per file: the loader bounds the YAML nodes of one file.
    for (i, chunk) in items.chunks(200).enumerate() {
        let docs: Vec<String> = chunk.iter().map(Value::to_string).collect();
        std::fs::write(
            dir.join(format!("objects/deployments-{i:03}.yaml")),
            docs.join("\n---\n"),
        )
        .unwrap();
    }
}

fn write_plugins(dir: &Path) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = std::env::var_os("KUBEPLUG_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
        .join("image-pinner.wasm");
    assert!(built.exists(), "run `make plugins` first");
    std::fs::copy(built, plugins.join("image-pinner.wasm")).unwrap();
    std::fs::write(
        plugins.join("image-pinner.policy.yaml"),
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: image-pinner}\nspec:\n  mode: enforce\n  namespaces: {all: true}\n  rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]\n  limits: {writesPerSecond: 100000, writeBurst: 100000}\n  config: {image: \"nginx:1.13\"}\n",
    )
    .unwrap();
}

#[derive(Debug, Clone, Copy)]
enum Contender {
    Kubeplug,
    KubeRs,
}

/// What one contender's run came to.
struct Figures {
    wall: Duration,
    cpu: f64,
    requests: usize,
    patches: usize,
    /// Patches the API server refused (status 300 or more).
    failed: usize,
    /// Objects patched successfully more than once.
    twice: usize,
    rss_mib: f64,
    /// Change-to-patch latencies, idle, sorted.
    latency: Vec<Duration>,
}

/// How many idle changes the latency is measured over.
const CHANGES: usize = 100;
/// The User-Agent of the bench's own writes.
const BENCH_AGENT: &str = "kubeplug-e2e-bench";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn http_patch(port: u16, path: &str, body: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let sent = write!(
        stream,
        "PATCH {path} HTTP/1.1\r\nHost: sim\r\nUser-Agent: {BENCH_AGENT}\r\nContent-Type: application/strategic-merge-patch+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut response = String::new();
    sent.is_ok()
        && stream.read_to_string(&mut response).is_ok()
        && response.starts_with("HTTP/1.1 200")
}

fn timestamp(record: &Value) -> Option<k8s_openapi::jiff::Timestamp> {
    record["time"].as_str()?.parse().ok()
}

/// Idle change-to-patch latency: one Deployment at a time set back to alpine, then the time
/// from that write to the controller's patch of it, both as the API server logged them.
fn latencies(port: u16, n: usize, mut cursor: u64) -> Vec<Duration> {
    let unpin =
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"alpine"}]}}}}"#;
    let mut out = Vec::new();
    for i in 0..CHANGES {
        let name = format!("d{:05}", (i * 97) % n);
        let path = format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}");
        assert!(
            http_patch(port, &path, unpin),
            "the bench's own patch failed"
        );
        let start = Instant::now();
        let (mut changed, mut fixed) = (None, None);
        while fixed.is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{name} never patched back"
            );
            std::thread::sleep(Duration::from_millis(2));
            let Some(body) = http_get(port, &format!("/sim/requests?since={cursor}")) else {
                continue;
            };
            let records: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
            for r in &records {
                cursor = cursor.max(r["seq"].as_u64().unwrap_or(0) + 1);
                if r["verb"] != "patch" || r["name"] != name.as_str() {
                    continue;
                }
                match r["userAgent"] == BENCH_AGENT {
                    true => changed = timestamp(r),
                    false if changed.is_some() => fixed = timestamp(r),
                    false => {}
                }
            }
        }
        let (Some(a), Some(b)) = (changed, fixed) else {
            unreachable!()
        };
        out.push(Duration::from_micros(
            b.duration_since(a).as_micros().max(0) as u64,
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    out.sort();
    out
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    // The sim answers large bodies chunked.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            out.push_str(tail.get(..size)?);
            rest = tail.get(size + 2..)?;
        }
        return Some(out);
    }
    Some(body.to_string())
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn run(dir: &Path, n: usize, who: Contender) -> Figures {
    let port = free_port();
    let kubeconfig = dir.join(format!("kc-{port}"));
    let kubeplug = env!("CARGO_BIN_EXE_kubeplug");
    let mut sim = Process(
        Command::new(kubeplug)
            .args(["sim", "--port", &port.to_string(), "--load"])
            .arg(dir.join("objects"))
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--auto-create-namespaces")
            .env("KUBEPLUG_LOG", "warn")
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while http_get(port, "/version").is_none() || !kubeconfig.exists() {
        assert!(start.elapsed() < LIMIT, "the sim did not start");
        if let Some(status) = sim.0.try_wait().unwrap() {
            panic!("the sim exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut controller = match who {
        Contender::Kubeplug => Command::new(kubeplug)
            .args(["run", "--watch=false", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .env("KUBEPLUG_CACHE_DIR", dir.join("cache"))
            .env("KUBEPLUG_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        Contender::KubeRs => Command::new(std::env::current_exe().unwrap())
            .env(BASELINE_ENV, &kubeconfig)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    };
    let pid = controller.id();
    let t0 = Instant::now();
    let mut cursor = 0u64;
    let (mut requests, mut patches) = (0usize, 0usize);
    let mut patched = HashSet::new();
    let mut failed = 0usize;
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    while patched.len() < n {
        assert!(
            t0.elapsed() < LIMIT,
            "{who:?}: {} of {n} patched",
            patched.len()
        );
        std::thread::sleep(Duration::from_millis(100));
        let Some(body) = http_get(port, &format!("/sim/requests?since={cursor}")) else {
            continue;
        };
        let records: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        for r in &records {
            cursor = cursor.max(r["seq"].as_u64().unwrap_or(0) + 1);
            requests += 1;
            if r["verb"] == "patch" && r["resource"] == "deployments" {
                patches += 1;
                let name = r["name"].as_str().unwrap_or_default().to_string();
                if r["status"].as_u64().is_some_and(|s| s < 300) {
                    *counts.entry(name.clone()).or_default() += 1;
                    patched.insert(name);
                } else {
                    failed += 1;
                }
            }
        }
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(3));
    let rss = rss_mib(pid);
    // Late patches (a reconcile of a stale cache) count too.
    if let Some(body) = http_get(port, &format!("/sim/requests?since={cursor}")) {
        let records: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        requests += records.len();
        for r in records
            .iter()
            .filter(|r| r["verb"] == "patch" && r["resource"] == "deployments")
        {
            patches += 1;
            if r["status"].as_u64().is_some_and(|s| s < 300) {
                *counts
                    .entry(r["name"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1;
            } else {
                failed += 1;
            }
        }
    }
    let twice = counts.values().filter(|&&c| c > 1).count();
    // Only now the bench's own changes: they must not count as the controller's patches.
    let latency = latencies(port, n, cursor);
    let _ = controller.kill();
    let _ = controller.wait();
    eprintln!(
        "{who:?}: converged in {wall:.2?}, {cpu:.1} CPU s, {requests} requests, {patches} patches ({failed} refused, {twice} objects patched more than once), RSS {rss:.0} MiB"
    );
    Figures {
        wall,
        cpu,
        requests,
        patches,
        failed,
        twice,
        rss_mib: rss,
        latency,
    }
}

#[derive(Debug, thiserror::Error)]
enum BaselineError {
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("plugin: {0:?}")]
    Plugin(String),
}

/// The kube-rs controller: its own watch and store, the image-pinner code called natively.
fn baseline(kubeconfig: &str) {
    use futures::StreamExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<Deployment> = kube::Api::all(client.clone());
        Controller::new(api, kube::runtime::watcher::Config::default())
            .run(
                reconcile,
                |_, _, _| Requeue::requeue(Duration::from_secs(1)),
                Arc::new(client),
            )
            .for_each(|_| async {})
            .await;
    });
}

async fn reconcile(
    d: Arc<Deployment>,
    client: Arc<kube::Client>,
) -> Result<Requeue, BaselineError> {
    let namespace = d.metadata.namespace.clone();
    let name = d.metadata.name.clone().unwrap_or_default();
    let request = kubeplug_sdk::Request {
        target: kubeplug_sdk::ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: namespace.clone(),
            name: name.clone(),
        },
        object: Some(serde_json::to_string(&*d)?),
        previous: None,
        reason: kubeplug_sdk::Reason::Changed,
        attempt: 1,
        config: None,
    };
    let actions = image_pinner::ImagePinner::reconcile(request)
        .map_err(|e| BaselineError::Plugin(format!("{e:?}")))?;
    let api: kube::Api<Deployment> =
        kube::Api::namespaced((*client).clone(), namespace.as_deref().unwrap_or("default"));
    for action in actions {
        if let Action::Patch(p) = action {
            let body: Value = serde_json::from_str(&p.body)?;
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(&body),
            )
            .await?;
        }
    }
    Ok(Requeue::await_change())
}
