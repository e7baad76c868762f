//! Plugins as Kubernetes objects (issue 25): a tenant's `Plugin` in its namespace, its
//! module in a ConfigMap there, bounded by the platform team's `PluginPolicy`, driven the
//! way a user drives it (kubectl create configmap --from-file, apply, wait) against the
//! embedded API server serving the CRDs of host/deploy/crds.

use crate::common::{self, cluster::*};
use anyhow::{Context, Result};
use kubeplug::app::{Host, HostConfig};
use kubeplug::plugin_objects::PluginObjectsConfig;
use kubeplug_sim::Sim;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Hostile registries, seen through a Plugin's status and Events (issue 35).
mod hostile_registry;
/// Plugin manifests built up field by field.
mod manifest;
/// `--metrics-per-plugin-limit`: series summed per namespace past it (issue 38).
mod metrics_limit;
/// One tenant hostile in every way at once, another measured beside it (issue 35).
mod noisy_tenant;
use manifest::{IMAGE_FIELD, PluginYaml};

/// A host running `Plugin` objects only (no plugins directory) on its own API server.
struct Tenancy {
    sim: Sim,
    host: Host,
    kubeconfig: PathBuf,
    tmp: tempfile::TempDir,
}

fn crd(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/crds")
        .join(name)
}

async fn start(configure: impl FnOnce(&mut HostConfig)) -> Result<Tenancy> {
    start_with(false, configure).await
}

/// A host on an API server that authorises every request with RBAC when `rbac` is set.
/// kubeplug then runs as its own ServiceAccount (kubeplug/kubeplug), with exactly the rights
/// host/deploy/rbac.yaml grants it. kubectl acts as the cluster's admin with the kubeconfig's
/// token, which client-go sends only over TLS: an RBAC sim serves HTTPS.
async fn start_with(rbac: bool, configure: impl FnOnce(&mut HostConfig)) -> Result<Tenancy> {
    capture_logs();
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(20))
        .auto_create_namespaces(true)
        .rbac(rbac)
        .tls(rbac)
        .crd_file(crd("plugins.yaml"))
        .crd_file(crd("pluginpolicies.yaml"))
        .start()
        .await?;
    let tmp = tempfile::tempdir()?;
    let kubeconfig = tmp.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    let client = match rbac {
        true => {
            let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
            for file in ["rbac.yaml", "tenant-rbac.yaml"] {
                let text = std::fs::read_to_string(deploy.join(file))?;
                kubectl_at(&kubeconfig, &["apply", "-f", "-"], &text).await?;
            }
            sim.client_with_token(&sim.service_account_token("kubeplug", "kubeplug"))?
        }
        false => sim.client()?,
    };
    let mut config = host_config();
    configure(&mut config);
    let host = Host::start(client, config).await?;
    Ok(Tenancy {
        sim,
        host,
        kubeconfig,
        tmp,
    })
}

/// The configuration of the hosts these tests start (passes every 500 ms).
fn host_config() -> HostConfig {
    HostConfig {
        plugins: None,
        objects: Some(PluginObjectsConfig {
            resync: Duration::from_millis(500),
            crd_poll: Duration::from_millis(100),
            counts_every: Duration::from_millis(500),
            ..PluginObjectsConfig::default()
        }),
        policies: PathBuf::new(),
        watch: false,
        debounce: Duration::from_millis(50),
        listen: None,
        access: kubeplug::server::Access::default(),
        compile_cache: Some(crate::common::compile_cache()),
        controller: kubeplug::controller::ControllerConfig {
            host_name: "replica-1".into(),
            ..fast_config()
        },
        shutdown_timeout: Duration::from_secs(10),
        coordination: None,
    }
}

/// Runs kubectl with kubeconfig `kc` (in a blocking thread), with `stdin` piped in.
async fn kubectl_at(kc: &Path, args: &[&str], stdin: &str) -> Result<String> {
    let kc = kc.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().unwrap().write_all(stdin.as_bytes())?;
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?} failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stdout)
    })
    .await?
}

/// `kubectl kubeplug ARGS` with kubeconfig `kc`: the kubeplug binary copied onto PATH as
/// `kubectl-kubeplug`, as a user installs the kubectl plugin.
async fn kubectl_kubeplug(kc: &Path, args: &[&str]) -> Result<String> {
    let bin = tempfile::tempdir()?;
    std::fs::copy(
        env!("CARGO_BIN_EXE_kubeplug"),
        bin.path().join("kubectl-kubeplug"),
    )?;
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (kc, args) = (
        kc.to_path_buf(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    );
    tokio::task::spawn_blocking(move || {
        let out = Command::new("kubectl")
            .arg("kubeplug")
            .args(&args)
            .env("PATH", path)
            .env("KUBECONFIG", &kc)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        anyhow::ensure!(
            out.status.success(),
            "kubectl kubeplug {args:?} failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(bin);
        Ok(stdout)
    })
    .await?
}

impl Tenancy {
    /// Runs kubectl against this API server (in a blocking thread), with `stdin` piped in.
    async fn kubectl_in(&self, args: &[&str], stdin: &str) -> Result<String> {
        kubectl_at(&self.kubeconfig, args, stdin).await
    }

    async fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.kubectl_in(args, "").await
    }

    async fn apply(&self, yaml: &str) -> Result<String> {
        self.kubectl_in(&["apply", "-f", "-"], yaml).await
    }

    /// `kubectl create configmap NAME -n NS --from-file=KEY=FILE`.
    async fn module(&self, ns: &str, name: &str, key: &str, file: &Path) -> Result<()> {
        let from = format!("--from-file={key}={}", file.display());
        self.kubectl(&["create", "configmap", name, "-n", ns, &from])
            .await?;
        Ok(())
    }

    /// A file in the test's folder holding `bytes`.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn plugin(&self, ns: &str, name: &str) -> Option<Value> {
        self.sim.get("plugins.kubeplug.dev", Some(ns), name)
    }

    /// The condition `type_` of Plugin ns/name: (status, reason, message).
    fn condition(&self, ns: &str, name: &str, type_: &str) -> Option<(String, String, String)> {
        let p = self.plugin(ns, name)?;
        let c = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)?
            .clone();
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        Some((s("status"), s("reason"), s("message")))
    }

    /// Waits until Plugin ns/name's Ready condition has `reason`; its message.
    async fn reason_becomes(&self, ns: &str, name: &str, reason: &str) -> String {
        let mut last = None;
        eventually(WAIT, &format!("{ns}/{name} Ready reason {reason}"), || {
            last = self.condition(ns, name, "Ready");
            last.as_ref().is_some_and(|(_, r, _)| r == reason)
        })
        .await;
        last.unwrap().2
    }

    /// Waits until an Event about Plugin ns/name has `reason`.
    async fn event_with(&self, ns: &str, name: &str, reason: &str) {
        eventually(WAIT, &format!("Event {reason} on {ns}/{name}"), || {
            self.event_reasons(ns, name).iter().any(|r| r == reason)
        })
        .await;
    }

    /// Reasons of the Events about Plugin ns/name.
    fn event_reasons(&self, ns: &str, name: &str) -> Vec<String> {
        self.sim
            .list("events", Some(ns))
            .iter()
            .filter(|e| {
                e["involvedObject"]["kind"] == "Plugin" && e["involvedObject"]["name"] == name
            })
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }

    async fn deployment(&self, ns: &str, name: &str, image: &str) -> Result<()> {
        let mut d = serde_json::to_value(deployment(name, 1, image))?;
        d["metadata"]["namespace"] = ns.into();
        self.apply(&serde_json::to_string(&d)?).await?;
        Ok(())
    }
}

