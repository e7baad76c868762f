//! Hot reload end to end: the controller and the reloader following a real plugins directory
//! (inotify), against the embedded API server. Files change the ways operators change them:
//! plain overwrite, partial write, write-to-temp-then-rename, a ConfigMap volume's `..data`
//! swap, breakage and removal.

use crate::common;

use common::cluster::{
    Result, capture_logs, deployment, eventually, fast_config, image_of, load, log_lines_with,
    runtime, sim,
};
use common::host_process::HostProcess;
use common::{plugin, test_plugin};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubeplug::controller::{Controller, PluginInstance, StartError};
use kubeplug::policy::{AuditRecord, Decision, Mode, Policy, PolicyDocument};
use kubeplug::reload::{FileStatus, ReloadConfig, Reloader, WatchTask};
use kubeplug_sim::{ResourceKind, Sim};
use serde_json::json;
use sha2::Digest;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;
use tokio::sync::broadcast::error::RecvError;

const V1: &str = "example.com/app:v1";
const V2: &str = "example.com/app:v2";
const WAIT: Duration = Duration::from_secs(30);

/// `pinner` may patch container images of Deployments and Pods anywhere, fast.
const PINNER_POLICY: &str = include_str!("../fixtures/pinner.policy.yaml");

fn pinner(version: u8) -> Vec<u8> {
    std::fs::read(test_plugin(&format!("pinner-v{version}"))).unwrap()
}

/// A controller and a watching reloader on a plugins directory, with every audit record
/// collected.
struct Host {
    sim: Sim,
    client: kube::Client,
    controller: Controller,
    reloader: Reloader,
    dir: PathBuf,
    audit: Arc<Mutex<Vec<Arc<AuditRecord>>>>,
    /// Audit records the collector missed (it lagged behind): must stay 0.
    lost: Arc<AtomicU64>,
    _watch: WatchTask,
    _tmp: TempDir,
}

impl Host {
    /// Starts on `tmp` (prepared by the caller): first scan, then following events.
    async fn start(tmp: TempDir) -> Result<Host> {
        Host::start_on(tmp, sim().await?).await
    }

