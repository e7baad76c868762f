//! kubectl against the embedded API server: get, apply, scale, edit --validate=false,
//! delete; ConfigMaps from binary files; CRDs applied at runtime, their printer columns,
//! schema and status subresource, and `kubectl wait` on a condition.
//! Skipped (with a printed reason) when kubectl is not on PATH, except under `CI=true`.

use kubeplug_sim::Sim;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Whether kubectl is on PATH; under `CI=true` its absence fails the test instead of
/// skipping it (CI must prove what the README promises).
pub(crate) fn kubectl_available() -> bool {
    let found = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found || std::env::var("CI").as_deref() != Ok("true"),
        "kubectl is not on PATH and CI=true: install kubectl"
    );
    found
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    anyhow::ensure!(
        output.status.success(),
        "kubectl {args:?} failed: {stderr}{stdout}"
    );
    Ok(stdout)
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: IMAGE
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_apply_scale_edit_delete() -> anyhow::Result<()> {
    if !kubectl_available() {
        println!("SKIPPED kubectl_get_apply_scale_edit_delete: kubectl is not on PATH");
        return Ok(());
    }
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(20))
        .start()
        .await?;
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc)?;
    let manifest = dir.path().join("web.yaml");
    let kc2 = kc.clone();
    let run = move |args: Vec<String>| {
        let kc = kc2.clone();
        tokio::task::spawn_blocking(move || {
            kubectl(&kc, &args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();

    let namespaces = run(args("get namespaces -o name")).await??;
    assert!(namespaces.contains("namespace/default"), "{namespaces}");

    std::fs::write(&manifest, DEPLOYMENT.replace("IMAGE", "nginx:1"))?;
    let path = manifest.display().to_string();
    let out = run(vec![
        "apply".into(),
        "--validate=false".into(),
        "-f".into(),
        path.clone(),
    ])
    .await??;
    assert!(out.contains("created"), "{out}");
    std::fs::write(&manifest, DEPLOYMENT.replace("IMAGE", "nginx:2"))?;
    let out = run(vec![
        "apply".into(),
        "--validate=false".into(),
        "-f".into(),
        path,
    ])
    .await??;
    assert!(out.contains("configured"), "{out}");
    let image = run(args(
        "get deployment web -o jsonpath={.spec.template.spec.containers[0].image}",
    ))
    .await??;
    assert_eq!(image, "nginx:2");

    let out = run(args("scale deployment web --replicas=4")).await??;
    assert!(out.contains("scaled"), "{out}");
    let replicas = sim
        .get("deployments", Some("default"), "web")
        .and_then(|d| d["spec"]["replicas"].as_i64());
    assert_eq!(replicas, Some(4));

    let listed = run(args("get deployments")).await??;
    assert!(
        listed.contains("READY") && listed.contains("UP-TO-DATE"),
        "table columns: {listed}"
    );
    assert!(listed.lines().any(|l| l.starts_with("web ")), "{listed}");

    let kc3 = kc.clone();
    let edited = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .env("KUBE_EDITOR", "sed -i s/replicas:\\ 4/replicas:\\ 5/")
            .arg("--kubeconfig")
            .arg(&kc3)
            .args(["edit", "deployment", "web", "--validate=false"])
            .output()
    })
    .await??;
    assert!(
        edited.status.success(),
        "kubectl edit: {}",
        String::from_utf8_lossy(&edited.stderr)
    );
    let replicas = sim
        .get("deployments", Some("default"), "web")
        .and_then(|d| d["spec"]["replicas"].as_i64());
    assert_eq!(replicas, Some(5), "edited");

    let out = run(args("delete deployment web")).await??;
    assert!(out.contains("deleted"), "{out}");
    assert!(sim.get("deployments", Some("default"), "web").is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_and_events() -> anyhow::Result<()> {
    if !kubectl_available() {
        println!("SKIPPED kubectl_typed_create_and_events: kubectl is not on PATH");
        return Ok(());
    }
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(20))
        .start()
        .await?;
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc)?;
    let run = |line: &str| {
        let kc = kc.clone();
        let args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        tokio::task::spawn_blocking(move || {
            kubectl(&kc, &args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    // Typed commands send protobuf bodies.
    let out = run("create namespace team-a").await??;
    assert!(out.contains("namespace/team-a created"), "{out}");
    let out = run("create deployment web --image=nginx:1 --replicas=2 -n team-a").await??;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let image = run("get deploy web -n team-a -o jsonpath={.spec.template.spec.containers[0].image}/{.spec.replicas}")
        .await??;
    assert_eq!(image, "nginx:1/2");

    // An Event sent through events.k8s.io (as kubeplug sends them) shows in kubectl's
    // core-Event views: `get events` and `describe`.
    let client = sim.client()?;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), "team-a");
    let web: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "team-a");
    let uid = web.get("web").await?.metadata.uid;
    let event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web.scaled"},
        "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team-a", "uid": uid},
        "reason": "ReplicasChanged", "note": "Replicas changed: 1 -> 3", "type": "Normal",
        "action": "Observe", "reportingController": "kubeplug", "reportingInstance": "kubeplug-0",
        "eventTime": "2026-01-01T00:00:00.000000Z"
    }))?;
    events.create(&Default::default(), &event).await?;
    let out = run("get events -n team-a").await??;
    assert!(out.contains("ReplicasChanged"), "{out}");
    assert!(out.contains("deployment/web"), "{out}");
    assert!(out.contains("Replicas changed: 1 -> 3"), "{out}");
    let out = run("describe deploy web -n team-a").await??;
    assert!(out.contains("Replicas changed: 1 -> 3"), "{out}");
    Ok(())
}