/// The README's tenant policy: team-a may patch its Deployments' container images.
const POLICY: &str = include_str!("../../host/samples/tenant/pluginpolicy.yaml");
/// The README's Plugin: team-a's image-pinner, pinning to nginx:1.25.
const PLUGIN: &str = include_str!("../../host/samples/tenant/plugin.yaml");

/// A Plugin running image-pinner from ConfigMap `module` (key plugin.wasm), pinning to `image`.
fn pinner(ns: &str, name: &str, module: &str, image: &str, extra_rule: &str) -> String {
    let yaml = PluginYaml::config_map(ns, name, module)
        .pinning(image)
        .yaml();
    format!("{yaml}{extra_rule}")
}

fn sha256_of(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_plugin_goes_ready_and_pins_its_own_namespace_only() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|c| c.listen = Some("127.0.0.1:0".parse().unwrap())).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.deployment("team-b", "web", "alpine").await?;
    t.apply(POLICY).await?;
    let wasm = common::plugin("image-pinner");
    t.module("team-a", "pinner", "plugin.wasm", &wasm).await?;
    t.apply(PLUGIN).await?;
    t.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/pinner",
        "-n",
        "team-a",
        "--timeout=60s",
    ])
    .await
    .context("kubectl wait --for=condition=Ready")?;
    eventually(WAIT, "team-a/web pinned", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;

    let p = t.plugin("team-a", "pinner").unwrap();
    let status = &p["status"];
    assert_eq!(
        status["observedGeneration"], p["metadata"]["generation"],
        "{status:#}"
    );
    let digest = sha256_of(&wasm);
    assert_eq!(status["digest"], format!("sha256:{digest}"));
    assert_eq!(status["shortDigest"], digest[..12]);
    assert_eq!(status["mode"], "enforce");
    assert_eq!(status["declared"]["name"], "image-pinner");
    assert_eq!(status["runner"], "replica-1");
    assert!(
        status["grant"]
            .as_str()
            .unwrap()
            .starts_with("team-a; apps/v1 Deployment: patch"),
        "{status:#}"
    );
    assert_eq!(status["revisions"][0]["digest"], format!("sha256:{digest}"));
    let (_, _, message) = t.condition("team-a", "pinner", "Ready").unwrap();
    assert!(
        message.contains("enforce mode under PluginPolicy tenants"),
        "{message}"
    );
    // The Loaded Event follows the status write in the same pass: wait for it.
    eventually(Duration::from_secs(60), "the Loaded Event", || {
        t.event_reasons("team-a", "pinner")
            .contains(&"Loaded".to_string())
    })
    .await;
    // The instance is named after the object, and so is its field manager.
    assert!(
        t.host
            .controller()
            .plugins()
            .contains(&"team-a/pinner".to_string())
    );
    let managers =
        t.sim.get("deployments", Some("team-a"), "web").unwrap()["metadata"]["managedFields"]
            .to_string();
    assert!(managers.contains("kubeplug/team-a/pinner"), "{managers}");

    // The kubectl plugin is the binary under another name: `kubectl kubeplug status`.
    let status = kubectl_kubeplug(&t.kubeconfig, &["status", "-n", "team-a"]).await?;
    let line = status
        .lines()
        .find(|l| l.starts_with("team-a") && l.contains("pinner"))
        .unwrap_or_else(|| panic!("no line for team-a/pinner: {status}"));
    for shown in [
        "True",
        "Running",
        "enforce",
        &digest[..12],
        "replica-1",
        "team-a; apps/v1 Deployment: patch",
    ] {
        assert!(line.contains(shown), "{shown} not in {line}");
    }

    // The dashboard's per-plugin view shows the status the host computed.
    let addr = t.host.server_addr().unwrap().to_string();
    let (code, body) = tokio::task::spawn_blocking(move || {
        common::http(&addr, "GET", "/api/plugins/team-a%2Fpinner", &[], "")
    })
    .await?;
    assert_eq!(code, 200, "{body}");
    let view: Value = serde_json::from_str(&body)?;
    assert_eq!(
        view["objectStatus"]["conditions"][0]["reason"], "Running",
        "{view:#}"
    );
    assert_eq!(view["objectStatus"]["shortDigest"], digest[..12]);

    // team-b's Deployment is not the tenant's: never queued, never written.
    t.kubectl(&["-n", "team-a", "set", "image", "deploy/web", "app=busybox"])
        .await?;
    eventually(WAIT, "team-a/web pinned again", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    assert_eq!(image_of(&t.sim, "team-b", "web").as_deref(), Some("alpine"));

    // What kubectl shows.
    let table = t.kubectl(&["get", "plugins", "-A"]).await?;
    let row = table
        .lines()
        .find(|l| l.contains("pinner"))
        .unwrap_or_default();
    for cell in ["team-a", "enforce", "True", "Running", &digest[..12]] {
        assert!(row.contains(cell), "{cell} missing from:\n{table}");
    }

    // Deleting the Plugin stops it, as removing a file does.
    t.kubectl(&["-n", "team-a", "delete", "plugin", "pinner"])
        .await?;
    eventually(WAIT, "instance stopped", || {
        !t.host
            .controller()
            .plugins()
            .contains(&"team-a/pinner".to_string())
    })
    .await;
    t.kubectl(&["-n", "team-a", "set", "image", "deploy/web", "app=busybox"])
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        image_of(&t.sim, "team-a", "web").as_deref(),
        Some("busybox")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_beyond_every_policy_stalls_and_sends_nothing() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|_| {}).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    let secrets = "    - apiVersion: v1\n      kind: Secret\n      verbs: [patch]\n";
    t.apply(&pinner("team-a", "greedy", "pinner", "nginx:1.25", secrets))
        .await?;
    let message = t
        .reason_becomes("team-a", "greedy", "PermissionsExceedPolicy")
        .await;
    assert!(
        message.contains("rules[1] (v1 Secret) requests verb patch"),
        "{message}"
    );
    assert!(message.contains("(tenants)"), "{message}");
    let (stalled, reason, _) = t.condition("team-a", "greedy", "Stalled").unwrap();
    assert_eq!(
        (stalled.as_str(), reason.as_str()),
        ("True", "PermissionsExceedPolicy")
    );
    t.event_with("team-a", "greedy", "PermissionsExceedPolicy")
        .await;
    assert!(t.host.controller().plugins().is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(image_of(&t.sim, "team-a", "web").as_deref(), Some("alpine"));

    // Without the Secret rule it runs: the tenant fixes its own request.
    t.apply(&pinner("team-a", "greedy", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "greedy", "Running").await;
    eventually(WAIT, "pinned", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_input_is_one_reason_and_the_others_keep_running() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|c| c.objects.as_mut().unwrap().max_module_bytes = 500_000).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    let pinner_wasm = common::plugin("image-pinner");
    t.module("team-a", "pinner", "plugin.wasm", &pinner_wasm)
        .await?;
    t.module("team-b", "elsewhere", "plugin.wasm", &pinner_wasm)
        .await?;
    t.module(
        "team-a",
        "big",
        "plugin.wasm",
        &common::plugin("change-logger"),
    )
    .await?;
    let core = t.file("core.wasm", b"\0asm\x01\0\0\0\0\x03\x01a\xff");
    t.module("team-a", "core", "plugin.wasm", &core).await?;
    let text = t.file("text.wasm", b"\xffhello, not wasm");
    t.module("team-a", "text", "plugin.wasm", &text).await?;
    let utf8 = t.file("utf8.wasm", b"valid UTF-8, so kubectl stores it under data");
    t.module("team-a", "utf8", "plugin.wasm", &utf8).await?;
    let cases: &[(&str, String, &str, &str)] = &[
        (
            "utf8",
            pinner("team-a", "utf8", "utf8", "x:1", ""),
            "ModuleNotFound",
            "is in data (text), not binaryData",
        ),
        (
            "missing",
            pinner("team-a", "missing", "nope", "x:1", ""),
            "ModuleNotFound",
            "ConfigMap team-a/nope does not exist",
        ),
        (
            "other-ns",
            pinner("team-a", "other-ns", "elsewhere", "x:1", ""),
            "ModuleNotFound",
            "team-a/elsewhere",
        ),
        (
            "wrong-key",
            pinner("team-a", "wrong-key", "pinner", "x:1", "")
                .replace("{name: pinner}", "{name: pinner, key: main.wasm}"),
            "ModuleNotFound",
            "\"main.wasm\"",
        ),
        (
            "big",
            pinner("team-a", "big", "big", "x:1", ""),
            "ModuleTooLarge",
            "at most 500000 bytes",
        ),
        (
            "core",
            pinner("team-a", "core", "core", "x:1", ""),
            "CompileFailed",
            "not a component",
        ),
        (
            "text",
            pinner("team-a", "text", "text", "x:1", ""),
            "CompileFailed",
            "not a WebAssembly file",
        ),
        (
            "pinned",
            pinner("team-a", "pinned", "pinner", "x:1", "").replace(
                "module: {configMap: {name: pinner}}",
                &format!(
                    "module: {{configMap: {{name: pinner}}, sha256: \"{}\"}}",
                    "0".repeat(64)
                ),
            ),
            "DigestMismatch",
            "pins 0000",
        ),
        (
            "oci",
            pinner("team-a", "oci", "pinner", "x:1", "").replace(
                "module: {configMap: {name: pinner}}",
                "module: {image: \"oci://127.0.0.1:5000/p:1\"}",
            ),
            "ImageNotAllowed",
            "spec.modules.images",
        ),
        (
            "bad-duration",
            format!(
                "{}  rollout: {{shadow: {{duration: 25h}}}}\n",
                pinner("team-a", "bad-duration", "pinner", "x:1", "")
            ),
            "InvalidSpec",
            "longer than a day",
        ),
    ];
    for (_, yaml, _, _) in cases {
        t.apply(yaml).await?;
    }
    t.apply(&pinner("team-a", "good", "pinner", "nginx:1.25", ""))
        .await?;
    for (name, _, reason, says) in cases {
        let message = t.reason_becomes("team-a", name, reason).await;
        assert!(message.contains(says), "{name}: {reason}: {message}");
        assert!(
            message.len() <= 1024 && !message.contains('\n'),
            "{name}: {message}"
        );
        t.event_with("team-a", name, reason).await;
        let events = t.event_reasons("team-a", name);
        assert_eq!(
            events.iter().filter(|r| r == reason).count(),
            1,
            "{name}: {events:?}"
        );
    }
    t.reason_becomes("team-a", "good", "Running").await;
    eventually(WAIT, "pinned by the good one", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    assert_eq!(
        t.host.controller().plugins(),
        vec!["team-a/good".to_string()]
    );

    // A PluginPolicy that does not hold: its status says so, the last good spec stays.
    let broken = POLICY.replace("/spec/template/spec/containers/*/name,", "spec/replicas,");
    t.apply(&broken).await?;
    eventually(WAIT, "policy Stalled", || {
        t.sim
            .get("pluginpolicies.kubeplug.dev", None, "tenants")
            .is_some_and(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Stalled"
                            && c["reason"] == "InvalidSpec"
                            && c["message"]
                                .as_str()
                                .unwrap_or_default()
                                .contains("spec.rules[0].fields[0]")
                    })
                })
            })
    })
    .await;
    t.kubectl(&["-n", "team-a", "set", "image", "deploy/web", "app=busybox"])
        .await?;
    eventually(WAIT, "still pinned under the last good policy", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_update_keeps_the_running_revision_and_a_good_one_replaces_it() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|_| {}).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    let wasm = common::plugin("image-pinner");
    t.module("team-a", "pinner", "plugin.wasm", &wasm).await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;

    // The ConfigMap now holds a module that does not compile.
    let text = t.file("text.wasm", b"\xffnot wasm at all");
    t.kubectl_in(
        &["apply", "-f", "-"],
        &t.kubectl(&[
            "create",
            "configmap",
            "pinner",
            "-n",
            "team-a",
            &format!("--from-file=plugin.wasm={}", text.display()),
            "--dry-run=client",
            "-o",
            "yaml",
        ])
        .await?,
    )
    .await?;
    let message = t.reason_becomes("team-a", "pinner", "CompileFailed").await;
    assert!(
        message.contains(&format!(
            "revision {} (generation 1) keeps running",
            &sha256_of(&wasm)[..12]
        )),
        "{message}"
    );
    t.kubectl(&["-n", "team-a", "set", "image", "deploy/web", "app=busybox"])
        .await?;
    eventually(WAIT, "the old revision still pins", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;

    // A config change is a new revision; the module is back to the good one.
    t.kubectl_in(
        &["apply", "-f", "-"],
        &t.kubectl(&[
            "create",
            "configmap",
            "pinner",
            "-n",
            "team-a",
            &format!("--from-file=plugin.wasm={}", wasm.display()),
            "--dry-run=client",
            "-o",
            "yaml",
        ])
        .await?,
    )
    .await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.27", ""))
        .await?;
    eventually(WAIT, "pinned to the new config", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.27")
    })
    .await;
    // Status is written at the end of the pass that started the revision, which may be
    // after its first reconcile pinned the Deployment.
    eventually(WAIT, "status observes generation 2", || {
        t.plugin("team-a", "pinner").unwrap()["status"]["observedGeneration"] == 2
    })
    .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_object_plugins_run_side_by_side() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let files = tempfile::tempdir()?;
    std::fs::copy(
        common::plugin("change-logger"),
        files.path().join("change-logger.wasm"),
    )?;
    let dir = files.path().to_path_buf();
    let t = start(move |c| {
        c.plugins = Some(dir.clone());
        c.policies = dir;
    })
    .await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;
    let mut running = t.host.controller().plugins();
    running.sort();
    assert_eq!(
        running,
        vec!["change-logger".to_string(), "team-a/pinner".to_string()]
    );
    eventually(WAIT, "pinned", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    Ok(())
}

