//! The controller end to end: the host's controller, the built plugins and the embedded API
//! server over HTTP, with the sim's request log as the record of what was done.

use crate::common;

use common::cluster::{
    Result, create_namespace, deployment, eventually, fast_config, image_of, load, log_lines_with,
    sim,
};
use common::{plugin, test_plugin};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubeplug::controller::{Controller, ControllerConfig, PluginInstance};
use kubeplug::plugin::CallLimits;
use kubeplug::policy::{Decision, Policy};
use kubeplug_sim::{ErrorFault, FaultState, Faults, Sim};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

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

/// A sim whose namespace `ns` holds one-replica `alpine` Deployments of these names: the sim,
/// its client and the namespace's Deployments.
async fn alpine_deployments<S: AsRef<str>>(
    ns: &str,
    names: impl IntoIterator<Item = S>,
) -> Result<(Sim, kube::Client, Api<Deployment>)> {
    let sim = sim().await?;
    let client = sim.client()?;
    let api = alpine_deployments_in(&client, ns, names).await?;
    Ok((sim, client, api))
}

/// Creates namespace `ns` with one-replica `alpine` Deployments of these names.
async fn alpine_deployments_in<S: AsRef<str>>(
    client: &kube::Client,
    ns: &str,
    names: impl IntoIterator<Item = S>,
) -> Result<Api<Deployment>> {
    create_namespace(client, ns).await?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for name in names {
        api.create(
            &PostParams::default(),
            &deployment(name.as_ref(), 1, "alpine"),
        )
        .await?;
    }
    Ok(api)
}

