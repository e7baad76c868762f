//! Plugins written in Python (componentize-py) and TypeScript (jco componentize): the ports of
//! image-pinner behave exactly as the Rust one through `kubeplug eval` and under a policy
//! against the embedded API server, and the sandbox holds for their language runtimes.
//!
//! The components are built by `make plugins` (which installs the pinned toolchains); a
//! missing one fails the test with that instruction rather than skipping it.

mod common;

use common::cluster::{
    Result, create_namespace, deployment, eventually, fast_config, image_of, load,
    policy_from_spec, sim,
};
use common::sandbox::{ctx, request, runtime};
use common::{fixture, plugin, test_plugin};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeplug::controller::{Controller, PluginInstance};
use kubeplug::plugin::{CallError, CallReport, Limits, Plugin};
use kubeplug_sim::Sim;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::Duration;

/// The two ports, by the name their metadata declares.
const PORTS: [&str; 2] = ["image-pinner-py", "image-pinner-js"];

fn eval(args: &[&str]) -> Output {
    // A compile cache shared by the tests of this binary: each 12-18 MB component is compiled
    // once, not once per test.
    let cache = common::compile_cache();
    Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .arg("eval")
        .args(args)
        .env("KUBEPLUG_CACHE_DIR", cache)
        .output()
        .expect("run kubeplug")
}

fn eval_json(args: &[&str]) -> Value {
    let out = eval(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"))
}

fn patches(out: &Value) -> Vec<Value> {
    out["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "patch")
        .cloned()
        .collect()
}

fn s(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_string()
}

/// `kubeplug eval` of a port on a fixture, with an optional configuration.
fn eval_port(port: &str, fixture_name: &str, config: Option<&str>) -> Value {
    let (p, f) = (s(&plugin(port)), s(&fixture(fixture_name)));
    let mut args = vec!["--plugin", &p, "--object", &f];
    if let Some(c) = config {
        args.extend(["--config", c]);
    }
    eval_json(&args)
}

#[test]
fn ports_patch_alpine_to_nginx_once() {
    for port in PORTS {
        let out = eval_port(port, "web-alpine.yaml", None);
        assert_eq!(out["plugin"]["name"], port);
        assert_eq!(out["plugin"]["contract"], "0.1.0");
        let patches = patches(&out);
        assert_eq!(patches.len(), 1, "{port}: {out:#}");
        let p = &patches[0];
        assert_eq!(p["patchType"], "strategic", "{port}");
        assert_eq!(p["target"]["namespace"], "shop", "{port}");
        assert_eq!(p["target"]["name"], "web", "{port}");
        assert_eq!(
            p["body"]["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:1.13"}]),
            "{port}"
        );
        let logs: Vec<_> = out["actions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["action"] == "log")
            .map(|a| a["message"].clone())
            .collect();
        assert_eq!(
            logs,
            [json!(
                "pinning images of shop/web: app: alpine -> nginx:1.13"
            )],
            "{port}: the same log line as the Rust plugin"
        );
    }
}

#[test]
fn ports_do_nothing_when_already_pinned() {
    for port in PORTS {
        let out = eval_port(port, "web-pinned.yaml", None);
        assert_eq!(out["actions"], json!([]), "{port}");
    }
}

#[test]
fn ports_take_their_target_from_config_text_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, r#"{"image": "nginx:1.25"}"#).unwrap();
    for port in PORTS {
        for config in [
            r#"{"image": "nginx:1.25"}"#.to_string(),
            format!("@{}", file.display()),
        ] {
            let out = eval_port(port, "web-pinned.yaml", Some(&config));
            let patches = patches(&out);
            assert_eq!(patches.len(), 1, "{port}: {out:#}");
            assert_eq!(
                patches[0]["body"]["spec"]["template"]["spec"]["containers"][0]["image"],
                "nginx:1.25",
                "{port}"
            );
        }
    }
}