/// The status of Plugin ns/name's last rollout, once its phase is `phase`.
async fn rollout_phase(t: &Tenancy, ns: &str, name: &str, phase: &str) -> Value {
    let mut last = Value::Null;
    eventually(WAIT, &format!("rollout of {ns}/{name} {phase}"), || {
        last = t
            .plugin(ns, name)
            .map(|p| p["status"]["rollout"].clone())
            .unwrap_or_default();
        last["phase"] == phase
    })
    .await;
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_proves_itself_in_shadow_before_it_writes() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|_| {}).await?;
    for i in 0..3 {
        t.deployment("team-a", &format!("web-{i}"), "alpine")
            .await?;
    }
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    let shadowed = |image: &str, verbs: &str, rollout: &str| {
        pinner("team-a", "pinner", "pinner", image, "").replace("verbs: [patch]", verbs)
            + &format!("  rollout: {rollout}\n")
    };
    let sim = &t.sim;
    let pinned = |image: &'static str| {
        move || {
            (0..3).all(|i| image_of(sim, "team-a", &format!("web-{i}")).as_deref() == Some(image))
        }
    };
    t.apply(&shadowed(
        "nginx:1.25",
        "verbs: [patch]",
        "{shadow: {reconciles: 3}}",
    ))
    .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;
    eventually(WAIT, "pinned to 1.25", pinned("nginx:1.25")).await;
    assert!(t.plugin("team-a", "pinner").unwrap()["status"]["rollout"].is_null());

    // A new grant that decides the same: compared on every key, promoted.
    t.apply(&shadowed(
        "nginx:1.25",
        "verbs: [patch, event]",
        "{shadow: {reconciles: 3}}",
    ))
    .await?;
    let promoted = rollout_phase(&t, "team-a", "pinner", "Promoted").await;
    assert!(
        promoted["keysCompared"].as_u64().unwrap() >= 3,
        "{promoted:#}"
    );
    assert_eq!(promoted["differing"], 0, "{promoted:#}");
    t.reason_becomes("team-a", "pinner", "Running").await;
    t.event_with("team-a", "pinner", "Shadowing").await;
    let grant = t.plugin("team-a", "pinner").unwrap()["status"]["grant"].clone();
    assert!(grant.as_str().unwrap().contains("patch,event"), "{grant}");
    assert!(
        !t.host
            .controller()
            .plugins()
            .iter()
            .any(|p| p.ends_with("@shadow"))
    );
    // What the log (and so the live stream, as reload records) said.
    let promoted = log_lines_with("shadow revision promoted");
    assert!(
        promoted
            .iter()
            .any(|l| l.contains("team-a/pinner") && l.contains("reload")),
        "{promoted:?}"
    );

    // A new config that would change every Deployment: held, nothing written by it.
    t.apply(&shadowed(
        "nginx:1.27",
        "verbs: [patch, event]",
        "{shadow: {reconciles: 3}, maxDiffering: 1}",
    ))
    .await?;
    let held = rollout_phase(&t, "team-a", "pinner", "Held").await;
    assert_eq!(held["differing"], 3, "{held:#}");
    let example = held["examples"][0]["shadow"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        example.starts_with("patch Deployment team-a/web-"),
        "{held:#}"
    );
    let message = t.reason_becomes("team-a", "pinner", "RolloutHeld").await;
    assert!(message.contains("more than maxDiffering 1"), "{message}");
    let (stalled, _, _) = t.condition("team-a", "pinner", "Stalled").unwrap();
    assert_eq!(stalled, "True");
    assert!(
        t.host
            .controller()
            .plugins()
            .contains(&"team-a/pinner@shadow".to_string())
    );
    assert!(pinned("nginx:1.25")(), "the candidate wrote nothing");

    // The tenant promotes it anyway.
    t.apply(&shadowed(
        "nginx:1.27",
        "verbs: [patch, event]",
        "{shadow: {reconciles: 3}, maxDiffering: 1, promote: true}",
    ))
    .await?;
    eventually(WAIT, "pinned to 1.27", pinned("nginx:1.27")).await;
    rollout_phase(&t, "team-a", "pinner", "Promoted").await;
    t.reason_becomes("team-a", "pinner", "Running").await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_runs_at_most_its_plugin_cap_oldest_first() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|c| c.objects.as_mut().unwrap().max_plugins = 1).await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-a", "first", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "first", "Running").await;
    // Creation timestamps have a one-second resolution.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    t.apply(&pinner("team-a", "second", "pinner", "nginx:1.25", ""))
        .await?;
    let message = t.reason_becomes("team-a", "second", "TooManyPlugins").await;
    assert!(message.contains("at most 1 Plugin objects"), "{message}");
    assert_eq!(
        t.host.controller().plugins(),
        vec!["team-a/first".to_string()]
    );
    t.kubectl(&["-n", "team-a", "delete", "plugin", "first"])
        .await?;
    t.reason_becomes("team-a", "second", "Running").await;
    Ok(())
}