    /// Like [`Host::start`], against `sim`.
    async fn start_on(tmp: TempDir, sim: Sim) -> Result<Host> {
        capture_logs();
        let client = sim.client()?;
        let config = fast_config();
        let mut records = config.audit.subscribe();
        let audit = Arc::new(Mutex::new(Vec::new()));
        let sink = audit.clone();
        let lost = Arc::new(AtomicU64::new(0));
        let lost_count = lost.clone();
        tokio::spawn(async move {
            loop {
                match records.recv().await {
                    Ok(record) => sink.lock().unwrap().push(record),
                    Err(RecvError::Lagged(n)) => {
                        lost_count.fetch_add(n, Ordering::SeqCst);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        let controller = Controller::new(client.clone(), config);
        let mut reload = ReloadConfig::new(tmp.path(), tmp.path());
        reload.debounce = Duration::from_millis(30);
        let reloader = Reloader::new(runtime(), controller.clone(), reload);
        reloader.rescan(false).await?;
        let watch = reloader.watch()?;
        Ok(Host {
            sim,
            client,
            controller,
            reloader,
            dir: tmp.path().to_path_buf(),
            audit,
            lost,
            _watch: watch,
            _tmp: tmp,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    async fn create(&self, ns: &str, names: impl IntoIterator<Item = String>) -> Result {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let creates = names.into_iter().map(|name| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &deployment(&name, 1, "nginx:1"))
                    .await
            }
        });
        for created in futures::future::join_all(creates).await {
            created?;
        }
        Ok(())
    }

    fn version(&self) -> Option<String> {
        self.controller
            .plugin("pinner")
            .map(|p| p.metadata().version.clone())
    }

    async fn wait_version(&self, version: &str) {
        eventually(WAIT, &format!("pinner {version} running"), || {
            self.version().as_deref() == Some(version)
        })
        .await;
    }

    async fn wait_images(&self, ns: &str, image: &str) {
        eventually(
            WAIT,
            &format!("every Deployment in {ns} at {image}"),
            || {
                let all = self.sim.list("deployments", Some(ns));
                !all.is_empty()
                    && all.iter().all(|d| {
                        d.pointer("/spec/template/spec/containers/0/image")
                            .and_then(|i| i.as_str())
                            == Some(image)
                    })
            },
        )
        .await;
    }

    fn status(&self, file: &str) -> Option<FileStatus> {
        self.reloader
            .status()
            .into_iter()
            .find(|s| s.file.file_name().is_some_and(|n| n == file))
    }

    fn metric(&self, name: &str, file: &str) -> f64 {
        let needle = format!("{name}{{file=\"{}\"}} ", self.path(file).display());
        self.controller
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(needle.as_str()))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Executed patches per key, in order, as the plugin versions that sent them.
    fn patches(&self) -> HashMap<String, Vec<String>> {
        assert_eq!(self.lost.load(Ordering::SeqCst), 0, "audit records lost");
        let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
        for r in self.audit.lock().unwrap().iter() {
            if r.action == "patch" && r.decision == Decision::Executed {
                by_key
                    .entry(r.key.clone())
                    .or_default()
                    .push(r.plugin.version.clone());
            }
        }
        by_key
    }
}

/// A temp dir holding `pinner.wasm` at `version` and its policy.
fn plugins_dir(version: u8) -> Result<TempDir> {
    let tmp = tempfile::tempdir()?;
    std::fs::write(tmp.path().join("pinner.wasm"), pinner(version))?;
    std::fs::write(tmp.path().join("pinner.policy.yaml"), PINNER_POLICY)?;
    Ok(tmp)
}

/// Writes `bytes` beside `path` and renames it over `path`, as editors and `kubectl cp`
/// wrappers do.
fn replace_atomically(path: &Path, bytes: &[u8]) -> Result {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_v1_for_v2_under_load_loses_and_repeats_nothing() -> Result {
    let host = Host::start(plugins_dir(1)?).await?;
    host.wait_version("1.0.0").await;
    let names: Vec<String> = (0..500).map(|i| format!("app-{i:03}")).collect();
    host.create("load", names.clone()).await?;
    // Swap while v1 is still working through the keys.
    eventually(WAIT, "v1 patching", || {
        host.patches().values().flatten().count() >= 50
    })
    .await;
    replace_atomically(&host.path("pinner.wasm"), &pinner(2))?;
    host.wait_images("load", V2).await;
    assert_eq!(host.sim.count("deployments", Some("load")), 500);
    // Let stragglers (a second patch, an old-version call) show up if there were any.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let patches = host.patches();
    let (mut by_v1, mut by_v2) = (0, 0);
    for name in &names {
        let key = format!("load/{name}");
        let versions = patches.get(&key).cloned().unwrap_or_default();
        let v2 = versions.iter().filter(|v| *v == "2.0.0").count();
        assert_eq!(v2, 1, "{key}: exactly one patch by v2, got {versions:?}");
        let first_v2 = versions.iter().position(|v| v == "2.0.0").unwrap();
        assert!(
            versions[first_v2..].iter().all(|v| v == "2.0.0"),
            "{key}: no v1 call after v2's: {versions:?}"
        );
        assert!(versions.len() <= 2, "{key}: {versions:?}");
        by_v1 += versions.len() - v2;
        by_v2 += v2;
    }
    assert!(by_v1 >= 50, "v1 ran before the swap ({by_v1})");
    assert_eq!(by_v2, 500);
    eprintln!("v1 patched {by_v1} Deployments before the swap; v2 patched all 500");
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrites_partial_writes_and_renames_are_followed() -> Result {
    let tmp = tempfile::tempdir()?;
    std::fs::write(tmp.path().join("pinner.policy.yaml"), PINNER_POLICY)?;
    let host = Host::start(tmp).await?;
    host.create("files", (0..3).map(|i| format!("web-{i}")))
        .await?;
    assert_eq!(host.version(), None);

    // A new file.
    std::fs::write(host.path("pinner.wasm"), pinner(1))?;
    host.wait_images("files", V1).await;

    // A plain overwrite.
    std::fs::write(host.path("pinner.wasm"), pinner(2))?;
    host.wait_images("files", V2).await;

    // Write to a temporary file, rename over.
    replace_atomically(&host.path("pinner.wasm"), &pinner(1))?;
    host.wait_images("files", V1).await;

    // A partial write that completes later (a slow copy): the half file is never loaded
    // nor reported broken.
    let v2 = pinner(2);
    let mut file = std::fs::File::create(host.path("pinner.wasm"))?;
    file.write_all(&v2[..v2.len() / 2])?;
    file.flush()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(host.version().as_deref(), Some("1.0.0"), "v1 still runs");
    assert_eq!(host.status("pinner.wasm").unwrap().error, None);
    file.write_all(&v2[v2.len() / 2..])?;
    drop(file);
    host.wait_images("files", V2).await;
    let status = host.status("pinner.wasm").unwrap();
    assert_eq!(status.error, None);
    assert_eq!(status.running, Some(status.digest.clone()));
    assert_eq!(
        host.metric("kubeplug_plugin_load_failures_total", "pinner.wasm"),
        0.0
    );

    // The same content again is no reload at all.
    let reloads = log_lines_with("plugin updated").len();
    std::fs::write(host.path("pinner.wasm"), &v2)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log_lines_with("plugin updated").len(), reloads);
    host.controller.shutdown().await;
    Ok(())
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_volume_swap_is_followed() -> Result {
    use std::os::unix::fs::symlink;
    // The layout the kubelet writes: files are links through `..data` into a timestamped
    // directory; an update writes a new directory and renames a new `..data` link over.
    let tmp = tempfile::tempdir()?;
    write_version_at(tmp.path(), "..2026_11_22_08_00_00.1", 1)?;
    symlink("..2026_11_22_08_00_00.1", tmp.path().join("..data"))?;
    for file in ["pinner.wasm", "pinner.policy.yaml"] {
        symlink(format!("..data/{file}"), tmp.path().join(file))?;
    }
    let host = Host::start(tmp).await?;
    host.create("cm", (0..3).map(|i| format!("web-{i}")))
        .await?;
    host.wait_images("cm", V1).await;

    let dir = host.dir.clone();
    write_version_at(&dir, "..2026_11_22_08_05_00.2", 2)?;
    symlink("..2026_11_22_08_05_00.2", dir.join("..data_tmp"))?;
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data"))?;
    std::fs::remove_dir_all(dir.join("..2026_11_22_08_00_00.1"))?;
    host.wait_images("cm", V2).await;
    assert_eq!(host.version().as_deref(), Some("2.0.0"));
    assert_eq!(host.status("pinner.wasm").unwrap().error, None);
    host.controller.shutdown().await;
    Ok(())
}

/// A ConfigMap volume's timestamped data directory `name` holding pinner at `version`.
fn write_version_at(dir: &Path, name: &str, version: u8) -> Result {
    let data = dir.join(name);
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("pinner.wasm"), pinner(version))?;
    std::fs::write(data.join("pinner.policy.yaml"), PINNER_POLICY)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_good_version_serving_until_fixed() -> Result {
    let host = Host::start(plugins_dir(1)?).await?;
    host.wait_version("1.0.0").await;
    let good = host.status("pinner.wasm").unwrap().digest;
    let failures = || host.metric("kubeplug_plugin_load_failures_total", "pinner.wasm");

    std::fs::write(host.path("pinner.wasm"), b"not wasm at all")?;
    eventually(WAIT, "the broken file reported", || {
        host.status("pinner.wasm").unwrap().error.is_some()
    })
    .await;
    let status = host.status("pinner.wasm").unwrap();
    assert!(
        status
            .error
            .as_deref()
            .unwrap()
            .contains("not a WebAssembly file"),
        "{status:?}"
    );
    assert_eq!(
        status.running.as_deref(),
        Some(good.as_str()),
        "v1 keeps running"
    );
    assert_eq!(failures(), 1.0);
    assert_eq!(host.metric("kubeplug_plugin_failing", "pinner.wasm"), 1.0);
    // It keeps serving: a new Deployment is pinned by v1.
    host.create("broken", ["late".to_string()]).await?;
    host.wait_images("broken", V1).await;

    // The same broken content again, and a SIGHUP-less rescan: reported once, not retried.
    std::fs::write(host.path("pinner.wasm"), b"not wasm at all")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    host.reloader.rescan(false).await?;
    assert_eq!(failures(), 1.0, "one report per distinct failure");
    let file = host.path("pinner.wasm").display().to_string();
    let reported = log_lines_with("plugin file not applied")
        .into_iter()
        .filter(|l| l.contains(&file))
        .count();
    assert_eq!(reported, 1);

    // Another failure: a plugin built for a contract this host does not know.
    std::fs::write(
        host.path("pinner.wasm"),
        std::fs::read(test_plugin("future-contract"))?,
    )?;
    eventually(WAIT, "the second failure reported", || failures() == 2.0).await;
    let status = host.status("pinner.wasm").unwrap();
    assert!(
        status.error.as_deref().unwrap().contains("contract"),
        "{status:?}"
    );
    assert_eq!(host.version().as_deref(), Some("1.0.0"));

    // Fixed: the new version runs and the failure clears.
    std::fs::write(host.path("pinner.wasm"), pinner(2))?;
    host.wait_images("broken", V2).await;
    let status = host.status("pinner.wasm").unwrap();
    assert_eq!(status.error, None);
    assert_eq!(status.running, Some(status.digest.clone()));
    assert_eq!(host.metric("kubeplug_plugin_failing", "pinner.wasm"), 0.0);
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_reconciling_another_kind_restarts_the_plugin() -> Result {
    let host = Host::start(plugins_dir(1)?).await?;
    host.create("kinds", ["web".to_string()]).await?;
    host.wait_images("kinds", V1).await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "solo"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}
    }))?;
    Api::<Pod>::namespaced(host.client.clone(), "kinds")
        .create(&PostParams::default(), &pod)
        .await?;

    replace_atomically(&host.path("pinner.wasm"), &pinner(3))?;
    host.wait_version("3.0.0").await;
    eventually(WAIT, "the Pod pinned by v3", || {
        host.sim
            .get("pods", Some("kinds"), "solo")
            .and_then(|p| p.pointer("/spec/containers/0/image").cloned())
            == Some(serde_json::json!("example.com/app:v3"))
    })
    .await;
    let kinds = host.controller.watched_kinds();
    assert!(
        kinds.iter().any(|k| k.kind == "Pod") && kinds.iter().all(|k| k.kind != "Deployment"),
        "Pods watched instead of Deployments: {kinds:?}"
    );
    let restarted = "kubeplug_plugin_reloads_total{plugin=\"pinner\",result=\"restarted\"} 1";
    assert!(
        host.controller.metrics_text().contains(restarted),
        "{}",
        host.controller.metrics_text()
    );
    host.create("kinds", ["late".to_string()]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        image_of(&host.sim, "kinds", "late").as_deref(),
        Some("nginx:1")
    );
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_plugin_stops_its_calls_and_its_unneeded_watch() -> Result {
    let tmp = plugins_dir(1)?;
    // pinner may also read Leases: only it needs that watch.
    std::fs::write(
        tmp.path().join("pinner.policy.yaml"),
        format!("{PINNER_POLICY}  reads: [{{apiVersion: coordination.k8s.io/v1, kind: Lease}}]\n"),
    )?;
    std::fs::copy(
        plugin("change-logger"),
        tmp.path().join("change-logger.wasm"),
    )?;
    let host = Host::start(tmp).await?;
    host.wait_version("1.0.0").await;
    eventually(WAIT, "Leases watched", || {
        host.controller
            .watched_kinds()
            .iter()
            .any(|k| k.kind == "Lease")
    })
    .await;
    host.create("gone", ["before".to_string()]).await?;
    host.wait_images("gone", V1).await;

    std::fs::remove_file(host.path("pinner.wasm"))?;
    eventually(WAIT, "pinner stopped", || host.version().is_none()).await;
    assert_eq!(host.controller.plugins(), ["change-logger"]);
    // The watches are trimmed once its workers have finished, just after it left the set.
    eventually(WAIT, "the Lease watch stopped", || {
        host.controller
            .watched_kinds()
            .iter()
            .all(|k| k.kind != "Lease")
    })
    .await;
    let kinds = host.controller.watched_kinds();
    assert!(
        kinds.iter().any(|k| k.kind == "Deployment"),
        "change-logger still needs Deployments: {kinds:?}"
    );

    // Its calls stopped: a new Deployment is not pinned, while change-logger still sees it.
    let audited = host.audit.lock().unwrap().len();
    host.create("gone", ["after".to_string()]).await?;
    eventually(WAIT, "change-logger reconciling the new Deployment", || {
        host.audit.lock().unwrap()[audited..]
            .iter()
            .any(|r| r.plugin.name == "change-logger" && r.key == "gone/after")
    })
    .await;
    assert_eq!(
        image_of(&host.sim, "gone", "after").as_deref(),
        Some("nginx:1")
    );
    assert!(
        host.audit.lock().unwrap()[audited..]
            .iter()
            .all(|r| r.plugin.name != "pinner"),
        "no pinner call after removal"
    );

    // The API server sees it: after every watch is dropped, Deployments are watched again
    // and Leases are not.
    let cursor = host.sim.requests().cursor();
    host.sim.faults().drop_watches();
    let watched = |resource: &str| {
        host.sim
            .requests()
            .since(cursor)
            .iter()
            .any(|r| r.resource == resource && (r.verb == "watch" || r.verb == "list"))
    };
    eventually(WAIT, "Deployments watched again", || watched("deployments")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!watched("leases"), "nobody watches Leases any more");
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_plugin_does_not_wait_out_its_write_budget() -> Result {
    let tmp = tempfile::tempdir()?;
    std::fs::copy(test_plugin("hostile"), tmp.path().join("hostile.wasm"))?;
    // 100 writes in one call at 1 write per second: 99 s of budget waits.
    std::fs::write(
        tmp.path().join("hostile.policy.yaml"),
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: hostile}\nspec:\n  mode: enforce\n  namespaces: {all: true}\n  rules:\n    - {apiVersion: apps/v1, kind: Deployment, verbs: [patch], fields: [/metadata/labels]}\n  limits: {writesPerSecond: 1, writeBurst: 1}\n  config: {mode: write-burst, count: 100}\n",
    )?;
    let host = Host::start(tmp).await?;
    host.create("budget", ["web".to_string()]).await?;
    let executed = || {
        host.audit
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.plugin.name == "hostile" && r.decision == Decision::Executed)
            .count()
    };
    eventually(WAIT, "hostile writing at its budget", || executed() >= 2).await;

    std::fs::remove_file(host.path("hostile.wasm"))?;
    eventually(WAIT, "hostile removed", || {
        host.controller.plugins().is_empty()
    })
    .await;
    let skipped = host
        .audit
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.plugin.name == "hostile" && r.decision == Decision::Skipped)
        .count();
    assert!(skipped >= 1, "the rest of the call is skipped and audited");
    assert!(
        executed() < 100,
        "not every write waited out: {}",
        executed()
    );
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_changes_are_followed_and_a_broken_policy_keeps_the_last_good_one() -> Result {
    let tmp = tempfile::tempdir()?;
    std::fs::copy(plugin("image-pinner"), tmp.path().join("image-pinner.wasm"))?;
    let policy = |image: &str| {
        format!(
            "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: image-pinner}}\nspec:\n  mode: enforce\n  namespaces: {{all: true}}\n  rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]\n  limits: {{writesPerSecond: 1000, writeBurst: 1000}}\n  config: {{image: \"{image}\"}}\n"
        )
    };
    let file = tmp.path().join("image-pinner.policy.yaml");
    std::fs::write(&file, policy("example.com/a:1"))?;
    let host = Host::start(tmp).await?;
    host.create("pol", ["web".to_string()]).await?;
    host.wait_images("pol", "example.com/a:1").await;

    std::fs::write(&file, policy("example.com/b:2"))?;
    host.wait_images("pol", "example.com/b:2").await;

    std::fs::write(
        &file,
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nspec: [",
    )?;
    eventually(WAIT, "the broken policy reported", || {
        host.status("image-pinner.wasm").unwrap().error.is_some()
    })
    .await;
    let error = host.status("image-pinner.wasm").unwrap().error.unwrap();
    assert!(
        error.contains("image-pinner.policy.yaml") && error.contains("previous policy"),
        "{error}"
    );
    host.create("pol", ["web2".to_string()]).await?;
    host.wait_images("pol", "example.com/b:2").await;

    // No policy file: the default, dry-run — audited, not sent.
    std::fs::remove_file(&file)?;
    eventually(WAIT, "dry-run after the policy is removed", || {
        host.controller
            .policy("image-pinner")
            .is_some_and(|p| p.source.is_none())
    })
    .await;
    host.create("pol", ["web3".to_string()]).await?;
    eventually(WAIT, "a dry-run record for web3", || {
        host.audit
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.key == "pol/web3" && r.decision == Decision::DryRun)
    })
    .await;
    assert_eq!(
        image_of(&host.sim, "pol", "web3").as_deref(),
        Some("nginx:1")
    );
    host.controller.shutdown().await;
    Ok(())
}

/// Every audit record of instance `name` so far.
fn records_of(host: &Host, name: &str) -> Vec<Arc<AuditRecord>> {
    host.audit
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.plugin.name == name)
        .cloned()
        .collect()
}

/// Field managers of every write the sim received.
fn write_managers(sim: &Sim) -> Vec<String> {
    sim.requests()
        .records()
        .into_iter()
        .filter_map(|r| r.field_manager)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_file_runs_under_its_own_name_and_cannot_take_another_policy() -> Result {
    // `aaa-impostor.wasm` sorts before `pinner.wasm` and declares the name `pinner` (it is
    // pinner 2.0.0, which pins another image); so does a symlink to it under a third name.
    let tmp = plugins_dir(1)?;
    std::fs::write(tmp.path().join("aaa-impostor.wasm"), pinner(2))?;
    #[cfg(unix)]
    std::os::unix::fs::symlink("aaa-impostor.wasm", tmp.path().join("alias.wasm"))?;
    let host = Host::start(tmp).await?;
    host.create("imp", (0..3).map(|i| format!("web-{i}")))
        .await?;
    host.wait_images("imp", V1).await;

    // The real plugin keeps its name, its policy and its version.
    assert_eq!(host.version().as_deref(), Some("1.0.0"));
    let real = host.controller.policy("pinner").unwrap();
    assert_eq!(real.mode, Mode::Enforce);
    assert!(
        real.source
            .as_ref()
            .unwrap()
            .ends_with("pinner.policy.yaml")
    );
    // The impostor runs as the file says, with no policy: dry-run.
    let mut names = host.controller.plugins();
    names.sort();
    let expected: &[&str] = if cfg!(unix) {
        &["aaa-impostor", "alias", "pinner"]
    } else {
        &["aaa-impostor", "pinner"]
    };
    assert_eq!(names, expected);
    let impostor = host.controller.policy("aaa-impostor").unwrap();
    assert_eq!(
        (impostor.mode, impostor.source.clone()),
        (Mode::DryRun, None)
    );
    let status = host.status("aaa-impostor.wasm").unwrap();
    assert_eq!(status.plugin.as_deref(), Some("aaa-impostor"));
    assert_eq!(
        status.declared.as_deref(),
        Some("pinner"),
        "shown, not used"
    );
    assert_eq!(status.error, None);

    // What it would do is audited under its own name, declared name beside it, never sent.
    eventually(WAIT, "the impostor's dry-run records", || {
        records_of(&host, "aaa-impostor").len() >= 3
    })
    .await;
    for r in records_of(&host, "aaa-impostor") {
        assert_eq!(r.decision, Decision::DryRun, "{r:?}");
        assert_eq!(
            (r.plugin.declared.as_str(), r.plugin.version.as_str()),
            ("pinner", "2.0.0")
        );
    }
    for r in records_of(&host, "pinner") {
        assert_eq!(r.plugin.version, "1.0.0", "{r:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    host.wait_images("imp", V1).await;
    let managers = write_managers(&host.sim);
    assert!(
        !managers.is_empty() && managers.iter().all(|m| m == "kubeplug/pinner"),
        "{managers:?}"
    );
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_pinned_policy_refuses_another_file_and_keeps_the_running_one() -> Result {
    let digest = |version: u8| hex::encode(sha2::Sha256::digest(pinner(version)));
    let pinned = |version: u8| {
        format!(
            "{PINNER_POLICY}  plugin:\n    sha256: {}\n",
            digest(version).to_uppercase()
        )
    };
    let tmp = tempfile::tempdir()?;
    std::fs::write(tmp.path().join("pinner.wasm"), pinner(1))?;
    std::fs::write(tmp.path().join("pinner.policy.yaml"), pinned(1))?;
    let host = Host::start(tmp).await?;
    host.create("pin", (0..3).map(|i| format!("web-{i}")))
        .await?;
    host.wait_images("pin", V1).await;

    // Another build under the same file name: refused, naming both digests; v1 keeps running.
    replace_atomically(&host.path("pinner.wasm"), &pinner(2))?;
    eventually(WAIT, "the pin refusal reported", || {
        host.status("pinner.wasm")
            .is_some_and(|s| s.digest == digest(2) && s.error.is_some())
    })
    .await;
    let status = host.status("pinner.wasm").unwrap();
    let error = status.error.unwrap();
    assert!(
        error.contains(&digest(1))
            && error.contains(&digest(2))
            && error.contains("spec.plugin.sha256")
            && error.contains("pinner.policy.yaml"),
        "{error}"
    );
    assert_eq!(status.running.as_deref(), Some(digest(1).as_str()));
    assert_eq!(host.version().as_deref(), Some("1.0.0"));
    assert_eq!(host.metric("kubeplug_plugin_failing", "pinner.wasm"), 1.0);
    let refused = log_lines_with("plugin file not applied");
    assert!(
        refused.iter().any(|l| l.contains(&digest(2))),
        "{refused:?}"
    );
    host.create("pin", ["late".to_string()]).await?;
    host.wait_images("pin", V1).await;

    // The operator pins the new build: it runs.
    std::fs::write(host.path("pinner.policy.yaml"), pinned(2))?;
    host.wait_version("2.0.0").await;
    host.wait_images("pin", V2).await;
    assert_eq!(host.status("pinner.wasm").unwrap().error, None);
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_names_that_are_not_instance_names_are_refused_and_displace_nothing() -> Result {
    let host = Host::start(plugins_dir(1)?).await?;
    host.create("names", ["web".to_string()]).await?;
    host.wait_images("names", V1).await;
    let long = format!("{}.wasm", "p".repeat(64));
    let bad = [
        "Pinner.wasm",
        "PINNER.wasm",
        "pinner_v2.wasm",
        "pinner.v2.wasm",
        "-pinner.wasm",
        "pinner-.wasm",
        "pinner .wasm",
        "pіnner.wasm",
        long.as_str(),
    ];
    for name in bad {
        std::fs::write(host.path(name), pinner(2))?;
    }
    eventually(WAIT, "every bad file name reported", || {
        bad.iter()
            .all(|n| host.status(n).is_some_and(|s| s.error.is_some()))
    })
    .await;
    // SIGHUP's forced rescan changes nothing.
    host.reloader.rescan(true).await?;
    for name in bad {
        let status = host.status(name).unwrap();
        let error = status.error.unwrap();
        assert!(
            error.contains("file name")
                && error.contains("DNS-1123")
                && error.contains("not started"),
            "{name}: {error}"
        );
        assert_eq!(
            (status.plugin, status.running, status.declared),
            (None, None, None),
            "{name}: never loaded"
        );
    }
    assert_eq!(host.controller.plugins(), ["pinner"]);
    assert_eq!(host.version().as_deref(), Some("1.0.0"));
    host.create("names", ["late".to_string()]).await?;
    host.wait_images("names", V1).await;
    host.controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_itself_refuses_bad_instance_names_and_unpinned_files() -> Result {
    let sim = sim().await?;
    let controller = Controller::new(sim.client()?, fast_config());
    let v1 = load(&test_plugin("pinner-v1")).await;
    let err = controller
        .add(PluginInstance::named(v1.clone(), "Pinner", None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StartError::InvalidName { .. }) && err.to_string().contains("DNS-1123"),
        "{err}"
    );
    let file = Path::new("pinner.policy.yaml");
    let other = "0".repeat(64);
    let text = format!("{PINNER_POLICY}  plugin:\n    sha256: {other}\n");
    let policy = Policy::from_document(&PolicyDocument::parse(&text, file)?, "pinner", file)?;
    let err = controller
        .add(PluginInstance::named(v1.clone(), "pinner", None).with_policy(policy))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(v1.digest())
            && message.contains(&other)
            && message.contains("pinner.policy.yaml"),
        "{message}"
    );
    assert!(controller.plugins().is_empty());
    controller.shutdown().await;
    Ok(())
}

/// A policy for instance `name` with `spec` (YAML lines under `spec:`).
fn policy_for(name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: {name}}}\nspec:\n{spec}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_policy_never_from_declared_owned_kinds() -> Result {
    // greedy-reader declares `owns: v1 Secret` and lists every Secret on each reconcile.
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(20))
        .auto_create_namespaces(true)
        .kind(ResourceKind::custom("", "v1", "Secret", "secrets", true))
        .start()
        .await?;
    let secret = |name: &str, owner: Option<(&str, &str)>| {
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "team-a"},
            "data": {"password": "aHVudGVyMg=="}});
        if let Some((name, uid)) = owner {
            secret["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "Deployment", "name": name, "uid": uid, "controller": true}]);
        }
        serde_json::to_string(&secret).unwrap()
    };
    sim.apply_yaml(&secret("db-password", None))?;
    let tmp = tempfile::tempdir()?;
    let greedy = std::fs::read(test_plugin("greedy-reader"))?;
    let ruled = |verbs: &str| {
        format!(
            "namespaces: {{all: true}}\nreads: [{{apiVersion: apps/v1, kind: Deployment}}]\nrules:\n  - {{apiVersion: v1, kind: Secret, verbs: [{verbs}]}}"
        )
    };
    let instances = [
        ("greedy", None),
        (
            "greedy-scoped",
            Some("namespaces: {names: [team-a]}\nreads: [{apiVersion: apps/v1, kind: Deployment}]".to_string()),
        ),
        ("greedy-evented", Some(ruled("event"))),
        (
            "greedy-granted",
            Some("namespaces: {all: true}\nreads: [{apiVersion: apps/v1, kind: Deployment}, {apiVersion: v1, kind: Secret}]".to_string()),
        ),
        ("greedy-ruled", Some(ruled("delete"))),
    ];
    for (name, spec) in &instances {
        std::fs::write(tmp.path().join(format!("{name}.wasm")), &greedy)?;
        if let Some(spec) = spec {
            std::fs::write(
                tmp.path().join(format!("{name}.policy.yaml")),
                policy_for(name, spec),
            )?;
        }
    }
    let host = Host::start_on(tmp, sim).await?;
    host.create("team-a", ["web".to_string()]).await?;
    let lines_of = |name: &str| {
        log_lines_with("greedy team-a/web")
            .into_iter()
            .filter(|l| l.contains(&format!("plugin=\"{name}\"")))
            .collect::<Vec<_>>()
    };
    eventually(WAIT, "every instance reconciled web", || {
        instances.iter().all(|(n, _)| !lines_of(n).is_empty())
    })
    .await;
    for (name, allowed) in [
        ("greedy", false),
        ("greedy-scoped", false),
        ("greedy-evented", false),
        ("greedy-granted", true),
        ("greedy-ruled", true),
    ] {
        for line in lines_of(name) {
            let ok = if allowed {
                line.contains("secrets ALLOWED [db-password]")
            } else {
                line.contains("secrets denied") && line.contains("reading v1/Secret is not granted")
            };
            assert!(ok, "{name}: {line}");
        }
    }

    // The declared owned kind still routes: a Secret controlled by `web` re-queues it, for
    // the instance that may not read Secrets too.
    eventually(WAIT, "web's status settled", || {
        host.sim
            .get("deployments", Some("team-a"), "web")
            .and_then(|d| d.pointer("/status/readyReplicas").and_then(|r| r.as_i64()))
            == Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = lines_of("greedy").len();
    let web = host.sim.get("deployments", Some("team-a"), "web").unwrap();
    let uid = web["metadata"]["uid"].as_str().unwrap();
    host.sim
        .apply_yaml(&secret("web-token", Some(("web", uid))))?;
    eventually(WAIT, "the owned Secret's change routed to web", || {
        lines_of("greedy").len() > before
    })
    .await;
    let last = lines_of("greedy").pop().unwrap();
    assert!(last.contains("(Reason::Changed): secrets denied"), "{last}");
    host.controller.shutdown().await;
    Ok(())
}

#[test]
fn the_binary_follows_the_directory_and_sighup_rescans_when_watching_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let copy_pinner = || std::fs::copy(test_plugin("pinner-v1"), dir.path().join("pinner.wasm"));

    let mut off = HostProcess::start(dir.path(), &["--watch=false"]);
    assert!(off.saw_within("running; stop with", WAIT), "{}", off.seen);
    copy_pinner().unwrap();
    assert!(
        !off.saw_within("plugin started", Duration::from_millis(800)),
        "--watch=false does not follow files: {}",
        off.seen
    );
    off.signal("-HUP");
    assert!(
        off.saw_within("plugin started", WAIT),
        "SIGHUP rescans: {}",
        off.seen
    );
    off.stop();

    std::fs::remove_file(dir.path().join("pinner.wasm")).unwrap();
    let mut on = HostProcess::start(dir.path(), &[]);
    assert!(on.saw_within("running; stop with", WAIT), "{}", on.seen);
    copy_pinner().unwrap();
    assert!(
        on.saw_within("plugin started", WAIT),
        "watching by default: {}",
        on.seen
    );
    std::fs::remove_file(dir.path().join("pinner.wasm")).unwrap();
    assert!(on.saw_within("plugin stopped", WAIT), "{}", on.seen);
    on.stop();
}

#[test]
fn a_directory_that_cannot_be_watched_is_reported_and_the_host_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(test_plugin("pinner-v1"), dir.path().join("pinner.wasm")).unwrap();
    let mut host = HostProcess::start(dir.path(), &["--policies", "/nonexistent/policies"]);
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let seen = host.stop();
    assert!(
        seen.contains("cannot watch directory /nonexistent/policies")
            && seen.contains("reloaded on SIGHUP only"),
        "{seen}"
    );
    assert!(seen.contains("plugin started"), "{seen}");
}

/// GET `path` from `addr`: status code and body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    common::http(addr, "GET", path, &[], "")
}

#[test]
fn the_status_endpoints_show_a_broken_file_beside_the_version_still_running() {
    let dir = plugins_dir(1).unwrap();
    let mut host = HostProcess::start(dir.path(), &["--listen", "127.0.0.1:0"]);
    assert!(host.saw_within("serving /metrics", WAIT), "{}", host.seen);
    let addr = host
        .seen
        .lines()
        .find(|l| l.contains("serving /metrics"))
        .and_then(|l| l.split("addr=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the address in the log")
        .to_string();
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let plugins = || -> serde_json::Value {
        let (status, body) = http_get(&addr, "/plugins");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let ready = std::time::Instant::now();
    while http_get(&addr, "/readyz").0 != 200 {
        assert!(ready.elapsed() < WAIT, "never ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(http_get(&addr, "/healthz"), (200, "ok".to_string()));
    let report = plugins();
    assert_eq!(report["running"][0]["name"], "pinner", "{report}");
    assert_eq!(report["running"][0]["declared"], "pinner", "{report}");
    assert_eq!(report["running"][0]["version"], "1.0.0");
    assert_eq!(report["running"][0]["mode"], "enforce");

    std::fs::write(dir.path().join("pinner.wasm"), b"garbage").unwrap();
    let start = std::time::Instant::now();
    let report = loop {
        let report = plugins();
        if report["files"][0]["error"].is_string() {
            break report;
        }
        assert!(start.elapsed() < WAIT, "no error reported: {report}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let file = &report["files"][0];
    assert!(
        file["error"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly file"),
        "{report}"
    );
    assert_ne!(file["digest"], file["running"], "{report}");
    assert_eq!(report["running"][0]["version"], "1.0.0", "v1 still runs");
    let (status, metrics) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    let failures = format!(
        "kubeplug_plugin_load_failures_total{{file=\"{}\"}} 1",
        dir.path().join("pinner.wasm").display()
    );
    assert!(metrics.contains(&failures), "{metrics}");
    assert!(
        metrics.contains("workqueue_adds_total{name=\"pinner\"}"),
        "{metrics}"
    );
    host.stop();
}

/// The host as `kubeplug run` builds it ([`kubeplug::app::Host`]): one registry holds the
/// reloader's and the controller's metrics and is what `/metrics` serves, the audit sink of
/// the configuration receives the plugins' decisions, and shutdown drains.
#[tokio::test(flavor = "multi_thread")]
async fn one_host_wires_every_part_to_one_registry_and_one_audit_sink() -> Result {
    capture_logs();
    let tmp = plugins_dir(1)?;
    let sim = sim().await?;
    let config = kubeplug::app::HostConfig {
        plugins: Some(tmp.path().to_path_buf()),
        objects: None,
        policies: tmp.path().to_path_buf(),
        watch: true,
        debounce: Duration::from_millis(50),
        listen: Some("127.0.0.1:0".parse()?),
        access: kubeplug::server::Access::default(),
        compile_cache: None,
        controller: fast_config(),
        shutdown_timeout: Duration::from_secs(10),
        coordination: None,
    };
    let mut audit = config.controller.audit.subscribe();
    let host = kubeplug::app::Host::start(sim.client()?, config).await?;
    let api: Api<Deployment> = Api::namespaced(sim.client()?, "wired");
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let record = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(record) = audit.recv().await
                && record.plugin.name == "pinner"
                && record.action == "patch"
                && record.decision == Decision::Executed
            {
                break record;
            }
        }
    })
    .await
    .expect("an audit record of pinner through the configured sink");
    assert_eq!(record.key, "wired/web", "{record:?}");

    let addr = host.server_addr().expect("the server runs").to_string();
    // The reconcile is counted once its actions ran (just after the audit record).
    let deadline = std::time::Instant::now() + WAIT;
    let served = loop {
        let (status, served) = http_get(&addr, "/metrics");
        assert_eq!(status, 200);
        if served.contains("kubeplug_reconcile_total{plugin=\"pinner\",result=\"success\"}") {
            break served;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no success counted: {served}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for line in [
        "kubeplug_reconcile_duration_seconds_count{plugin=\"pinner\"}",
        "kubeplug_cache_objects{kind=\"apps/v1/Deployment\"} 1",
    ] {
        assert!(served.contains(line), "{line} not served: {served}");
    }
    let (status, plugins) = http_get(&addr, "/plugins");
    assert_eq!(status, 200, "{plugins}");
    let plugins: serde_json::Value = serde_json::from_str(&plugins)?;
    let pinner = &plugins["running"][0];
    assert!(pinner["reconcilesTotal"].as_u64() >= Some(1), "{plugins}");
    assert_eq!(pinner["errorsTotal"], 0, "{plugins}");
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    assert!(page.contains("<title>kubeplug</title>"), "{page}");
    let (status, served) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "kubeplug_plugin_reloads_total{plugin=\"pinner\",result=\"started\"} 1",
        "workqueue_adds_total{name=\"pinner\"}",
    ] {
        assert!(served.contains(line), "{line} not served: {served}");
        assert!(
            host.metrics().encode().contains(line),
            "{line} not in the registry"
        );
    }
    std::fs::remove_file(tmp.path().join("pinner.wasm"))?;
    eventually(WAIT, "pinner removed by the host's file watch", || {
        host.controller().plugins().is_empty()
    })
    .await;
    let (_, served) = http_get(&addr, "/metrics");
    assert!(
        !served.contains("kubeplug_reconcile_total{plugin=\"pinner\"")
            && !served.contains("kubeplug_reconcile_duration_seconds_count{plugin=\"pinner\"}"),
        "a removed plugin's reconcile series remain: {served}"
    );
    let drain = host.shutdown().await;
    assert_eq!(drain.abandoned, 0);
    Ok(())
}