#[test]
fn ports_only_touch_matching_containers() {
    for port in PORTS {
        // The container is named `app`: another name, or another image prefix, leaves it be.
        for config in [
            r#"{"containers": ["web"]}"#,
            r#"{"imagePrefixes": ["busybox"]}"#,
        ] {
            let out = eval_port(port, "web-alpine.yaml", Some(config));
            assert_eq!(out["actions"], json!([]), "{port} with {config}");
        }
        let config = r#"{"image": "nginx:1.25", "containers": ["app"], "imagePrefixes": ["alp"]}"#;
        let out = eval_port(port, "web-alpine.yaml", Some(config));
        assert_eq!(
            patches(&out)[0]["body"]["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:1.25"}]),
            "{port}"
        );
    }
}

#[test]
fn ports_report_a_bad_configuration_as_a_permanent_error() {
    for port in PORTS {
        let (p, f) = (s(&plugin(port)), s(&fixture("web-alpine.yaml")));
        for (config, says) in [
            (r#"{"imag": 1}"#, "unknown field `imag`"),
            (r#"{"image": 5}"#, "`image` should be"),
            ("[1]", "expected a JSON object"),
        ] {
            let out = eval(&["--plugin", &p, "--object", &f, "--config", config]);
            assert!(!out.status.success(), "{port} accepted {config}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("permanent error: invalid plugin configuration") && err.contains(says),
                "{port} with {config}: {err}"
            );
        }
    }
}

/// Patches sent by a field manager, per object name.
fn patches_by(sim: &Sim, manager: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in sim.requests().records() {
        if r.verb == "patch" && r.field_manager.as_deref() == Some(manager) && r.status < 300 {
            *counts
                .entry(r.name.clone().unwrap_or_default())
                .or_insert(0) += 1;
        }
    }
    counts
}

/// A port under an enforcing policy that lets it change container images of Deployments in
/// its namespace and nothing else: it converges with one patch per Deployment, does not patch
/// again when its own writes come back, and corrects a manual change with one more.
async fn converges_under_policy(port: &str) -> Result {
    let sim = sim().await?;
    let client = sim.client()?;
    let ns = "poly";
    create_namespace(&client, ns).await?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let names = ["web", "api", "worker"];
    for name in names {
        api.create(&PostParams::default(), &deployment(name, 1, "alpine"))
            .await?;
    }
    let policy = policy_from_spec(
        port,
        "mode: enforce\nnamespaces:\n  names: [poly]\nrules:\n  - apiVersion: apps/v1\n    kind: Deployment\n    verbs: [patch]\n    fields:\n      - /spec/template/spec/containers/*/name\n      - /spec/template/spec/containers/*/image\n",
    );
    let instance = PluginInstance::named(
        load(&plugin(port)).await,
        port,
        Some(r#"{"image": "nginx:1.25"}"#),
    )
    .with_policy(policy);
    let controller = Controller::start(client.clone(), fast_config(), vec![instance]).await?;
    let manager = format!("kubeplug/{port}");
    eventually(
        Duration::from_secs(60),
        "every Deployment at nginx:1.25",
        || {
            names
                .iter()
                .all(|n| image_of(&sim, ns, n).as_deref() == Some("nginx:1.25"))
        },
    )
    .await;
    // Let the plugin see its own writes come back: it must not patch again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let counts = patches_by(&sim, &manager);
    assert_eq!(counts.len(), names.len(), "{port}: {counts:?}");
    assert!(
        counts.values().all(|&n| n == 1),
        "{port}: exactly one patch per Deployment: {counts:?}"
    );

    let back = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
    api.patch("web", &PatchParams::default(), &Patch::Strategic(&back))
        .await?;
    eventually(Duration::from_secs(60), "web corrected again", || {
        patches_by(&sim, &manager).get("web") == Some(&2)
            && image_of(&sim, ns, "web").as_deref() == Some("nginx:1.25")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let total: usize = patches_by(&sim, &manager).values().sum();
    assert_eq!(total, names.len() + 1, "{port}: no hot loop");
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_port_converges_under_a_policy() -> Result {
    converges_under_policy("image-pinner-py").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_port_converges_under_a_policy() -> Result {
    converges_under_policy("image-pinner-js").await
}

/// Generous limits for calls that must succeed: on a loaded 2-core machine a call into a
/// language runtime must not fail for lack of time.
fn roomy() -> Limits {
    Limits {
        timeout: Duration::from_secs(20),
        ..Limits::default()
    }
}

async fn call(p: &Plugin, mode: &str, limits: Limits) -> CallReport {
    p.reconcile(&request(&format!(r#"{{"mode": "{mode}"}}"#)), &ctx(limits))
        .await
}

fn logged(report: &CallReport) -> Vec<String> {
    match &report.outcome {
        Ok(actions) => actions
            .iter()
            .filter_map(|a| match a {
                kubeplug::contract::Action::Log { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect(),
        Err(e) => panic!("call failed: {e}"),
    }
}

/// An infinite loop in the guest's interpreter is stopped at the deadline, an unbounded
/// allocation at the memory limit; the same plugin and a good one beside it keep working.
async fn sandbox_holds_for(hostile: &str) {
    let rt = runtime(Some(&common::compile_cache()));
    let bad = rt.load_file(&test_plugin(hostile)).await.unwrap();
    let good = rt.load_file(&plugin("image-pinner-py")).await.unwrap();
    assert_eq!(
        logged(&call(&bad, "behave", roomy()).await),
        ["reconciled default/web"],
        "{hostile}"
    );

    let limits = Limits {
        timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let report = call(&bad, "loop", limits).await;
    assert_eq!(
        report.outcome.unwrap_err(),
        CallError::Timeout {
            limit: limits.timeout
        },
        "{hostile}"
    );

    for _ in 0..2 {
        match call(&bad, "alloc", roomy()).await.outcome {
            Err(CallError::OutOfMemory { limit, requested }) => {
                assert_eq!(limit, 64 << 20, "{hostile}");
                assert!(requested > limit, "{hostile}");
            }
            other => panic!("{hostile}: expected out of memory, got {other:?}"),
        }
    }

    assert_eq!(
        logged(&call(&bad, "behave", roomy()).await),
        ["reconciled default/web"],
        "{hostile} after its misbehaviour"
    );
    // The good plugin in the same runtime: the default request has no containers, so no action,
    // and no error.
    let report = good
        .reconcile(&request(r#"{"image": "nginx:1.25"}"#), &ctx(roomy()))
        .await;
    assert_eq!(
        report.outcome.unwrap(),
        vec![],
        "image-pinner-py beside {hostile}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sandbox_stops_loops_and_hoarding() {
    sandbox_holds_for("hostile-py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_sandbox_stops_loops_and_hoarding() {
    sandbox_holds_for("hostile-js").await;
}

/// The ports (image-pinner-py, sample-controller-ts, customcluster-py, with the Rust
/// change-logger) under one fault schedule and a restart end with the objects the Rust
/// plugins end with in the fault-free run, every write inside the port's policy. Slow the
/// first time (the ports compile for minutes, which is why it is here and not in `it`, whose
/// time-bounded tests it would starve; the compile cache keeps them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_ports_end_where_the_rust_plugins_end() {
    let mut config = common::chaos_config(1, 1);
    config.plugin_sets = kubeplug::chaos::PluginChoice::Ports;
    let report = kubeplug::chaos::run(&config).await.unwrap();
    let text = report.to_string();
    println!("{text}");
    assert_eq!(report.baseline.plugins, kubeplug::chaos::PluginSet::Rust);
    assert_eq!(
        report.schedules[0].plugins,
        kubeplug::chaos::PluginSet::Ports,
        "{text}"
    );
    assert!(report.schedules[0].writes.total > 0, "{text}");
    assert!(report.faults() > 0, "faults were injected:\n{text}");
    assert_eq!(report.violations(), vec![], "{text}");
}