/// A Plugin whose module is an image (issue 26), as a tenant writes it: refused until a
/// PluginPolicy lists the registry; behind basic authentication it needs its pull Secret
/// (`kubectl create secret docker-registry`); then Ready with the pinned image in status, a
/// moved tag is a new revision, and with the registry stopped the running revision keeps
/// running while a Plugin naming an image not yet pulled says why it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_from_an_image_follows_its_tag_and_survives_the_registry_going_down() -> Result<()>
{
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let Some(mut reg) = crate::registry::Registry::start_with_auth("tenant", "s3cret") else {
        return Ok(());
    };
    let cache = tempfile::tempdir()?;
    let args = kubeplug::oci::RegistryArgs {
        registry_config: None,
        ..reg.args(cache.path())
    };
    let registries = kubeplug::oci::Registries::new(&args)?;
    let t = start(|c| {
        let objects = c.objects.as_mut().unwrap();
        objects.registries = Some(registries.clone());
        objects.image_poll = Duration::from_millis(300);
    })
    .await?;
    // The platform's own push, with its credentials.
    let push_config = t.file(
        "push.json",
        format!(
            r#"{{"auths":{{"{}":{{"username":"tenant","password":"s3cret"}}}}}}"#,
            reg.addr
        )
        .as_bytes(),
    );
    let pusher = kubeplug::oci::Registries::new(&kubeplug::oci::RegistryArgs {
        registry_config: Some(push_config),
        ..args.clone()
    })?;
    let tag = reg.reference("team-a/pinner:stable");
    let v1 = std::fs::read(common::plugin("image-pinner"))?;
    let v1_manifest = kubeplug::oci::transfer::push(&pusher, &tag, &v1).await?;

    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    let plugin = |secret: &str| {
        format!(
            "apiVersion: kubeplug.dev/v1alpha1
kind: Plugin
metadata: {{name: pinner, namespace: team-a}}
spec:
  module: {{image: \"{tag}\"{secret}}}
  config: {{image: \"nginx:1.25\"}}
  permissions:
    rules:
    - apiVersion: apps/v1
      kind: Deployment
      verbs: [patch]
      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]
"
        )
    };
    t.apply(&plugin("")).await?;
    let why = t
        .reason_becomes("team-a", "pinner", "ImageNotAllowed")
        .await;
    assert!(why.contains("spec.modules.images"), "{why}");

    // The platform team lists the tenant's repository.
    let listed = format!("{POLICY}  modules: {{images: [\"{}/team-a\"]}}\n", reg.addr);
    t.apply(&listed).await?;
    let why = t.reason_becomes("team-a", "pinner", "PullFailed").await;
    assert!(why.contains("asks for credentials"), "{why}");
    let (status, _, _) = t.condition("team-a", "pinner", "Reconciling").unwrap();
    assert_eq!(status, "True", "a registry error is retried, not final");

    t.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "pull",
        "-n",
        "team-a",
        &format!("--docker-server={}", reg.addr),
        "--docker-username=tenant",
        "--docker-password=s3cret",
    ])
    .await?;
    t.apply(&plugin(", pullSecret: pull")).await?;
    t.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/pinner",
        "-n",
        "team-a",
        "--timeout=60s",
    ])
    .await?;
    eventually(WAIT, "team-a/web pinned", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    let status = t.plugin("team-a", "pinner").unwrap()["status"].clone();
    assert_eq!(status["image"], format!("{tag}@sha256:{v1_manifest}"));
    assert_eq!(
        status["digest"],
        format!("sha256:{}", hex::encode(Sha256::digest(&v1)))
    );

    // The tag moves: the next resolution starts the new module as a new revision.
    let v2 = std::fs::read(common::test_plugin("pinner-v2"))?;
    let v2_manifest = kubeplug::oci::transfer::push(&pusher, &tag, &v2).await?;
    let v2_digest = format!("sha256:{}", hex::encode(Sha256::digest(&v2)));
    let mut last = Value::Null;
    eventually(WAIT, "the moved tag's module runs", || {
        last = t.plugin("team-a", "pinner").unwrap()["status"].clone();
        last["digest"] == v2_digest.as_str()
    })
    .await;
    assert_eq!(last["image"], format!("{tag}@sha256:{v2_manifest}"));
    assert_eq!(
        last["revisions"][1]["image"],
        format!("{tag}@sha256:{v1_manifest}")
    );

    // The registry goes down: the running revision keeps running (a tag that cannot be
    // resolved again is not a reason to stop), and a new Plugin naming an image not pulled
    // yet waits in Reconciling with the error.
    kubeplug::oci::transfer::push(&pusher, &reg.reference("team-a/pinner:next"), &v1).await?;
    reg.stop();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let (ready, reason, _) = t.condition("team-a", "pinner", "Ready").unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Running"));
    assert_eq!(
        t.plugin("team-a", "pinner").unwrap()["status"]["digest"],
        v2_digest.as_str()
    );
    t.apply(
        &plugin(", pullSecret: pull")
            .replace("name: pinner,", "name: other,")
            .replace(":stable", ":next"),
    )
    .await?;
    let why = t.reason_becomes("team-a", "other", "PullFailed").await;
    assert!(why.contains("pulling the manifest of"), "{why}");
    let (status, _, _) = t.condition("team-a", "other", "Reconciling").unwrap();
    assert_eq!(status, "True");
    // Back up: the retry (capped backoff) finds it.
    reg.restart();
    t.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/other",
        "-n",
        "team-a",
        "--timeout=60s",
    ])
    .await?;
    Ok(())
}