fn metric(controller: &Controller, name: &str, plugin: &str) -> f64 {
    let text = controller.metrics_text();
    let prefix = format!("{name}{{name=\"{plugin}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pinner_converges_with_one_patch_per_deployment() -> Result {
    let names = ["web", "api", "worker"];
    let (sim, client, _) = alpine_deployments("team-a", names).await?;
    alpine_deployments_in(&client, "team-b", names).await?;
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(client.clone(), fast_config(), vec![pinner]).await?;
    let all_pinned = || {
        ["team-a", "team-b"].iter().all(|ns| {
            names
                .iter()
                .all(|n| image_of(&sim, ns, n).as_deref() == Some("nginx:1.13"))
        })
    };
    eventually(
        Duration::from_secs(20),
        "every Deployment at nginx:1.13",
        all_pinned,
    )
    .await;
    // Let the plugin see its own writes come back: it must not patch again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let patches = patches_by(&sim, "kubeplug/image-pinner");
    assert_eq!(patches.len(), names.len(), "{patches:?}");
    let total: usize = patches.values().sum();
    assert_eq!(total, 6, "exactly one patch per Deployment: {patches:?}");
    for r in sim
        .requests()
        .records()
        .iter()
        .filter(|r| r.verb == "patch")
    {
        assert_eq!(r.patch_type.as_deref(), Some("strategic"));
    }

    // A manual change back to alpine is corrected again, with one more patch.
    let api: Api<Deployment> = Api::namespaced(client.clone(), "team-a");
    let back = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
    api.patch("web", &PatchParams::default(), &Patch::Strategic(&back))
        .await?;
    eventually(Duration::from_secs(10), "web corrected again", || {
        patches_by(&sim, "kubeplug/image-pinner").get("web") == Some(&3)
            && image_of(&sim, "team-a", "web").as_deref() == Some("nginx:1.13")
    })
    .await;
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_logger_reports_scaling_images_and_deletion() -> Result {
    let (_sim, client, api) = alpine_deployments("logged", ["shop"]).await?;
    let logger = PluginInstance::named(load(&plugin("change-logger")).await, "change-logger", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(client.clone(), fast_config(), vec![logger]).await?;
    let has_line = |text: &'static str| move || !log_lines_with(text).is_empty();
    eventually(
        Duration::from_secs(20),
        "the added line",
        has_line("Deployment shop added - Replicas: 1, Image: alpine"),
    )
    .await;

    api.patch(
        "shop",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await?;
    eventually(
        Duration::from_secs(10),
        "the replicas line",
        has_line("Deployment shop updated - Replicas changed: 1 -> 3"),
    )
    .await;
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}}});
    api.patch("shop", &PatchParams::default(), &Patch::Strategic(image))
        .await?;
    eventually(
        Duration::from_secs(10),
        "the image line",
        has_line("Deployment shop updated - Image changed: alpine -> nginx:1.25"),
    )
    .await;
    api.delete("shop", &DeleteParams::default()).await?;
    eventually(
        Duration::from_secs(10),
        "the deleted line",
        has_line("Deployment logged/shop has been deleted"),
    )
    .await;
    let line = &log_lines_with("Replicas changed: 1 -> 3")[0];
    assert!(
        line.contains("plugin=\"change-logger\"") && line.contains("key=\"logged/shop\""),
        "{line}"
    );

    // Every line is also a Kubernetes Event reported by the plugin (created right after the
    // log line, by the same call: wait for it).
    let events: Api<Event> = Api::namespaced(client.clone(), "logged");
    let expected = [
        (
            "Added",
            "Deployment shop added - Replicas: 1, Image: alpine",
        ),
        (
            "ReplicasChanged",
            "Deployment shop updated - Replicas changed: 1 -> 3",
        ),
        (
            "ImageChanged",
            "Deployment shop updated - Image changed: alpine -> nginx:1.25",
        ),
        ("Deleted", "Deployment logged/shop has been deleted"),
    ];
    let started = Instant::now();
    loop {
        let notes: Vec<(String, String)> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|e| {
                assert_eq!(
                    e.reporting_controller.as_deref(),
                    Some("kubeplug/change-logger")
                );
                (e.reason.unwrap_or_default(), e.note.unwrap_or_default())
            })
            .collect();
        let missing: Vec<_> = expected
            .iter()
            .filter(|(r, n)| !notes.contains(&(r.to_string(), n.to_string())))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "missing events {missing:?} in {notes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_200_deployments_under_faults() -> Result {
    let sim = sim().await?;
    let client = sim.client()?;
    create_namespace(&client, "load").await?;
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(client.clone(), fast_config(), vec![pinner]).await?;
    eventually(Duration::from_secs(10), "caches synced", || {
        controller.is_synced()
    })
    .await;

    // From now on the controller's reads and writes fail often; the test's own creates don't.
    let faults = sim.faults();
    faults.inject_errors(ErrorFault::ratio(500, 0.2, 7).verbs(["patch", "list", "watch", "get"]));
    faults.inject_errors(
        ErrorFault::every_nth(429, 7)
            .verbs(["patch"])
            .retry_after(1),
    );
    faults.conflict_next_writes(20);
    faults.gone_next_watches(2);
    let api: Api<Deployment> = Api::namespaced(client.clone(), "load");
    let creates = (0..200).map(|i| {
        let api = api.clone();
        async move {
            api.create(
                &PostParams::default(),
                &deployment(&format!("d{i}"), 1, "alpine"),
            )
            .await
        }
    });
    for created in futures::future::join_all(creates).await {
        created?;
    }
    faults.drop_watches();
    tokio::time::sleep(Duration::from_millis(300)).await;
    faults.drop_watches();
    let converged = || {
        (0..200).all(|i| image_of(&sim, "load", &format!("d{i}")).as_deref() == Some("nginx:1.13"))
    };
    eventually(
        Duration::from_secs(90),
        "all 200 Deployments at nginx:1.13",
        converged,
    )
    .await;
    let records = sim.requests().records();
    let failed = records.iter().filter(|r| r.fault.is_some()).count();
    assert!(
        failed > 20,
        "the faults were not exercised ({failed} failed requests)"
    );
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_plugins_do_not_hold_up_others_and_back_off() -> Result {
    let (sim, client, _) = alpine_deployments("iso", (0..10).map(|i| format!("d{i}"))).await?;
    let hostile = load(&test_plugin("hostile")).await;
    let instances = vec![
        PluginInstance::named(hostile.clone(), "looper", Some(r#"{"mode": "loop"}"#))
            .with_policy(Policy::trusted()),
        PluginInstance::named(hostile, "crasher", Some(r#"{"mode": "panic"}"#))
            .with_policy(Policy::trusted()),
        PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
            .with_policy(Policy::trusted()),
    ];
    let config = ControllerConfig {
        limits: CallLimits::default().with_timeout_ms(150)?,
        ..fast_config()
    };
    let started = Instant::now();
    let controller = Controller::start(client.clone(), config, instances).await?;
    let converged = || {
        (0..10).all(|i| image_of(&sim, "iso", &format!("d{i}")).as_deref() == Some("nginx:1.13"))
    };
    eventually(
        Duration::from_secs(20),
        "image-pinner converging beside failing plugins",
        converged,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let crasher = metric(&controller, "workqueue_retries_total", "crasher");
    let looper = metric(&controller, "workqueue_retries_total", "looper");
    // Both are retried with per-key exponential backoff (5 ms doubling, capped at 1 s by
    // `fast_config`): about a dozen retries per key over a few seconds and one a second
    // after, plus one per change of the object, where a hot loop would be thousands.
    let ceiling = 10.0 * (backed_off_retries(elapsed, 0.005, 1.0) + 5.0);
    assert!(
        crasher >= 10.0 && crasher <= ceiling,
        "crasher retried {crasher} times in {elapsed:.1}s (ceiling {ceiling})"
    );
    assert!(
        looper >= 10.0 && looper <= ceiling,
        "looper retried {looper} times in {elapsed:.1}s (ceiling {ceiling})"
    );
    assert!(!log_lines_with("panicked: hostile plugin panicked on purpose").is_empty());
    assert!(!log_lines_with("timed out after 150ms").is_empty());
    controller.shutdown().await;
    Ok(())
}

/// The most retries one key can have had in `elapsed` seconds of exponential backoff from
/// `base` doubling to `cap`: the first is immediate, each next one waits the next delay.
fn backed_off_retries(elapsed: f64, base: f64, cap: f64) -> f64 {
    let (mut waited, mut delay, mut retries) = (0.0, base, 1.0);
    while waited + delay <= elapsed {
        waited += delay;
        delay = (delay * 2.0).min(cap);
        retries += 1.0;
    }
    retries
}

#[test]
fn backed_off_retries_follow_the_doubling_then_the_cap() {
    assert_eq!(backed_off_retries(0.004, 0.005, 1.0), 1.0);
    // 5+10+20+40+80+160+320+640 ms = 1.275 s: nine retries, then one a second.
    assert_eq!(backed_off_retries(1.275, 0.005, 1.0), 9.0);
    assert_eq!(backed_off_retries(3.3, 0.005, 1.0), 11.0);
}

mod binary {
    //! `kubeplug run` as a process: bad input gets one clear line, and the rest keeps working.

    use super::common::host_process::HostProcess;
    use super::common::plugin;
    use std::process::Command;
    use std::time::Duration;

    fn kubeplug() -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
        cmd.env("KUBEPLUG_LOG", "info").env_remove("KUBECONFIG");
        cmd
    }

    fn run_to_end(args: &[&str]) -> (bool, String) {
        let out = kubeplug().args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn missing_plugins_directory_is_one_clear_error() {
        let (ok, err) = run_to_end(&["run", "--embedded", "--plugins", "/nonexistent/plugins"]);
        assert!(!ok);
        assert!(
            err.contains("plugins directory /nonexistent/plugins does not exist"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_limit_flag_is_one_error_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(plugin("image-pinner"), dir.path().join("image-pinner.wasm")).unwrap();
        let plugins = dir.path().to_str().unwrap();
        for (flag, value) in [
            ("--qps", "-1"),
            ("--memory-mib", "0"),
            ("--timeout-ms", "0"),
        ] {
            let arg = format!("{flag}={value}");
            let (ok, err) = run_to_end(&["run", "--embedded", "--plugins", plugins, &arg]);
            assert!(!ok, "{flag} {value} was accepted");
            let lines: Vec<_> = err.lines().collect();
            assert_eq!(lines.len(), 1, "{err}");
            assert!(lines[0].starts_with(&format!("error: {flag}")), "{err}");
        }
    }

    #[test]
    fn bad_kubeconfig_is_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        std::fs::write(&kc, "clusters: [this is not: a kubeconfig").unwrap();
        let (ok, err) = run_to_end(&[
            "run",
            "--plugins",
            dir.path().to_str().unwrap(),
            "--kubeconfig",
            kc.to_str().unwrap(),
        ]);
        assert!(!ok);
        assert!(
            err.contains(&format!("cannot read kubeconfig {}", kc.display())),
            "{err}"
        );
    }

    #[test]
    fn unreachable_api_server_is_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n\
             users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        )
        .unwrap();
        let (ok, err) = run_to_end(&[
            "run",
            "--plugins",
            dir.path().to_str().unwrap(),
            "--kubeconfig",
            kc.to_str().unwrap(),
        ]);
        assert!(!ok);
        assert!(
            err.contains("cannot reach the API server at http://127.0.0.1:9"),
            "{err}"
        );
    }

    /// Runs `kubeplug run --embedded` until a stderr line contains `until`, then SIGTERMs it;
    /// returns whether it exited 0 and its stderr.
    fn run_embedded_until(plugins: &std::path::Path, until: &str) -> (bool, String) {
        let mut host = HostProcess::start(plugins, &[]);
        assert!(
            host.saw_within(until, Duration::from_secs(60)),
            "never saw {until:?}:\n{}",
            host.seen
        );
        host.terminate()
    }

    #[test]
    fn empty_plugins_directory_warns_and_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        let (ok, err) = run_embedded_until(dir.path(), "running; stop with Ctrl-C");
        assert!(ok, "did not exit 0 on SIGTERM:\n{err}");
        assert!(err.contains("no plugins loaded"), "{err}");
    }

    #[test]
    fn a_non_wasm_file_is_skipped_with_a_warning_and_the_rest_works() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(plugin("image-pinner"), dir.path().join("image-pinner.wasm")).unwrap();
        std::fs::write(dir.path().join("notes.wasm"), "not a plugin").unwrap();
        let (ok, err) = run_embedded_until(dir.path(), "pinning images of demo/web");
        assert!(ok, "did not exit 0 on SIGTERM:\n{err}");
        let warning: Vec<_> = err.lines().filter(|l| l.contains("notes.wasm")).collect();
        assert_eq!(warning.len(), 1, "{err}");
        assert!(warning[0].contains("is not a WebAssembly file"), "{err}");
        assert!(err.contains("shutting down"), "{err}");
    }

    #[test]
    fn sigterm_does_not_wait_out_a_write_budget() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            super::common::test_plugin("hostile"),
            dir.path().join("hostile.wasm"),
        )
        .unwrap();
        // 1,000 Events in one call at 5 per second: 200 s of budget waits.
        std::fs::write(
            dir.path().join("hostile.policy.yaml"),
            "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: hostile}\nspec:\n  mode: enforce\n  namespaces: {all: true}\n  rules:\n    - {apiVersion: apps/v1, kind: Deployment, verbs: [event]}\n  limits: {writesPerSecond: 5, writeBurst: 5}\n  config: {mode: event-burst, count: 1000}\n",
        )
        .unwrap();
        let mut host = HostProcess::start(dir.path(), &["--shutdown-timeout", "5"]);
        assert!(
            host.saw_within("running; stop with Ctrl-C", Duration::from_secs(60)),
            "{}",
            host.seen
        );
        std::thread::sleep(Duration::from_secs(2));
        let (ok, err) = host
            .terminate_within(Duration::from_secs(30))
            .expect("still running 30 s after SIGTERM: the drain waited out the write budget");
        assert!(ok, "did not exit 0:\n{err}");
        assert!(err.contains("drained"), "{err}");
    }
}

/// The hostile plugin under an enforcing policy that lets it send Events about Deployments
/// (and label them), at `rate` writes per second, with `config` as its configuration.
fn hostile_events(rate: u32, config: &str) -> kubeplug::policy::Policy {
    common::cluster::policy_from_spec(
        "hostile",
        &format!(
            "mode: enforce
namespaces: {{all: true}}
rules:
  - {{apiVersion: apps/v1, kind: Deployment, verbs: [event], fields: []}}
limits: {{writesPerSecond: {rate}, writeBurst: {rate}}}
config: {config}"
        ),
    )
}

/// Events the API server accepted.
fn events_created(sim: &Sim) -> usize {
    sim.requests()
        .records()
        .iter()
        .filter(|r| r.verb == "create" && r.path.contains("/events") && r.status < 300)
        .count()
}

/// Starts `hostile` under `policy` on one Deployment, collecting its audit records.
async fn start_hostile(
    sim: &Sim,
    policy: kubeplug::policy::Policy,
) -> Result<(Controller, std::sync::Arc<std::sync::Mutex<Vec<Decision>>>)> {
    let client = sim.client()?;
    create_namespace(&client, "drain").await?;
    Api::<Deployment>::namespaced(client.clone(), "drain")
        .create(&PostParams::default(), &deployment("web", 1, "nginx"))
        .await?;
    let config = fast_config();
    let mut audit = config.audit.subscribe();
    let decisions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = decisions.clone();
    tokio::spawn(async move {
        loop {
            match audit.recv().await {
                Ok(record) if record.action == "event" => {
                    sink.lock().unwrap().push(record.decision.clone())
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    let hostile = PluginInstance::named(load(&test_plugin("hostile")).await, "hostile", None)
        .with_policy(policy);
    let controller = Controller::start(client, config, vec![hostile]).await?;
    Ok((controller, decisions))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_skips_writes_waiting_for_the_write_budget() -> Result {
    let sim = sim().await?;
    // 1,000 Events in one call at 5 per second: 200 s of budget waits.
    let policy = hostile_events(5, "{mode: event-burst, count: 1000}");
    let (controller, decisions) = start_hostile(&sim, policy).await?;
    let executed = || {
        let d = decisions.lock().unwrap();
        d.iter().filter(|d| **d == Decision::Executed).count()
    };
    eventually(Duration::from_secs(20), "Events sent at the budget", || {
        executed() > 5
    })
    .await;

    let drain = tokio::time::timeout(
        Duration::from_secs(60),
        controller.shutdown_within(Duration::from_secs(30)),
    )
    .await
    .expect("the drain waited out the write budget");
    assert_eq!(drain.abandoned, 0, "the waiting worker stopped by itself");
    let sent = events_created(&sim);
    assert!(sent < 1000, "every Event was sent: {sent}");
    let skipped = || {
        let d = decisions.lock().unwrap();
        d.iter().filter(|d| **d == Decision::Skipped).count()
    };
    eventually(
        Duration::from_secs(10),
        "the writes left audited as skipped",
        || skipped() >= 1,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        events_created(&sim),
        sent,
        "nothing is sent after the drain"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_abandons_a_call_stuck_past_the_shutdown_timeout() -> Result {
    let sim = sim().await?;
    let policy = hostile_events(1000, "{mode: event-burst, count: 1000}");
    let (controller, decisions) = start_hostile(&sim, policy).await?;
    eventually(Duration::from_secs(20), "Events being sent", || {
        !decisions.lock().unwrap().is_empty()
    })
    .await;
    // Every request from now on takes a minute: the worker is stuck inside an API call.
    sim.faults().set_latency(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let drain = tokio::time::timeout(
        Duration::from_secs(30),
        controller.shutdown_within(Duration::from_millis(300)),
    )
    .await
    .expect("the drain waited for a stuck API call past its timeout");
    assert!(drain.abandoned >= 1, "{drain:?}");
    sim.faults().set_latency(Duration::ZERO);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_reasons_are_checked_before_anything_is_sent() -> Result {
    let sim = sim().await?;
    let policy = hostile_events(100, "{mode: huge-event-reason, bytes: 1048576}");
    let (controller, _) = start_hostile(&sim, policy).await?;
    eventually(Duration::from_secs(20), "the refusal logged", || {
        !log_lines_with("must be CamelCase").is_empty()
    })
    .await;
    controller.shutdown().await;
    assert_eq!(
        events_created(&sim),
        0,
        "an invalid Event reached the API server"
    );
    for line in log_lines_with("must be CamelCase") {
        assert!(
            line.len() < 4096,
            "the 1 MiB reason was logged: {} bytes",
            line.len()
        );
        assert!(line.contains("1048576 bytes"), "{line}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_event_messages_are_cut_to_what_the_api_server_keeps() -> Result {
    let sim = sim().await?;
    let policy = hostile_events(100, "{mode: long-event-note, bytes: 100000}");
    let (controller, _) = start_hostile(&sim, policy).await?;
    let events: Api<Event> = Api::namespaced(sim.client()?, "drain");
    let start = Instant::now();
    let note = loop {
        let list = events.list(&ListParams::default()).await?;
        if let Some(note) = list.items.into_iter().find_map(|e| e.note) {
            break note;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no Event was sent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    controller.shutdown().await;
    assert!(note.len() <= 1024, "{} bytes", note.len());
    assert!(note.ends_with("…[truncated]"), "{note}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_zero_cannot_turn_a_key_into_a_busy_loop() -> Result {
    let sim = sim().await?;
    let policy = hostile_events(100, "{mode: requeue-at-once}");
    let (controller, _) = start_hostile(&sim, policy).await?;
    let calls = || log_lines_with("requeue-at-once call drain/web").len();
    eventually(Duration::from_secs(20), "the first call", || calls() > 0).await;
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    controller.shutdown().await;
    // One call per MIN_REQUEUE_AFTER, with room for a slow machine's scheduling: without the
    // floor this is thousands.
    let limit = 2 + 2 * (window.as_millis() / kubeplug::controller::MIN_REQUEUE_AFTER.as_millis());
    assert!(
        (calls() as u128) <= limit,
        "{} calls in {window:?}",
        calls()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_actions_draw_on_the_plugins_log_rate() -> Result {
    let sim = sim().await?;
    // 1,000 log actions of 4 KB in one call: 4 MB for the host log without a rate.
    let policy = hostile_events(100, "{mode: log-actions, count: 1000, bytes: 4000}");
    let (controller, _) = start_hostile(&sim, policy).await?;
    eventually(Duration::from_secs(20), "the drop reported", || {
        !log_lines_with("log actions dropped").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    controller.shutdown().await;
    let written = log_lines_with("log-action ").len();
    // Burst 256 KiB (64 such lines) plus 64 KiB/s (16 lines a second), with room to spare.
    assert!(written < 500, "{written} log action lines written");
    Ok(())
}

/// A Deployment `web` in `ns` whose status the sim has finished settling, so that no further
/// change of its own re-queues it.
async fn settled_deployment(sim: &Sim, ns: &str) -> Result {
    let client = sim.client()?;
    create_namespace(&client, ns).await?;
    Api::<Deployment>::namespaced(client, ns)
        .create(&PostParams::default(), &deployment("web", 1, "nginx"))
        .await?;
    eventually(Duration::from_secs(20), "web's status settled", || {
        sim.get("deployments", Some(ns), "web")
            .and_then(|d| d.pointer("/status/readyReplicas").and_then(|r| r.as_i64()))
            == Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_refusals_are_not_retried_until_the_object_changes() -> Result {
    for code in [400, 403, 422] {
        let sim = sim().await?;
        let ns = format!("refused-{code}");
        settled_deployment(&sim, &ns).await?;
        sim.faults()
            .inject_errors(ErrorFault::every_nth(code, 1).verbs(["patch"]));
        let policy = common::cluster::policy_from_spec(
            "hostile",
            "mode: enforce
namespaces: {all: true}
rules:
  - {apiVersion: apps/v1, kind: Deployment, verbs: [patch], fields: [/metadata/labels]}
config: {mode: label}",
        );
        let hostile = PluginInstance::named(load(&test_plugin("hostile")).await, "hostile", None)
            .with_policy(policy);
        let controller = Controller::start(sim.client()?, fast_config(), vec![hostile]).await?;
        let attempts = || {
            sim.requests()
                .records()
                .iter()
                .filter(|r| r.verb == "patch" && r.status == code)
                .count()
        };
        eventually(Duration::from_secs(20), "the refused patch", || {
            attempts() >= 1
        })
        .await;
        // Start-up may reconcile the key twice (initial list and the start's enqueue-all).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = attempts();
        // With a 5 ms backoff a retried key would try dozens of times in this second.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(attempts(), before, "a {code} was retried");
        // A change of the object brings the key back.
        sim.faults().clear_errors();
        Api::<Deployment>::namespaced(sim.client()?, &ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
            )
            .await?;
        eventually(
            Duration::from_secs(20),
            "the label after the change",
            || {
                sim.get("deployments", Some(&ns), "web")
                    .and_then(|d| d.pointer("/metadata/labels/hostile").cloned())
                    .is_some()
            },
        )
        .await;
        controller.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resync_timer_requeues_every_key() -> Result {
    let sim = sim().await?;
    settled_deployment(&sim, "resync").await?;
    let config = ControllerConfig {
        resync: Some(Duration::from_millis(500)),
        ..fast_config()
    };
    let hostile = PluginInstance::named(
        load(&test_plugin("hostile")).await,
        "hostile",
        Some(r#"{"mode": "behave"}"#),
    );
    let controller = Controller::start(sim.client()?, config, vec![hostile]).await?;
    let calls = || log_lines_with("reconciled resync/web").len();
    eventually(Duration::from_secs(20), "the first call", || calls() >= 1).await;
    let before = calls();
    // Nothing changes the object: only the timer brings the key back.
    eventually(Duration::from_secs(20), "two resyncs", || {
        calls() >= before + 2
    })
    .await;
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_brings_the_key_back_and_the_shortest_delay_wins() -> Result {
    let sim = sim().await?;
    settled_deployment(&sim, "requeue").await?;
    let hostile = PluginInstance::named(
        load(&test_plugin("hostile")).await,
        "hostile",
        Some(r#"{"mode": "requeue-twice"}"#),
    );
    let controller = Controller::start(sim.client()?, fast_config(), vec![hostile]).await?;
    let calls = || log_lines_with("requeue-twice call requeue/web").len();
    eventually(Duration::from_secs(20), "the first call", || calls() >= 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = calls();
    // Nothing changes the object: the 1.5 s requeue brings it back, long before 60 s.
    eventually(Duration::from_secs(20), "the requeued call", || {
        calls() > before
    })
    .await;
    controller.shutdown().await;
    Ok(())
}

/// A Deployment `web` in namespace `fenced` with `image` and, when given, an annotation
/// `changed-by`, as another client would write it.
fn fenced_web(image: &str, changed_by: Option<&str>) -> String {
    let annotations = changed_by.map_or(String::new(), |by| {
        format!("\n  annotations: {{changed-by: {by}}}")
    });
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: fenced
  labels: {{app: web}}{annotations}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: app, image: '{image}'}}]}}"
    )
}

fn rv_of(object: &serde_json::Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("a numeric resourceVersion")
}

/// Another client changes the object between the plugin's decision and its write: the write,
/// fenced on the version the plugin decided on, is refused with 409 and applies nothing; the
/// key is reconciled again on the newer version and converges with both changes kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_decided_on_a_stale_object_is_refused_and_the_key_converges_on_the_new_one()
-> Result {
    common::cluster::capture_logs();
    // No simulated status updates: the only changes are the test's and the plugin's.
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .auto_create_namespaces(true)
        .start()
        .await?;
    sim.apply_yaml(&fenced_web("nginx:1.13", None))?;
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(sim.client()?, fast_config(), vec![pinner]).await?;
    eventually(Duration::from_secs(10), "caches synced", || {
        controller.is_synced()
    })
    .await;
    // Already pinned: the start-up reconcile writes nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // From now on the controller's Deployment patches wait at the API server's door.
    sim.faults()
        .hold(kubeplug_sim::HoldFault::writes(["patch"], ["deployments"]));
    // A change the plugin reacts to (through the library: never held).
    let decided_on = rv_of(&sim.apply_yaml(&fenced_web("alpine", None))?[0]);
    eventually(
        Duration::from_secs(10),
        "the plugin's patch at the door",
        || sim.faults().held() == 1,
    )
    .await;
    // Another client changes web behind the plugin's back, then the write goes in.
    let newer = rv_of(&sim.apply_yaml(&fenced_web("alpine", Some("other-client")))?[0]);
    sim.faults().release();

    let converged = || {
        sim.get("deployments", Some("fenced"), "web")
            .is_some_and(|web| {
                web.pointer("/spec/template/spec/containers/0/image") == Some(&json!("nginx:1.13"))
                    && web.pointer("/metadata/annotations/changed-by")
                        == Some(&json!("other-client"))
            })
    };
    eventually(
        Duration::from_secs(10),
        "web pinned on the other client's version",
        converged,
    )
    .await;
    let statuses: Vec<u16> = sim
        .requests()
        .records()
        .iter()
        .filter(|r| {
            r.verb == "patch"
                && r.name.as_deref() == Some("web")
                && r.field_manager.as_deref() == Some("kubeplug/image-pinner")
        })
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses,
        [409, 200],
        "the stale write refused, the next one accepted"
    );
    // The refused write carried the version the plugin decided on.
    let conflicts: Vec<String> = log_lines_with("result=\"conflict\"")
        .into_iter()
        .filter(|l| l.contains("key=fenced/web"))
        .collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert!(
        conflicts[0].contains(&format!("fenced_at=\"{decided_on}\""))
            || conflicts[0].contains(&format!("fenced_at={decided_on}")),
        "{} not fenced at {decided_on} (the other client wrote {newer})",
        conflicts[0]
    );
    let text = controller.metrics_text();
    assert!(
        text.contains("kubeplug_write_conflicts_total{plugin=\"image-pinner\"} 1"),
        "{text}"
    );
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_fill_the_cache_from_one_watch_without_a_list() -> Result {
    let (sim, client, api) = alpine_deployments("stream", ["web", "api"]).await?;
    let config = ControllerConfig {
        streaming_lists: true,
        ..fast_config()
    };
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(client.clone(), config, vec![pinner]).await?;
    eventually(Duration::from_secs(20), "both pinned", || {
        ["web", "api"]
            .iter()
            .all(|n| image_of(&sim, "stream", n).as_deref() == Some("nginx:1.13"))
    })
    .await;
    // A change after the initial events still arrives through the same watch.
    let back = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
    api.patch("web", &PatchParams::default(), &Patch::Strategic(&back))
        .await?;
    eventually(Duration::from_secs(10), "web corrected again", || {
        patches_by(&sim, "kubeplug/image-pinner").get("web") == Some(&2)
    })
    .await;
    let deployments: Vec<_> = sim
        .requests()
        .records()
        .into_iter()
        .filter(|r| r.resource == "deployments" && r.user_agent != "kube-rs-test")
        .collect();
    assert!(
        deployments.iter().all(|r| r.verb != "list"),
        "a paged list was sent: {:?}",
        deployments
            .iter()
            .map(|r| (&r.verb, &r.query))
            .collect::<Vec<_>>()
    );
    assert!(
        deployments
            .iter()
            .any(|r| r.verb == "watch" && r.query.contains("sendInitialEvents=true")),
        "no streaming list"
    );
    controller.shutdown().await;
    Ok(())
}

/// Issue 35: plugin calls share the host's sandbox pool fairly among tenants. Tenant
/// team-a's plugin spends its whole call budget on every call with more workers than the
/// pool has sandboxes; tenant team-b's image-pinner still gets a sandbox for each call (none
/// fails to instantiate) and converges. Without the host-wide fair call slots, team-a's
/// workers take the pool and team-b's calls fail to instantiate. And team-a's spinning
/// guests, past their share of the cores while team-b's calls run, sleep at their ticks
/// instead of yielding (the pauses metric counts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_spending_every_call_budget_leaves_another_its_share_of_sandboxes() -> Result {
    let names: Vec<String> = (0..4).map(|i| format!("d{i}")).collect();
    let (sim, client, _) = alpine_deployments("team-b", &names).await?;
    alpine_deployments_in(&client, "team-a", &names).await?;
    let runtime = kubeplug::plugin::PluginRuntime::new(kubeplug::plugin::RuntimeConfig {
        cache_dir: Some(crate::common::compile_cache()),
        max_sandboxes: 2,
        ..kubeplug::plugin::RuntimeConfig::default()
    })?;
    let named = |ns: &str, name: &str| kubeplug::controller::InstanceName::object(ns, name);
    let looper = runtime.load_file(&test_plugin("hostile")).await?;
    let pinner = runtime.load_file(&plugin("image-pinner")).await?;
    let instances = vec![
        PluginInstance::new(
            looper,
            named("team-a", "looper")?,
            Some(r#"{"mode": "loop"}"#),
        )
        .with_policy(Policy::trusted()),
        PluginInstance::new(pinner, named("team-b", "pinner")?, None)
            .with_policy(Policy::trusted()),
    ];
    let config = ControllerConfig {
        workers: 4,
        max_calls: 2,
        limits: CallLimits::default().with_timeout_ms(300)?,
        ..fast_config()
    };
    let controller = Controller::start(client.clone(), config, instances).await?;
    eventually(
        Duration::from_secs(30),
        "team-b pinned beside team-a's loops",
        || {
            names
                .iter()
                .all(|n| image_of(&sim, "team-b", n).as_deref() == Some("nginx:1.13"))
        },
    )
    .await;
    // A call that finds the pool full fails as a trap: team-b's pinner never fails a call.
    // A refused fenced write (a conflict: the sim's status update landed between the read and
    // the patch) is the object moving on, not a call failing; it happens more on a loaded
    // machine.
    let text = controller.metrics_text();
    let pinner_failures: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kubeplug_reconcile_total{plugin=\"team-b/pinner\""))
        .filter(|l| !l.contains("result=\"success\"") && !l.contains("result=\"conflict\""))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert!(pinner_failures.is_empty(), "{pinner_failures:?}");
    // team-a's loops were running all along: each ends at its deadline (team-b may converge
    // before the first one does, on a machine that runs team-b's calls first).
    eventually(
        Duration::from_secs(30),
        "team-a's calls ran to their deadline",
        || {
            controller.metrics_text().lines().any(|l| {
                l.starts_with(
                    "kubeplug_reconcile_total{plugin=\"team-a/looper\",result=\"timeout\"}",
                )
            })
        },
    )
    .await;
    let pauses = controller
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("kubeplug_guest_cpu_pauses_total "))
        .map(|n| n.trim().parse::<u64>())
        .transpose()?;
    assert!(
        pauses.is_some_and(|n| n > 0),
        "team-a's guests were never paused beside team-b: {pauses:?}"
    );
    controller.shutdown().await;
    Ok(())
}

/// A policy confined to `namespaces` (as a Plugin object's grant is), trusted otherwise.
fn confined(namespaces: &[&str]) -> Policy {
    let mut policy = Policy::trusted();
    policy.grants.namespaces = kubeplug::policy::Namespaces::Only {
        names: namespaces.iter().map(|n| n.to_string()).collect(),
        selector: None,
        cluster: false,
    };
    policy
}

/// Issue 35: watches are as narrow as the grants. Plugins confined to named namespaces get
/// a watch per namespace, and the cache holds those namespaces' objects only; one plugin
/// granted every namespace widens the kind's watch to the cluster, and once it is gone the
/// watch narrows again and the other namespaces' objects leave the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_as_narrow_as_the_grants() -> Result {
    let (sim, client, _) = alpine_deployments("team-a", ["a0", "a1"]).await?;
    alpine_deployments_in(&client, "team-b", ["b0", "b1", "b2"]).await?;
    alpine_deployments_in(&client, "team-c", ["c0", "c1", "c2", "c3"]).await?;
    let pinner = load(&plugin("image-pinner")).await;
    let named = |ns: &str| kubeplug::controller::InstanceName::object(ns, "pinner").unwrap();
    let instance = |ns: &str| {
        PluginInstance::new(pinner.clone(), named(ns), None).with_policy(confined(&[ns]))
    };
    let controller =
        Controller::start(client.clone(), fast_config(), vec![instance("team-a")]).await?;
    let deployments = |c: &Controller| {
        let scopes = c
            .watch_scopes()
            .into_iter()
            .find(|(k, _)| k.kind == "Deployment")
            .map(|(_, s)| s)
            .unwrap_or_default();
        let cached = c
            .cached_objects()
            .into_iter()
            .find(|(k, _)| k.kind == "Deployment")
            .map_or(0, |(_, n)| n);
        (scopes, cached)
    };
    let ns = |names: &[&str]| -> Vec<Option<String>> {
        names.iter().map(|n| Some(n.to_string())).collect()
    };
    eventually(Duration::from_secs(20), "team-a pinned", || {
        ["a0", "a1"]
            .iter()
            .all(|n| image_of(&sim, "team-a", n).as_deref() == Some("nginx:1.13"))
    })
    .await;
    assert_eq!(deployments(&controller), (ns(&["team-a"]), 2));
    let cluster_wide = |sim: &Sim| {
        sim.requests()
            .records()
            .iter()
            .any(|r| r.resource == "deployments" && r.namespace.is_none() && r.verb != "patch")
    };
    assert!(
        !cluster_wide(&sim),
        "no cluster-wide list or watch of Deployments"
    );

    controller.upsert(instance("team-b")).await?;
    eventually(Duration::from_secs(20), "team-b pinned", || {
        ["b0", "b1", "b2"]
            .iter()
            .all(|n| image_of(&sim, "team-b", n).as_deref() == Some("nginx:1.13"))
    })
    .await;
    assert_eq!(deployments(&controller), (ns(&["team-a", "team-b"]), 5));
    assert!(!cluster_wide(&sim));

    // A plugin granted every namespace: one cluster-wide watch.
    let everywhere =
        PluginInstance::named(pinner.clone(), "everywhere", None).with_policy(Policy::trusted());
    controller.upsert(everywhere).await?;
    eventually(Duration::from_secs(20), "one cluster-wide watch", || {
        deployments(&controller) == (vec![None], 9)
    })
    .await;

    // Gone again: narrowed to the two namespaces, team-c's objects dropped.
    controller.remove("everywhere").await;
    eventually(
        Duration::from_secs(20),
        "narrowed to team-a and team-b",
        || deployments(&controller) == (ns(&["team-a", "team-b"]), 5),
    )
    .await;
    controller.remove("team-b/pinner").await;
    eventually(Duration::from_secs(20), "narrowed to team-a", || {
        deployments(&controller) == (ns(&["team-a"]), 2)
    })
    .await;
    // The narrowed cache still serves: a change in team-a is pinned again.
    let api: Api<Deployment> = Api::namespaced(client.clone(), "team-a");
    api.patch(
        "a0",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}}}})),
    )
    .await?;
    eventually(Duration::from_secs(20), "team-a re-pinned", || {
        image_of(&sim, "team-a", "a0").as_deref() == Some("nginx:1.13")
    })
    .await;
    controller.shutdown().await;
    Ok(())
}

/// The host's own requests (not the test's) on `resource` since `cursor`.
fn host_requests(sim: &Sim, cursor: u64, resource: &str) -> Vec<kubeplug_sim::RequestRecord> {
    sim.requests()
        .since(cursor)
        .into_iter()
        .filter(|r| r.resource == resource && r.user_agent != "kube-rs-test")
        .collect()
}

/// A host running image-pinner with `config` over Deployment `web` of a fresh namespace
/// `ns`, once it has pinned it.
async fn pinning_web(
    ns: &str,
    config: ControllerConfig,
) -> Result<(Sim, Api<Deployment>, Controller)> {
    let (sim, client, api) = alpine_deployments(ns, ["web"]).await?;
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(Policy::trusted());
    let controller = Controller::start(client, config, vec![pinner]).await?;
    eventually(Duration::from_secs(20), "web pinned", || {
        image_of(&sim, ns, "web").as_deref() == Some("nginx:1.13")
    })
    .await;
    Ok((sim, api, controller))
}

/// Arms a fault for the next watch (`arm`), drops every open watch so the host watches again
/// into it, and waits until the fault fired (`left` reads how many are still armed).
async fn rewatch_into(
    sim: &Sim,
    what: &str,
    arm: impl FnOnce(&Faults),
    left: impl Fn(&FaultState) -> u64,
) {
    arm(sim.faults());
    sim.faults().drop_watches();
    eventually(Duration::from_secs(20), what, || {
        left(&sim.faults().state()) == 0
    })
    .await;
}

/// Sets `web` of `ns` back to alpine and waits up to `limit` until the host pins it again.
async fn web_corrected_again(
    sim: &Sim,
    api: &Api<Deployment>,
    ns: &str,
    limit: Duration,
) -> Result {
    let back = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
    api.patch("web", &PatchParams::default(), &Patch::Strategic(&back))
        .await?;
    eventually(limit, "web corrected again", || {
        image_of(sim, ns, "web").as_deref() == Some("nginx:1.13")
    })
    .await;
    Ok(())
}

/// Issue 36: a watch answered with an HTTP 410 Gone status (a real API server's answer to a
/// watch from a compacted resourceVersion) relists. kube-runtime's watcher alone retries the
/// watch with the same expired version forever; the host starts a fresh watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_with_a_410_status_relists() -> Result {
    let (sim, api, controller) = pinning_web("gone", fast_config()).await?;
    let cursor = sim.requests().cursor();
    rewatch_into(
        &sim,
        "a watch answered 410",
        |f| f.gone_status_next_watches(1),
        |s| s.gone_status_watches,
    )
    .await;
    web_corrected_again(&sim, &api, "gone", Duration::from_secs(30)).await?;
    let requests = host_requests(&sim, cursor, "deployments");
    let gone = requests
        .iter()
        .position(|r| r.verb == "watch" && r.status == 410)
        .expect("the host's Deployment watch was answered 410");
    assert!(
        requests[gone..].iter().any(|r| r.verb == "list"),
        "no relist after the 410: {:?}",
        requests
            .iter()
            .map(|r| (&r.verb, r.status, &r.query))
            .collect::<Vec<_>>()
    );
    controller.shutdown().await;
    Ok(())
}

/// Issue 36: a watch stream that stays open and sends nothing (no event, no bookmark) is
/// abandoned within the watch timeout plus kube-runtime's 5 s margin, and a change made
/// meanwhile reaches the cache. Without a timeout of the host's, the stream was held for the
/// watcher's default 295 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_is_abandoned_and_a_change_made_meanwhile_arrives() -> Result {
    let config = ControllerConfig {
        watch_timeout: Duration::from_secs(1),
        ..fast_config()
    };
    let (sim, api, controller) = pinning_web("stall", config).await?;
    let cursor = sim.requests().cursor();
    rewatch_into(
        &sim,
        "a watch stalled",
        |f| f.stall_next_watches(1),
        |s| s.stall_watches,
    )
    .await;
    let stalled = Instant::now();
    web_corrected_again(&sim, &api, "stall", Duration::from_secs(60)).await?;
    eprintln!(
        "a change made during a stalled watch was corrected {:?} after the stall began (bound: watch timeout 1 s + 5 s)",
        stalled.elapsed()
    );
    // The stalled watch was the Deployments' (the host watches nothing else here).
    let watched: std::collections::BTreeSet<String> = sim
        .requests()
        .since(cursor)
        .into_iter()
        .filter(|r| r.verb == "watch" && r.user_agent != "kube-rs-test")
        .map(|r| r.resource)
        .collect();
    assert_eq!(watched, ["deployments".to_string()].into(), "{watched:?}");
    controller.shutdown().await;
    Ok(())
}