/// The CRDs kubeplug ships (`host/deploy/crds/`).
fn crds_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

const PLUGIN: &str = "apiVersion: kubeplug.dev/v1alpha1
kind: Plugin
metadata:
  name: pinner
  namespace: team-a
spec:
  module:
    configMap: {name: pinner}
  permissions:
    rules:
    - apiVersion: apps/v1
      kind: Deployment
      verbs: [patch]
      fields: [/spec/template/spec/containers/*/image]
";

const POLICY: &str = "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata:
  name: tenants
spec:
  appliesTo: {names: [team-a, team-b]}
  mode: enforce
  rules:
  - {apiVersion: apps/v1, kind: Deployment, verbs: [patch]}
";

/// The cells of the row whose first cell is `name`, split on runs of spaces.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.contains(&name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

/// The whole tenant flow of issue 25 as a user types it: CRDs applied with kubectl (default
/// client validation), a ConfigMap from a binary file read back byte for byte, a Plugin with
/// its defaults, printer columns, the status subresource's rules, `kubectl wait` released by
/// a status patch, schema errors, and the 1 MiB ConfigMap limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_plugins_configmaps_crds_status_and_wait() -> anyhow::Result<()> {
    if !kubectl_available() {
        println!("SKIPPED kubectl_plugins_configmaps_crds_status_and_wait: kubectl is not on PATH");
        return Ok(());
    }
    let sim = Sim::builder().start().await?;
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc)?;
    let run = |args: Vec<String>| {
        let kc = kc.clone();
        tokio::task::spawn_blocking(move || {
            kubectl(&kc, &args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let file = |name: &str, text: &str| -> anyhow::Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        Ok(path.display().to_string())
    };

    // The CRDs, applied at runtime without --validate=false; the next command sees the kinds.
    let crds = crds_dir().display().to_string();
    let out = run(vec!["apply".into(), "-f".into(), crds]).await??;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/plugins.kubeplug.dev created")
            && out.contains("pluginpolicies.kubeplug.dev created"),
        "{out}"
    );
    let out = run(args(
        "wait --for condition=established --timeout=10s crd/plugins.kubeplug.dev crd/pluginpolicies.kubeplug.dev",
    ))
    .await??;
    assert_eq!(out.matches("condition met").count(), 2, "{out}");
    let out = run(args("get plugins -A")).await??;
    assert_eq!(out, "", "served and empty");
    let out = run(args("explain plugins.spec.module")).await??;
    assert!(out.contains("exactly one of configMap or"), "{out}");
    assert!(out.contains("configMap\t<Object>"), "{out}");

    // A ConfigMap from a file that is not UTF-8 (kubectl puts it in binaryData), byte-exact.
    run(args("create namespace team-a")).await??;
    let module: Vec<u8> = b"\0asm\x0d\0\x01\0"
        .iter()
        .copied()
        .chain((0..=255u8).rev())
        .collect();
    let wasm = dir.path().join("image-pinner.wasm");
    std::fs::write(&wasm, &module)?;
    let from_file = format!("--from-file=plugin.wasm={}", wasm.display());
    let out = run(vec![
        "-n".into(),
        "team-a".into(),
        "create".into(),
        "configmap".into(),
        "pinner".into(),
        from_file,
    ])
    .await??;
    assert!(out.contains("configmap/pinner created"), "{out}");
    let encoded = run(args(
        "get cm pinner -n team-a -o jsonpath={.binaryData.plugin\\.wasm}",
    ))
    .await??;
    use base64::Engine;
    let read_back = base64::engine::general_purpose::STANDARD.decode(encoded.trim())?;
    assert_eq!(read_back, module, "byte-exact through kubectl");
    let stored = sim.get("configmaps", Some("team-a"), "pinner").unwrap();
    assert!(stored.get("data").is_none(), "{stored}");
    let out = run(args("get configmaps -n team-a")).await??;
    assert_eq!(row(&out, "pinner")[1], "1", "DATA column: {out}");

    // The Plugin, with the schema's defaults filled in.
    let plugin = file("plugin.yaml", PLUGIN)?;
    let out = run(vec!["apply".into(), "-f".into(), plugin.clone()]).await??;
    assert!(out.contains("plugin.kubeplug.dev/pinner created"), "{out}");
    let out = run(args(
        "get kp pinner -n team-a -o jsonpath={.spec.mode}/{.spec.module.configMap.key}/{.metadata.generation}",
    ))
    .await??;
    assert_eq!(out, "enforce/plugin.wasm/1");
    let out = run(args("get plugins -A")).await??;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "MODE",
            "READY",
            "REASON",
            "DIGEST",
            "AGE"
        ],
        "{out}"
    );
    assert_eq!(row(&out, "pinner")[..2], ["team-a", "pinner"], "{out}");
    assert_eq!(
        row(&out, "pinner").len(),
        3,
        "no status yet: empty cells: {out}"
    );

    // kubectl wait blocks until a status patch makes the Ready condition true.
    let kc_wait = kc.clone();
    let waiting = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc_wait,
            &[
                "wait",
                "--for=condition=Ready",
                "plugin/pinner",
                "-n",
                "team-a",
                "--timeout=30s",
            ],
        )
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "wait returned before the condition was set"
    );
    let status = r#"{"status":{"observedGeneration":1,"mode":"enforce","shortDigest":"0123456789ab","conditions":[{"type":"Ready","status":"True","reason":"Running","message":"revision 1 runs","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    let out = run(vec![
        "patch".into(),
        "plugin".into(),
        "pinner".into(),
        "-n".into(),
        "team-a".into(),
        "--subresource=status".into(),
        "--type=merge".into(),
        "-p".into(),
        status.into(),
    ])
    .await??;
    assert!(out.contains("patched"), "{out}");
    let out = tokio::time::timeout(Duration::from_secs(20), waiting).await???;
    assert!(
        out.contains("plugin.kubeplug.dev/pinner condition met"),
        "{out}"
    );
    let out = run(args("get plugins -A")).await??;
    assert_eq!(
        row(&out, "pinner")[..6],
        [
            "team-a",
            "pinner",
            "enforce",
            "True",
            "Running",
            "0123456789ab"
        ],
        "{out}"
    );
    let generation = || {
        sim.get("plugins", Some("team-a"), "pinner").unwrap()["metadata"]["generation"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(
        generation(),
        1,
        "a status write does not bump the generation"
    );

    // The main resource ignores status; a spec change bumps the generation, a label does not.
    let out = run(vec![
        "patch".into(),
        "kp".into(),
        "pinner".into(),
        "-n".into(),
        "team-a".into(),
        "--type=merge".into(),
        "-p".into(),
        r#"{"spec":{"mode":"dry-run"},"status":{"mode":"hacked"}}"#.into(),
    ])
    .await??;
    assert!(out.contains("patched"), "{out}");
    let stored = sim.get("plugins", Some("team-a"), "pinner").unwrap();
    assert_eq!(stored["spec"]["mode"], "dry-run");
    assert_eq!(stored["status"]["mode"], "enforce", "status kept: {stored}");
    assert_eq!(generation(), 2);
    run(args("label plugin pinner -n team-a team=a")).await??;
    assert_eq!(generation(), 2, "metadata only");
    let out = run(vec![
        "patch".into(),
        "kp".into(),
        "pinner".into(),
        "-n".into(),
        "team-a".into(),
        "--subresource=status".into(),
        "--type=merge".into(),
        "-p".into(),
        r#"{"spec":{"mode":"enforce"},"status":{"mode":"dry-run"}}"#.into(),
    ])
    .await??;
    assert!(out.contains("patched"), "{out}");
    let stored = sim.get("plugins", Some("team-a"), "pinner").unwrap();
    assert_eq!(
        stored["spec"]["mode"], "dry-run",
        "a status write leaves spec: {stored}"
    );
    assert_eq!(stored["status"]["mode"], "dry-run");
    assert_eq!(generation(), 2);

    // The schema refuses what the real server refuses, naming the field.
    let bad = file(
        "bad.yaml",
        &PLUGIN.replace(
            "configMap: {name: pinner}",
            "configMap: {name: pinner}\n    sha256: nope\n  mode: loud",
        ),
    )?;
    let err = run(vec!["apply".into(), "-f".into(), bad])
        .await?
        .unwrap_err();
    let err = err.to_string();
    assert!(err.contains("The Plugin \"pinner\" is invalid"), "{err}");
    assert!(
        err.contains(
            "spec.mode: Unsupported value: \"loud\": supported values: \"enforce\", \"dry-run\""
        ),
        "{err}"
    );
    assert!(
        err.contains("spec.module.sha256: Invalid value: \"nope\""),
        "{err}"
    );

    // A typo is refused (kubectl's default --validate=strict becomes fieldValidation=Strict),
    // not silently pruned.
    let typo = file(
        "typo.yaml",
        &PLUGIN.replace("  permissions:", "  permisions:"),
    )?;
    let err = run(vec!["apply".into(), "-f".into(), typo.clone()])
        .await?
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("strict decoding error: unknown field \"spec.permisions\""),
        "{err}"
    );
    let out = run(vec![
        "apply".into(),
        "--validate=false".into(),
        "-f".into(),
        typo,
    ])
    .await??;
    assert!(out.contains("configured"), "ignored and pruned: {out}");

    // Cluster-scoped policies and their columns.
    let policy = file("policy.yaml", POLICY)?;
    run(vec!["apply".into(), "-f".into(), policy]).await??;
    let out = run(args("get pluginpolicies")).await??;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MODE", "APPLIES-TO", "READY", "REASON", "AGE"],
        "{out}"
    );
    assert_eq!(
        row(&out, "tenants")[..3],
        ["tenants", "enforce", r#"["team-a","team-b"]"#],
        "{out}"
    );

    // A ConfigMap over 1 MiB is refused like the real server refuses it.
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![0xffu8; 1024 * 1024 + 1])?;
    let err = run(vec![
        "-n".into(),
        "team-a".into(),
        "create".into(),
        "configmap".into(),
        "big".into(),
        format!("--from-file={}", big.display()),
    ])
    .await?
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("Too long: must have at most 1048576 bytes"),
        "{err}"
    );
    assert!(sim.get("configmaps", Some("team-a"), "big").is_none());
    Ok(())
}