/// A PluginPolicy that requires signatures (issue 26): an unsigned image never compiles and
/// the status names the rule; signed with the policy's key and the spec re-applied, it runs;
/// the host's own `--verification-config` applies on top of every policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_requiring_signatures_runs_only_signed_images() -> Result<()> {
    use kubeplug::oci::keys::SigningKey;
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let Some(reg) = crate::registry::Registry::start() else {
        return Ok(());
    };
    let cache = tempfile::tempdir()?;
    let registries = kubeplug::oci::Registries::new(&reg.args(cache.path()))?;
    let t = start(|c| {
        c.objects.as_mut().unwrap().registries = Some(registries.clone());
    })
    .await?;
    let platform = SigningKey::generate();
    let module = std::fs::read(common::plugin("image-pinner"))?;
    let tag = reg.reference("team-a/pinner:v1");
    let digest = kubeplug::oci::transfer::push(&registries, &tag, &module).await?;
    let pem = platform.public().to_pem().replace('\n', "\\n");
    t.apply(&format!(
        "{POLICY}  modules:\n    images: [\"{}/team-a\"]\n    verification: {{apiVersion: v1, allOf: [{{kind: pubKey, owner: platform, key: \"{pem}\"}}]}}\n",
        reg.addr
    ))
    .await?;
    t.deployment("team-a", "web", "alpine").await?;
    let plugin = |image: &str| {
        PluginYaml::image("team-a", "pinner", &tag)
            .pinning(image)
            .yaml()
    };
    t.apply(&plugin("nginx:1.25")).await?;
    let why = t
        .reason_becomes("team-a", "pinner", "VerificationFailed")
        .await;
    assert!(
        why.contains("PluginPolicy tenants") && why.contains("not signed"),
        "{why}"
    );
    let module_file = cache
        .path()
        .join("blobs/sha256")
        .join(hex::encode(Sha256::digest(&module)));
    assert!(
        !module_file.exists(),
        "an unsigned module is never downloaded"
    );
    // A signature by another key is not the policy's.
    let other = SigningKey::generate();
    let pinned = tag.pinned(&digest);
    kubeplug::oci::signature::sign(&registries, &pinned, &other, &Default::default()).await?;
    t.apply(&plugin("nginx:1.26")).await?;
    eventually(WAIT, "the other key's signature refused by rule", || {
        t.condition("team-a", "pinner", "Ready")
            .is_some_and(|(_, r, m)| r == "VerificationFailed" && m.contains("allOf[0]"))
    })
    .await;
    assert!(image_of(&t.sim, "team-a", "web").as_deref() == Some("alpine"));

    kubeplug::oci::signature::sign(&registries, &pinned, &platform, &Default::default()).await?;
    t.apply(&plugin("nginx:1.27")).await?;
    t.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "plugin/pinner",
        "-n",
        "team-a",
        "--timeout=60s",
    ])
    .await?;
    eventually(WAIT, "team-a/web pinned", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.27")
    })
    .await;
    assert!(module_file.exists(), "signed, it is pulled into the cache");
    Ok(())
}

// The host's status is the truth (issue 35, finding 3): what a Plugin's status carries over
// time is rebuilt from the host's own record (a ConfigMap in the host's namespace, where
// tenants have no rights), never from the status read back.

/// The host's record of Plugin ns/name (in the host's namespace, `default` here): the
/// ConfigMap's name and the record parsed, if there is one that parses.
fn record_of(t: &Tenancy, ns: &str, name: &str) -> Option<(String, Value)> {
    t.sim
        .list("configmaps", Some("default"))
        .into_iter()
        .filter(|cm| cm["metadata"]["labels"]["kubeplug.dev/record"] == "plugin-status")
        .find_map(|cm| {
            let record: Value = serde_json::from_str(cm["data"]["record.json"].as_str()?).ok()?;
            (record["plugin"]["namespace"] == ns && record["plugin"]["name"] == name).then(|| {
                let cm_name = cm["metadata"]["name"].as_str().unwrap_or_default();
                (cm_name.to_string(), record)
            })
        })
}

/// The records in the host's namespace, parsed or not.
fn records(t: &Tenancy) -> usize {
    t.sim
        .list("configmaps", Some("default"))
        .iter()
        .filter(|cm| cm["metadata"]["labels"]["kubeplug.dev/record"] == "plugin-status")
        .count()
}

/// What a tenant allowed `plugins/status` writes: a revision from a registry it controls at
/// the front of the genuine ones, and a rollout that never happened.
async fn forge_status(t: &Tenancy, ns: &str, name: &str, genuine: &Value) -> Result<()> {
    let fff = format!("sha256:{}", "f".repeat(64));
    let mut revisions = vec![serde_json::json!({
        "digest": fff, "generation": 1, "at": "2026-01-01T00:00:00Z",
        "image": format!("oci://evil.example/pinner:1@{fff}"),
    })];
    revisions.extend(genuine.as_array().cloned().unwrap_or_default());
    let patch = serde_json::json!({"status": {
        "revisions": revisions,
        "rollout": {"phase": "Promoted", "candidate": fff, "generation": 1,
            "keysCompared": 500, "agreeing": 500, "differing": 0, "examples": [],
            "message": "Promoted after 500 agreeing keys"},
    }});
    let written = t
        .kubectl(&[
            "-n",
            ns,
            "patch",
            "plugin",
            name,
            "--subresource=status",
            "--type=merge",
            "-o",
            "json",
            "-p",
            &patch.to_string(),
        ])
        .await?;
    // What the API server stored (the host may overwrite it at once).
    let forged: Value = serde_json::from_str(&written)?;
    assert_eq!(
        forged["status"]["revisions"][0]["digest"], fff,
        "the forgery landed"
    );
    Ok(())
}

/// The messages of the StatusOverwritten Events on Plugin ns/name.
fn overwritten_events(t: &Tenancy, ns: &str, name: &str) -> Vec<String> {
    t.sim
        .list("events", Some(ns))
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == "StatusOverwritten")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_is_rebuilt_from_the_hosts_record_and_noted_once() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|_| {}).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;
    let digest = format!("sha256:{}", sha256_of(&common::plugin("image-pinner")));
    eventually(WAIT, "the host recorded the revision", || {
        record_of(&t, "team-a", "pinner")
            .is_some_and(|(_, r)| r["revisions"][0]["digest"] == digest.as_str())
    })
    .await;
    let (record_name, _) = record_of(&t, "team-a", "pinner").unwrap();
    assert!(
        !record_name.contains("team-a") && !record_name.contains("pinner"),
        "named from a hash: {record_name}"
    );
    let genuine = t.plugin("team-a", "pinner").unwrap()["status"].clone();
    assert_eq!(genuine["revisions"].as_array().unwrap().len(), 1);
    assert!(overwritten_events(&t, "team-a", "pinner").is_empty());

    forge_status(&t, "team-a", "pinner", &genuine["revisions"]).await?;
    eventually(WAIT, "the forged revision and rollout overwritten", || {
        let s = t.plugin("team-a", "pinner").unwrap()["status"].clone();
        s["revisions"] == genuine["revisions"] && s.get("rollout").is_none()
    })
    .await;
    eventually(WAIT, "a StatusOverwritten Event", || {
        !overwritten_events(&t, "team-a", "pinner").is_empty()
    })
    .await;
    let said = overwritten_events(&t, "team-a", "pinner");
    assert!(
        said[0].contains("status.revisions") && said[0].contains("status.rollout"),
        "{said:?}"
    );
    for forged in ["evil", "fff", "500"] {
        assert!(!said[0].contains(forged), "nothing forged echoed: {said:?}");
    }

    // Later passes (they write the new counts) note nothing more.
    let reconciles = |t: &Tenancy| {
        t.plugin("team-a", "pinner").unwrap()["status"]["counts"]["reconciles"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = reconciles(&t);
    t.kubectl(&["-n", "team-a", "set", "image", "deploy/web", "app=busybox"])
        .await?;
    eventually(WAIT, "passes after the overwrite wrote new counts", || {
        reconciles(&t) > before
    })
    .await;
    assert_eq!(overwritten_events(&t, "team-a", "pinner").len(), 1);
    assert_eq!(
        t.plugin("team-a", "pinner").unwrap()["status"]["revisions"],
        genuine["revisions"]
    );

    // Another forgery is another notice.
    forge_status(&t, "team-a", "pinner", &genuine["revisions"]).await?;
    eventually(WAIT, "a second StatusOverwritten Event", || {
        overwritten_events(&t, "team-a", "pinner").len() == 2
    })
    .await;

    // The record goes with its Plugin.
    t.kubectl(&["-n", "team-a", "delete", "plugin", "pinner"])
        .await?;
    eventually(WAIT, "the record deleted", || records(&t) == 0).await;
    Ok(())
}

/// `bytes` (a component) with a custom section appended: the same plugin under another
/// digest, a new revision.
fn with_custom_section(bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let name = b"kubeplug-test";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    assert!(section.len() < 128, "one-byte LEB128 size");
    let mut out = bytes.to_vec();
    out.push(0);
    out.push(section.len() as u8);
    out.extend(section);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_carries_forward_its_record_not_the_status() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|_| {}).await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    let a = std::fs::read(common::plugin("image-pinner"))?;
    let b = with_custom_section(&a, b"revision b");
    let b_file = t.file("b.wasm", &b);
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.module("team-a", "pinner-b", "plugin.wasm", &b_file)
        .await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;
    // Revision b, promoted through a rollout: two revisions and a rollout to carry forward.
    t.apply(
        &(pinner("team-a", "pinner", "pinner-b", "nginx:1.25", "")
            + "  rollout: {shadow: {reconciles: 3}, promote: true}\n"),
    )
    .await?;
    let b_digest = format!("sha256:{}", hex::encode(Sha256::digest(&b)));
    let promoted = rollout_phase(&t, "team-a", "pinner", "Promoted").await;
    assert_eq!(promoted["candidate"], b_digest.as_str());
    eventually(WAIT, "two revisions, recorded", || {
        let s = &t.plugin("team-a", "pinner").unwrap()["status"];
        s["revisions"].as_array().is_some_and(|r| r.len() == 2)
            && record_of(&t, "team-a", "pinner").is_some_and(|(_, r)| {
                r["revisions"].as_array().is_some_and(|r| r.len() == 2)
                    && r["rollout"]["phase"] == "Promoted"
            })
    })
    .await;
    let genuine = t.plugin("team-a", "pinner").unwrap()["status"].clone();
    assert_eq!(genuine["revisions"][0]["digest"], b_digest.as_str());

    // The host goes; a tenant forges the status; another host starts on the same API server.
    let Tenancy {
        sim,
        host,
        kubeconfig,
        tmp,
    } = t;
    host.shutdown().await;
    let host = Host::start(sim.client()?, host_config()).await?;
    let t = Tenancy {
        sim,
        host,
        kubeconfig,
        tmp,
    };
    forge_status(&t, "team-a", "pinner", &genuine["revisions"]).await?;
    eventually(WAIT, "the genuine revisions and rollout back", || {
        let s = t.plugin("team-a", "pinner").unwrap()["status"].clone();
        s["revisions"] == genuine["revisions"] && s["rollout"] == genuine["rollout"]
    })
    .await;
    eventually(WAIT, "a StatusOverwritten Event", || {
        !overwritten_events(&t, "team-a", "pinner").is_empty()
    })
    .await;
    t.reason_becomes("team-a", "pinner", "Running").await;

    // A record that does not parse is reported and rebuilt; the Plugin keeps running.
    let (record_name, _) = record_of(&t, "team-a", "pinner").unwrap();
    let Tenancy {
        sim,
        host,
        kubeconfig,
        tmp,
    } = t;
    host.shutdown().await;
    kubectl_at(
        &kubeconfig,
        &[
            "-n",
            "default",
            "patch",
            "configmap",
            &record_name,
            "--type=merge",
            "-p",
            r#"{"data": {"record.json": "{\"version\": 1, \"revisions\": \"not a record"}}"#,
        ],
        "",
    )
    .await?;
    let t = Tenancy {
        host: Host::start(sim.client()?, host_config()).await?,
        sim,
        kubeconfig,
        tmp,
    };
    eventually(WAIT, "the record rebuilt", || {
        record_of(&t, "team-a", "pinner").is_some_and(|(_, r)| {
            r["revisions"].as_array().map(Vec::len) == Some(1)
                && r["revisions"][0]["digest"] == b_digest.as_str()
        })
    })
    .await;
    t.reason_becomes("team-a", "pinner", "Running").await;
    assert!(!log_lines_with("status record is not used").is_empty());
    Ok(())
}

/// The README's tenant policy, applying to team-b as well.
fn two_tenants_policy() -> String {
    let policy = POLICY.replace("names: [team-a]", "names: [team-a, team-b]");
    assert!(
        policy.contains("team-b"),
        "the sample policy changed: {POLICY}"
    );
    policy
}

/// Ready reasons of Plugins `{ns}/{prefix}0` to `{prefix}{n-1}`.
fn reasons(t: &Tenancy, ns: &str, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            t.condition(ns, &format!("{prefix}{i}"), "Ready")
                .map(|(_, reason, _)| reason)
                .unwrap_or_default()
        })
        .collect()
}

/// Issue 35, finding 4 (slots): with a host-wide cap of 6, one namespace's twelve Plugins
/// whose module does not even compile hold no slot: another namespace's new Plugin runs, and
/// the flood's extra Plugins are refused naming the per-namespace cap (a quarter of the
/// host's by default: 2), unresolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_that_cannot_load_hold_no_slot_another_namespace_needs() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|c| c.objects.as_mut().unwrap().max_plugins = 6).await?;
    t.apply(&two_tenants_policy()).await?;
    // A component header, then bytes that are no section (and no UTF-8: binaryData).
    let junk = t.file("junk.wasm", b"\0asm\x0d\0\x01\0\xff\xfe\xfd no component");
    t.module("team-a", "junk", "plugin.wasm", &junk).await?;
    for i in 0..12 {
        t.apply(&pinner(
            "team-a",
            &format!("broken-{i}"),
            "junk",
            "nginx:1.25",
            "",
        ))
        .await?;
    }
    // Each is looked at or refused: two fail to compile, ten wait behind the namespace's cap.
    let mut last = Vec::new();
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            last = reasons(&t, "team-a", "broken-", 12);
            if last.iter().filter(|r| *r == "CompileFailed").count() == 2
                && last.iter().filter(|r| *r == "TooManyPlugins").count() == 10
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "team-a's Plugins: {last:?}");
    t.module(
        "team-b",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-b", "good", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-b", "good", "Running").await;
    assert_eq!(
        t.host.controller().plugins(),
        vec!["team-b/good".to_string()]
    );
    for i in 0..12 {
        if let Some((_, reason, message)) = t.condition("team-a", &format!("broken-{i}"), "Ready")
            && reason == "TooManyPlugins"
        {
            assert!(
                message.contains("at most 2 Plugin objects of namespace team-a")
                    && message.contains("--max-plugins-per-namespace"),
                "{message}"
            );
        }
    }
    Ok(())
}

/// A Plugin running image-pinner's module from image `tag`, pinning to nginx:1.25.
fn image_pinner(ns: &str, name: &str, tag: &kubeplug::oci::OciRef) -> String {
    PluginYaml::image(ns, name, tag)
        .pinning("nginx:1.25")
        .yaml()
}

/// Issue 35, finding 4 (compiles): one namespace's two 12 MiB TypeScript modules (images:
/// the API server takes no ConfigMap that big) compile in the background, one at a time on
/// that namespace's turn, while another namespace's small Plugin compiles beside them and
/// runs before the first namespace's first module is even compiled (an order, not a time;
/// the times are printed for the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespaces_big_compiles_do_not_hold_back_another_namespaces_plugin() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let Some(reg) = crate::registry::Registry::start() else {
        return Ok(());
    };
    let modules = tempfile::tempdir()?;
    let registries = kubeplug::oci::Registries::new(&reg.args(modules.path()))?;
    // A compile cache of its own, empty: every module really compiles.
    let cache = tempfile::tempdir()?;
    let t = start(|c| {
        c.compile_cache = Some(cache.path().to_path_buf());
        c.objects.as_mut().unwrap().registries = Some(registries.clone());
    })
    .await?;
    let pushed = tempfile::tempdir()?;
    let pusher = kubeplug::oci::Registries::new(&reg.args(pushed.path()))?;
    let js = std::fs::read(common::plugin("image-pinner-js"))?;
    let mut big = Vec::new();
    for i in 0..2 {
        let tag = reg.reference(&format!("team-a/big-{i}:v1"));
        let module = with_custom_section(&js, format!("compile {i}").as_bytes());
        kubeplug::oci::transfer::push(&pusher, &tag, &module).await?;
        big.push(tag);
    }
    let small = reg.reference("team-b/pinner:v1");
    let rust = std::fs::read(common::plugin("image-pinner"))?;
    kubeplug::oci::transfer::push(&pusher, &small, &rust).await?;
    let policy = format!(
        "{}  modules: {{images: [\"{}\"]}}\n",
        two_tenants_policy(),
        reg.addr
    );
    t.apply(&policy).await?;
    let started = std::time::Instant::now();
    for (i, tag) in big.iter().enumerate() {
        t.apply(&image_pinner("team-a", &format!("big-{i}"), tag))
            .await?;
    }
    // team-b's Plugin arrives while team-a's modules compile.
    t.reason_becomes("team-a", "big-0", "Compiling").await;
    let applied = std::time::Instant::now();
    t.apply(&image_pinner("team-b", "small", &small)).await?;
    t.reason_becomes("team-b", "small", "Running").await;
    let b_ready = applied.elapsed();
    let a = reasons(&t, "team-a", "big-", 2);
    // Each compile slot has a thread pool of its own: the small module does not wait behind
    // the big one's functions (on rayon's one global pool it did, and ran after it).
    assert!(
        a[0] != "Running",
        "team-b's Plugin waited for team-a's compile beside it: {a:?}"
    );
    // team-a's modules all compile in the end, one after another.
    eventually(
        Duration::from_secs(600),
        "team-a's two Plugins running",
        || {
            reasons(&t, "team-a", "big-", 2)
                .iter()
                .all(|r| r == "Running")
        },
    )
    .await;
    println!(
        "team-b's Plugin Ready {:.1} s after it was applied; team-a's two 12 MiB modules all running {:.1} s after the first was applied",
        b_ready.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Issue 35: a Plugin acts as a ServiceAccount of its namespace. It is handed only the kinds
/// that account may read itself (asked with SubjectAccessReview), its writes are sent
/// impersonating it (the API server refuses what its RBAC does not allow, although kubeplug
/// itself may patch Deployments and the policy allows it), and a Plugin without a policy
/// never reads Secrets. kubeplug runs as its own ServiceAccount with host/deploy/rbac.yaml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_acts_with_its_service_accounts_rights_only() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start_with(true, |c| {
        if let Some(objects) = c.objects.as_mut() {
            objects.access_ttl = Duration::from_millis(100);
            // Where host/deploy/rbac.yaml lets kubeplug keep its status records.
            objects.host_namespace = "kubeplug".into();
        }
    })
    .await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-a", "pinner", "pinner", "nginx:1.25", ""))
        .await?;

    // team-a's default ServiceAccount may not read Deployments: nothing runs.
    let message = t
        .reason_becomes("team-a", "pinner", "PermissionsExceedServiceAccount")
        .await;
    assert!(
        message.contains("ServiceAccount team-a/default may not get deployments"),
        "{message}"
    );
    assert!(t.host.controller().plugins().is_empty());

    // Read rights only: it runs, and its patch goes out as team-a:default, which the API
    // server refuses; the Deployment keeps its image.
    t.kubectl(&[
        "create",
        "role",
        "deploy-reader",
        "-n",
        "team-a",
        "--verb=get,list,watch",
        "--resource=deployments.apps",
    ])
    .await?;
    t.kubectl(&[
        "create",
        "rolebinding",
        "deploy-reader",
        "-n",
        "team-a",
        "--role=deploy-reader",
        "--serviceaccount=team-a:default",
    ])
    .await?;
    t.reason_becomes("team-a", "pinner", "Running").await;
    eventually(WAIT, "a refused write counted", || {
        t.plugin("team-a", "pinner")
            .is_some_and(|p| p["status"]["counts"]["errors"].as_u64().unwrap_or(0) > 0)
    })
    .await;
    assert_eq!(image_of(&t.sim, "team-a", "web").as_deref(), Some("alpine"));

    // The account's RBAC grants the patch: the next reconcile pins the image.
    t.kubectl(&[
        "create",
        "rolebinding",
        "pinner-rights",
        "-n",
        "team-a",
        "--clusterrole=kubeplug-plugin-deployments",
        "--serviceaccount=team-a:default",
    ])
    .await?;
    // A refused write is not retried until the object changes (403 is not transient).
    t.kubectl(&["-n", "team-a", "label", "deploy", "web", "touched=yes"])
        .await?;
    eventually(WAIT, "pinned as team-a:default", || {
        image_of(&t.sim, "team-a", "web").as_deref() == Some("nginx:1.25")
    })
    .await;

    // Revoked: the running revision stops at the next pass after the answers expire.
    t.kubectl(&[
        "delete",
        "rolebinding",
        "deploy-reader",
        "pinner-rights",
        "-n",
        "team-a",
    ])
    .await?;
    t.reason_becomes("team-a", "pinner", "PermissionsExceedServiceAccount")
        .await;
    eventually(WAIT, "stopped", || t.host.controller().plugins().is_empty()).await;

    // No policy applies to team-b: a Plugin reading Secrets is refused before anything is
    // watched, whatever its account may do.
    t.module(
        "team-b",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    let greedy = "apiVersion: kubeplug.dev/v1alpha1
kind: Plugin
metadata: {name: greedy, namespace: team-b}
spec:
  module: {configMap: {name: pinner}}
  permissions:
    reads: [{apiVersion: v1, kind: Secret}]
";
    t.apply(greedy).await?;
    let message = t
        .reason_becomes("team-b", "greedy", "PermissionsExceedPolicy")
        .await;
    assert!(
        message.contains("reading Secrets needs a PluginPolicy"),
        "{message}"
    );
    assert!(
        !t.host
            .controller()
            .watched_kinds()
            .iter()
            .any(|k| k.kind == "Secret"),
        "Secrets are never watched for it"
    );
    Ok(())
}
