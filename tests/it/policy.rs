//! Multi-tenant policy end to end: the controller, built plugins and the embedded API server
//! over HTTP. The sim's request log is the proof of what was (and was not) sent.

use crate::common;

use common::cluster::policy_from_spec as policy;
use common::cluster::{
    Result, capture_logs, create_namespace, deployment, eventually, fast_config, image_of, load,
    log_lines_with, runtime, sim,
};
use common::{plugin, test_plugin};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use kubeplug::controller::{Controller, PluginInstance, StartError};
use kubeplug::policy::{AuditRecord, Decision, Grant, Mode};
use kubeplug::reload::{ReloadConfig, Reloader};
use kubeplug_sim::Sim;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// A sim with Deployments `web` and `api` (image alpine) in `team-a` and `team-b`.
async fn seeded_sim() -> Result<Sim> {
    let sim = sim().await?;
    let client = sim.client()?;
    for ns in ["team-a", "team-b"] {
        create_namespace(&client, ns).await?;
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        for name in ["web", "api"] {
            api.create(&PostParams::default(), &deployment(name, 2, "alpine"))
                .await?;
        }
    }
    Ok(sim)
}

const PINNER_POLICY: &str = "mode: enforce
namespaces: {all: true}
rules:
  - apiVersion: apps/v1
    kind: Deployment
    verbs: [patch]
    fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]";

/// team-a only; patch labels of Deployments, create Leases with a spec.
const HOSTILE_POLICY: &str = "mode: enforce
namespaces: {names: [team-a]}
rules:
  - apiVersion: apps/v1
    kind: Deployment
    verbs: [patch]
    fields: [/metadata/labels]
  - apiVersion: coordination.k8s.io/v1
    kind: Lease
    verbs: [create]
    fields: [/spec]";

fn all_pinned(sim: &Sim) -> bool {
    ["team-a", "team-b"].iter().all(|ns| {
        ["web", "api"]
            .iter()
            .all(|n| image_of(sim, ns, n).as_deref() == Some("nginx:1.13"))
    })
}

/// Writes (anything but reads) a field manager sent, as `(verb, namespace, name)`.
fn writes_by(sim: &Sim, manager: &str) -> Vec<(String, Option<String>, Option<String>)> {
    sim.requests()
        .records()
        .into_iter()
        .filter(|r| r.field_manager.as_deref() == Some(manager))
        .map(|r| (r.verb, r.namespace, r.name))
        .collect()
}

/// Every audit record received so far.
fn drain(rx: &mut broadcast::Receiver<Arc<AuditRecord>>, into: &mut Vec<Arc<AuditRecord>>) {
    while let Ok(r) = rx.try_recv() {
        into.push(r);
    }
}

fn denied_by(records: &[Arc<AuditRecord>], plugin: &str) -> Vec<Grant> {
    records
        .iter()
        .filter(|r| r.plugin.name == plugin)
        .filter_map(|r| match &r.decision {
            Decision::Denied(d) => Some(d.grant),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_writes_are_denied_while_image_pinner_converges() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let hostile = load(&test_plugin("hostile")).await;
    let probe = |name: &str, config: serde_json::Value| {
        PluginInstance::named(hostile.clone(), name, Some(&config.to_string()))
            .with_policy(policy(name, HOSTILE_POLICY))
    };
    let mut instances = vec![
        PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
            .with_policy(policy("image-pinner", PINNER_POLICY)),
        probe("h-label", json!({"mode": "label"})),
        probe(
            "h-other-ns",
            json!({"mode": "patch-other-namespace", "namespace": "team-b"}),
        ),
        probe("h-delete", json!({"mode": "delete"})),
        probe(
            "h-create-other",
            json!({"mode": "create-in", "namespace": "team-b"}),
        ),
        probe(
            "h-create-own",
            json!({"mode": "create-in", "namespace": "team-a"}),
        ),
    ];
    let patch_types = [
        "merge",
        "json",
        "json-move",
        "strategic",
        "strategic-replace",
        "apply",
    ];
    for t in patch_types {
        instances.push(probe(
            &format!("h-field-{t}"),
            json!({"mode": "patch-field", "patchType": t}),
        ));
    }
    let config = fast_config();
    let mut audit = config.audit.subscribe();
    let controller = Controller::start(client.clone(), config, instances).await?;
    let mut records = Vec::new();
    eventually(Duration::from_secs(30), "image-pinner converged", || {
        all_pinned(&sim)
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "team-a");
    eventually(Duration::from_secs(10), "probes reconciled", || {
        drain(&mut audit, &mut records);
        let seen = |p: &str| records.iter().filter(|r| r.plugin.name == p).count() >= 2;
        sim.get("leases", Some("team-a"), "hostile-web").is_some()
            && seen("h-other-ns")
            && seen("h-delete")
            && seen("h-create-other")
            && patch_types.iter().all(|t| seen(&format!("h-field-{t}")))
    })
    .await;
    assert!(leases.get_opt("hostile-api").await?.is_some());

    // Allowed: a label patch in its own namespace, a Lease with a spec in it.
    let label = |ns, name| {
        sim.get("deployments", Some(ns), name)
            .and_then(|d| d.pointer("/metadata/labels/hostile").cloned())
    };
    // A label patch refused as a conflict (image-pinner moved the object meanwhile) is
    // decided again once the cache shows the newer version.
    eventually(
        Duration::from_secs(30),
        "h-label's label on team-a/web",
        || label("team-a", "web").is_some(),
    )
    .await;
    assert_eq!(
        label("team-a", "web"),
        Some(json!("was-here")),
        "{:?} {:?}",
        writes_by(&sim, "kubeplug/h-label"),
        records
            .iter()
            .filter(|r| r.plugin.name == "h-label")
            .collect::<Vec<_>>()
    );
    assert_eq!(label("team-b", "web"), None, "team-b is not h-label's");
    // Never sent: nothing denied reaches the API server.
    for name in ["h-other-ns", "h-delete", "h-create-other"]
        .into_iter()
        .map(String::from)
        .chain(patch_types.iter().map(|t| format!("h-field-{t}")))
    {
        let sent = writes_by(&sim, &format!("kubeplug/{name}"));
        assert!(sent.is_empty(), "{name} sent {sent:?}");
    }
    let deletes: Vec<_> = sim
        .requests()
        .records()
        .into_iter()
        .filter(|r| r.verb == "delete")
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    assert!(sim.get("leases", Some("team-b"), "hostile-web").is_none());
    for r in writes_by(&sim, "kubeplug/h-label") {
        assert_eq!(r.1.as_deref(), Some("team-a"), "{r:?}");
    }
    // Each denial names the grant.
    drain(&mut audit, &mut records);
    assert!(
        denied_by(&records, "h-other-ns")
            .iter()
            .all(|g| *g == Grant::Namespaces)
    );
    assert!(denied_by(&records, "h-delete").contains(&Grant::Verbs));
    assert!(denied_by(&records, "h-create-other").contains(&Grant::Namespaces));
    for t in patch_types {
        let grants = denied_by(&records, &format!("h-field-{t}"));
        assert!(
            !grants.is_empty() && grants.iter().all(|g| *g == Grant::Fields),
            "{t}: {grants:?}"
        );
    }
    assert!(denied_by(&records, "h-label").is_empty());
    assert!(denied_by(&records, "image-pinner").is_empty());
    let executed = records
        .iter()
        .filter(|r| r.plugin.name == "image-pinner" && r.decision == Decision::Executed)
        .filter(|r| r.action == "patch")
        .count();
    assert!(executed >= 1, "image-pinner's patches are audited");
    let text = controller.metrics_text();
    assert!(
        text.contains(
            r#"kubeplug_actions_total{plugin="h-delete",action="delete",decision="denied"}"#
        ),
        "{text}"
    );
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_burst_waits_for_its_budget_without_slowing_others() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let hostile = load(&test_plugin("hostile")).await;
    let burst = PluginInstance::named(
        hostile,
        "h-burst",
        Some(&json!({"mode": "write-burst", "count": 10_000}).to_string()),
    )
    .with_policy(policy(
        "h-burst",
        &format!(
            "{HOSTILE_POLICY}\nlimits: {{maxActions: 10000, writesPerSecond: 20, writeBurst: 5}}"
        ),
    ));
    let pinner = PluginInstance::named(load(&plugin("image-pinner")).await, "image-pinner", None)
        .with_policy(policy("image-pinner", PINNER_POLICY));
    let started = Instant::now();
    let controller = Controller::start(client.clone(), fast_config(), vec![burst, pinner]).await?;
    eventually(Duration::from_secs(20), "image-pinner converged", || {
        all_pinned(&sim)
    })
    .await;
    eventually(Duration::from_secs(10), "the burst started", || {
        !writes_by(&sim, "kubeplug/h-burst").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let sent = writes_by(&sim, "kubeplug/h-burst").len() as f64;
    let ceiling = 5.0 + 20.0 * elapsed + 5.0;
    assert!(
        sent >= 20.0 && sent <= ceiling,
        "h-burst sent {sent} writes in {elapsed:.1}s (ceiling {ceiling})"
    );
    // Throttled, not dropped: it keeps going at its rate.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = writes_by(&sim, "kubeplug/h-burst").len() as f64;
    assert!(later >= sent + 10.0, "{sent} then {later}");
    // The burst's in-flight call would take minutes to drain: drop the controller instead
    // of shutting it down (the test runtime stops its tasks).
    drop(controller);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_sends_nothing_and_audits_each_would_be_patch() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let pinner = load(&plugin("image-pinner")).await;
    let explicit = PluginInstance::named(pinner.clone(), "pinner-dry", None).with_policy(policy(
        "pinner-dry",
        &PINNER_POLICY.replace("mode: enforce", "mode: dry-run"),
    ));
    // No policy at all: dry-run too.
    let unconfigured = PluginInstance::named(pinner, "pinner-none", None);
    let config = fast_config();
    let mut audit = config.audit.subscribe();
    let controller =
        Controller::start(client.clone(), config, vec![explicit, unconfigured]).await?;
    let mut records = Vec::new();
    let patches = |records: &[Arc<AuditRecord>], plugin: &str| {
        records
            .iter()
            .filter(|r| r.plugin.name == plugin && r.action == "patch")
            .cloned()
            .collect::<Vec<_>>()
    };
    let keys = |records: &[Arc<AuditRecord>], plugin: &str| {
        let mut keys: Vec<String> = patches(records, plugin)
            .iter()
            .map(|r| r.key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    };
    let all = ["team-a/api", "team-a/web", "team-b/api", "team-b/web"];
    eventually(
        Duration::from_secs(20),
        "dry-run patches of every key",
        || {
            drain(&mut audit, &mut records);
            keys(&records, "pinner-dry") == all && keys(&records, "pinner-none") == all
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drain(&mut audit, &mut records);
    for plugin in ["pinner-dry", "pinner-none"] {
        // The plugin is called again on status updates (the patch never lands): one record
        // per call's would-be patch, each a dry-run with its body.
        let p = patches(&records, plugin);
        for r in &p {
            assert_eq!(r.decision, Decision::DryRun);
            let body = r.body.as_ref().expect("dry-run records carry the body");
            assert_eq!(
                body.pointer("/spec/template/spec/containers/0/image"),
                Some(&json!("nginx:1.13"))
            );
            assert_eq!(r.body_digest, Some(kubeplug::policy::digest(body)));
            assert!(!r.plugin.digest.is_empty() && !r.plugin.version.is_empty());
        }
        assert!(writes_by(&sim, &format!("kubeplug/{plugin}")).is_empty());
    }
    let any_patch = sim
        .requests()
        .records()
        .into_iter()
        .any(|r| r.verb == "patch");
    assert!(!any_patch, "dry-run sent a patch");
    assert_eq!(image_of(&sim, "team-a", "web").as_deref(), Some("alpine"));
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_and_kinds_scope_the_queue_and_cache_reads() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    for ns in ["team-a", "team-b"] {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("pod-{ns}")},
            "spec": {"containers": [{"name": "app", "image": "alpine"}]}}))?;
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await?;
    }
    let hostile = load(&test_plugin("hostile")).await;
    let list_pods = json!({"mode": "host-list", "apiVersion": "v1", "kind": "Pod"});
    let reader = PluginInstance::named(hostile.clone(), "reader", Some(&list_pods.to_string()))
        .with_policy(policy(
            "reader",
            "namespaces: {names: [team-a]}\nreads: [{apiVersion: apps/v1, kind: Deployment}, {apiVersion: v1, kind: Pod}]",
        ));
    let blind = PluginInstance::named(hostile.clone(), "blind", Some(&list_pods.to_string()))
        .with_policy(policy(
            "blind",
            "namespaces: {names: [team-a]}\nreads: [{apiVersion: apps/v1, kind: Deployment}]",
        ));
    let behave = PluginInstance::named(hostile, "scoped", Some(r#"{"mode": "behave"}"#))
        .with_policy(policy(
            "scoped",
            "namespaces: {names: [team-b]}\nreads: [{apiVersion: apps/v1, kind: Deployment}]",
        ));
    let controller =
        Controller::start(client.clone(), fast_config(), vec![reader, blind, behave]).await?;
    eventually(Duration::from_secs(20), "the reads and reconciles", || {
        log_lines_with("listed: pod-team-a").len() >= 2
            && log_lines_with("reconciled team-b/").len() >= 2
            && log_lines_with("plugin=\"blind\"")
                .iter()
                .any(|l| l.contains("not granted"))
    })
    .await;
    let listed = log_lines_with("listed:");
    assert!(
        listed.iter().all(|l| !l.contains("pod-team-b")),
        "{listed:?}"
    );
    // Read kinds are synced before the first call: no empty list.
    assert!(
        listed.iter().all(|l| l.contains("listed: pod-team-a")),
        "{listed:?}"
    );
    assert!(log_lines_with("reconciled team-a/").is_empty());
    assert!(
        log_lines_with("plugin=\"reader\"")
            .iter()
            .all(|l| !l.contains("team-b/")),
        "reader is never queued team-b keys"
    );
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_policy_stops_only_its_plugin() -> Result {
    capture_logs();
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("image-pinner.policy.yaml"),
        format!(
            "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: image-pinner}}\nspec:\n{}\n",
            PINNER_POLICY
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    )?;
    std::fs::write(
        dir.path().join("hostile.policy.yaml"),
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: hostile}\nspec:\n  mode: enforce\n  rules:\n    - apiVersion: v1\n      kind: Pod\n      verbs: [obliterate]\n",
    )?;
    for path in [
        plugin("image-pinner"),
        test_plugin("hostile"),
        plugin("change-logger"),
    ] {
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap()))?;
    }
    let sim = sim().await?;
    let controller = Controller::new(sim.client()?, fast_config());
    let reloader = Reloader::new(
        runtime(),
        controller.clone(),
        ReloadConfig::new(dir.path(), dir.path()),
    );
    let summary = reloader.rescan(false).await?;
    assert_eq!(summary.started, ["change-logger", "image-pinner"]);
    let pinner = controller.plugin("image-pinner").unwrap();
    assert_eq!(pinner.declared_name(), "image-pinner");
    let status = reloader.status();
    let hostile = status
        .iter()
        .find(|s| s.file.ends_with("hostile.wasm"))
        .unwrap();
    assert!(
        hostile.plugin.is_none(),
        "hostile is not running: {hostile:?}"
    );
    let error = hostile.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("hostile.policy.yaml")
            && error.contains("line 9")
            && error.contains("obliterate")
            && error.contains("plugin not started"),
        "{error}"
    );
    let errors = log_lines_with("plugin file not applied");
    assert!(
        errors.iter().any(|l| l.contains("hostile.policy.yaml")),
        "{errors:?}"
    );
    let logger = status
        .iter()
        .find(|s| s.file.ends_with("change-logger.wasm"))
        .unwrap();
    assert_eq!(logger.error, None);
    assert_eq!(logger.running.as_deref(), Some(logger.digest.as_str()));
    let mode = |name: &str| controller.policy(name).unwrap().mode;
    assert_eq!(mode("image-pinner"), Mode::Enforce, "under its policy");
    assert_eq!(mode("change-logger"), Mode::DryRun, "no policy: default");
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_plugin_limits_come_from_the_policy() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let hostile = load(&test_plugin("hostile")).await;
    let limited = |name: &str, config: serde_json::Value, limits: &str| {
        PluginInstance::named(hostile.clone(), name, Some(&config.to_string())).with_policy(policy(
            name,
            &format!("mode: enforce\nnamespaces: {{names: [team-a]}}\nreads: [{{apiVersion: apps/v1, kind: Deployment}}]\nlimits: {limits}"),
        ))
    };
    let instances = vec![
        limited(
            "few-actions",
            json!({"mode": "many-actions", "count": 6}),
            "{maxActions: 5}",
        ),
        limited(
            "enough-actions",
            json!({"mode": "many-actions", "count": 6}),
            "{maxActions: 6}",
        ),
        limited(
            "short-timeout",
            json!({"mode": "sleep"}),
            "{timeoutMs: 120}",
        ),
    ];
    let controller = Controller::start(client.clone(), fast_config(), instances).await?;
    eventually(Duration::from_secs(20), "limit errors", || {
        let by = |p: &str, needle: &str| {
            log_lines_with(&format!("plugin=\"{p}\""))
                .iter()
                .any(|l| l.contains(needle))
        };
        by("few-actions", "more than the limit of 5") && by("short-timeout", "120ms")
    })
    .await;
    let over = |p: &str| {
        log_lines_with(&format!("plugin=\"{p}\""))
            .iter()
            .any(|l| l.contains("more than the limit"))
    };
    assert!(!over("enough-actions"), "maxActions 6 allows 6 actions");
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_granted_by_label_follow_the_labels() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let label =
        |tenant: &str| kube::api::Patch::Merge(json!({"metadata": {"labels": {"tenant": tenant}}}));
    let params = kube::api::PatchParams::default();
    namespaces.patch("team-a", &params, &label("a")).await?;
    namespaces.patch("team-b", &params, &label("b")).await?;
    let hostile = load(&test_plugin("hostile")).await;
    let labeller = PluginInstance::named(hostile, "by-label", Some(r#"{"mode": "label"}"#))
        .with_policy(policy(
            "by-label",
            "mode: enforce
namespaces: {selector: {matchLabels: {tenant: a}}}
rules:
  - {apiVersion: apps/v1, kind: Deployment, verbs: [patch], fields: [/metadata/labels]}",
        ));
    let controller = Controller::start(client.clone(), fast_config(), vec![labeller]).await?;
    let labelled = |ns: &str| {
        ["web", "api"].iter().all(|n| {
            sim.get("deployments", Some(ns), n)
                .and_then(|d| d.pointer("/metadata/labels/hostile").cloned())
                .is_some()
        })
    };
    eventually(Duration::from_secs(20), "team-a labelled", || {
        labelled("team-a")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let in_b = |sim: &Sim| {
        writes_by(sim, "kubeplug/by-label")
            .iter()
            .any(|w| w.1.as_deref() == Some("team-b"))
    };
    assert!(!in_b(&sim), "team-b is not selected");
    // Relabelling team-b grants it: its keys are queued again.
    namespaces.patch("team-b", &params, &label("a")).await?;
    eventually(Duration::from_secs(20), "team-b labelled", || {
        labelled("team-b")
    })
    .await;
    controller.shutdown().await;
    Ok(())
}

/// team-a only, with every verb on v1 Namespace: a namespaced grant that must not reach
/// cluster-scoped objects.
const CLUSTER_PROBE_POLICY: &str = "mode: enforce
namespaces: {names: [team-a]}
reads: [{apiVersion: apps/v1, kind: Deployment}]
rules:
  - apiVersion: v1
    kind: Namespace
    verbs: [patch, create, delete, event]
    fields: [/metadata/labels]";

/// Requests of `verb` on `resource` in the sim's log, as `(namespace, name, path)`.
fn requests_on(
    sim: &Sim,
    verb: &str,
    resource: &str,
) -> Vec<(Option<String>, Option<String>, String)> {
    sim.requests()
        .records()
        .into_iter()
        .filter(|r| r.verb == verb && r.resource == resource)
        .map(|r| (r.namespace, r.name, r.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_kinds_need_the_explicit_cluster_grant() -> Result {
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    for ns in ["demo", "victim", "granted"] {
        create_namespace(&client, ns).await?;
    }
    let hostile = load(&test_plugin("hostile")).await;
    let probe = |name: &str, config: serde_json::Value, spec: &str| {
        PluginInstance::named(hostile.clone(), name, Some(&config.to_string()))
            .with_policy(policy(name, spec))
    };
    let all_ns = CLUSTER_PROBE_POLICY.replace("names: [team-a]", "all: true");
    let granted =
        CLUSTER_PROBE_POLICY.replace("names: [team-a]", "names: [team-a], clusterScoped: true");
    // (instance, config, policy, the grant that must deny it)
    let denied = [
        (
            "c-patch-ns",
            json!({"mode": "patch-cluster", "namespace": "team-a", "name": "demo"}),
            CLUSTER_PROBE_POLICY,
            Grant::Invalid,
        ),
        (
            "c-delete-ns",
            json!({"mode": "delete-cluster", "namespace": "team-a", "name": "victim"}),
            CLUSTER_PROBE_POLICY,
            Grant::Invalid,
        ),
        (
            "c-create-ns",
            json!({"mode": "create-cluster", "namespace": "team-a", "name": "created"}),
            CLUSTER_PROBE_POLICY,
            Grant::Invalid,
        ),
        (
            "c-event-ns",
            json!({"mode": "event-cluster", "namespace": "team-a", "name": "demo"}),
            CLUSTER_PROBE_POLICY,
            Grant::Invalid,
        ),
        (
            "c-patch",
            json!({"mode": "patch-cluster", "name": "demo"}),
            CLUSTER_PROBE_POLICY,
            Grant::ClusterScoped,
        ),
        (
            "c-delete",
            json!({"mode": "delete-cluster", "name": "victim"}),
            CLUSTER_PROBE_POLICY,
            Grant::ClusterScoped,
        ),
        (
            "c-create",
            json!({"mode": "create-cluster", "name": "created"}),
            CLUSTER_PROBE_POLICY,
            Grant::ClusterScoped,
        ),
        (
            "c-all-delete",
            json!({"mode": "delete-cluster", "name": "victim"}),
            all_ns.as_str(),
            Grant::ClusterScoped,
        ),
        (
            "c-granted-ns",
            json!({"mode": "patch-cluster", "namespace": "team-a", "name": "demo"}),
            granted.as_str(),
            Grant::Invalid,
        ),
        (
            "c-unknown",
            json!({"mode": "delete-cluster", "apiVersion": "example.com/v1", "kind": "Widget", "name": "w"}),
            granted.as_str(),
            Grant::Invalid,
        ),
    ];
    let mut instances: Vec<_> = denied
        .iter()
        .map(|(name, config, spec, _)| probe(name, config.clone(), spec))
        .collect();
    instances.push(probe(
        "c-granted",
        json!({"mode": "patch-cluster", "name": "granted"}),
        &granted,
    ));
    instances.push(probe(
        "c-granted-event",
        json!({"mode": "event-cluster", "name": "granted"}),
        &granted,
    ));
    let config = fast_config();
    let mut audit = config.audit.subscribe();
    let controller = Controller::start(client.clone(), config, instances).await?;
    let mut records = Vec::new();
    eventually(Duration::from_secs(30), "every probe audited", || {
        drain(&mut audit, &mut records);
        let seen = |p: &str| records.iter().any(|r| r.plugin.name == p);
        denied.iter().all(|d| seen(d.0))
            && sim
                .get("namespaces", None, "granted")
                .and_then(|n| n.pointer("/metadata/labels/hostile").cloned())
                .is_some()
            && !requests_on(&sim, "create", "events").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut audit, &mut records);
    for (name, _, _, grant) in &denied {
        let grants = denied_by(&records, name);
        assert!(
            !grants.is_empty() && grants.iter().all(|g| g == grant),
            "{name}: {grants:?}"
        );
        let sent = writes_by(&sim, &format!("kubeplug/{name}"));
        assert!(sent.is_empty(), "{name} sent {sent:?}");
    }
    // Nothing denied reached a Namespace: only the granted probe's patch did.
    for ns in ["demo", "victim"] {
        let obj = sim.get("namespaces", None, ns).expect("still there");
        assert_eq!(obj.pointer("/metadata/labels/hostile"), None, "{ns}");
    }
    assert!(sim.get("namespaces", None, "created").is_none());
    assert!(requests_on(&sim, "delete", "namespaces").is_empty());
    assert!(
        requests_on(&sim, "create", "namespaces")
            .iter()
            .all(|r| r.1.as_deref() != Some("created"))
    );
    let patched: Vec<_> = requests_on(&sim, "patch", "namespaces");
    assert!(
        patched
            .iter()
            .all(|r| r.1.as_deref() == Some("granted") && r.0.is_none()),
        "{patched:?}"
    );
    // The event about a cluster-scoped object goes to `default`, as the checker allowed.
    let events = requests_on(&sim, "create", "events");
    assert!(
        events.iter().all(|e| e.0.as_deref() == Some("default")),
        "{events:?}"
    );
    assert!(denied_by(&records, "c-granted").is_empty());
    assert!(denied_by(&records, "c-granted-event").is_empty());
    controller.shutdown().await;
    Ok(())
}

/// The issue's hostile strings: a query smuggled into a name, a path climbing out of its
/// collection.
const QUERY_NAME: &str = "x?fieldManager=kube-controller-manager&a=";
const CLIMBING_NAME: &str = "x/../../../demo/deployments/web";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_subresources_never_reach_a_url() -> Result {
    capture_logs();
    let sim = seeded_sim().await?;
    let client = sim.client()?;
    let hostile = load(&test_plugin("hostile")).await;
    let spec = "mode: enforce
namespaces: {names: [team-a]}
reads: [{apiVersion: apps/v1, kind: Deployment}]
rules:
  - apiVersion: v1
    kind: Pod
    verbs: [patch, patch-status, create, delete, event]
    fields: [/metadata/labels, /spec]";
    let probes = [
        (
            "n-patch-query",
            json!({"mode": "name-attack", "name": QUERY_NAME}),
        ),
        (
            "n-patch-climb",
            json!({"mode": "name-attack", "name": CLIMBING_NAME}),
        ),
        (
            "n-sub-query",
            json!({"mode": "name-attack", "name": "cm", "subresource": QUERY_NAME}),
        ),
        (
            "n-sub-climb",
            json!({"mode": "name-attack", "name": "cm", "subresource": CLIMBING_NAME}),
        ),
        (
            "n-delete-query",
            json!({"mode": "name-attack", "verb": "delete", "name": QUERY_NAME}),
        ),
        (
            "n-delete-climb",
            json!({"mode": "name-attack", "verb": "delete", "name": CLIMBING_NAME}),
        ),
        (
            "n-event-query",
            json!({"mode": "name-attack", "verb": "event", "name": QUERY_NAME}),
        ),
        (
            "n-namespace",
            json!({"mode": "name-attack", "namespace": "team-a/../team-b", "name": "cm"}),
        ),
        (
            "n-create-name",
            json!({"mode": "name-attack", "verb": "create", "name": CLIMBING_NAME}),
        ),
        (
            "n-create-generate",
            json!({"mode": "name-attack", "verb": "create", "generateName": QUERY_NAME}),
        ),
        (
            "n-dot",
            json!({"mode": "name-attack", "verb": "delete", "name": ".."}),
        ),
    ];
    let mut instances: Vec<_> = probes
        .iter()
        .map(|(name, config)| {
            PluginInstance::named(hostile.clone(), name, Some(&config.to_string()))
                .with_policy(policy(name, spec))
        })
        .collect();
    // A control: the same plugin with a valid name reaches the API server.
    instances.push(
        PluginInstance::named(
            hostile.clone(),
            "n-control",
            Some(&json!({"mode": "name-attack", "name": "cm-ok"}).to_string()),
        )
        .with_policy(policy("n-control", spec)),
    );
    let config = fast_config();
    let mut audit = config.audit.subscribe();
    let controller = Controller::start(client.clone(), config, instances).await?;
    let refused = |p: &str| {
        log_lines_with(&format!("plugin=\"{p}\""))
            .iter()
            .any(|l| l.contains("invalid-output"))
    };
    // Each probe was called: refused as invalid output, or (without the checks) audited.
    let mut records = Vec::new();
    eventually(Duration::from_secs(30), "every probe called", || {
        drain(&mut audit, &mut records);
        probes
            .iter()
            .all(|(p, _)| refused(p) || records.iter().any(|r| r.plugin.name == *p))
            && !writes_by(&sim, "kubeplug/n-control").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for r in sim.requests().records() {
        let url = format!("{}?{}", r.path, r.query);
        assert!(
            !url.contains("kube-controller-manager")
                && !url.contains("..")
                && !url.contains("/x/")
                && r.field_manager.as_deref() != Some("kube-controller-manager"),
            "{r:?}"
        );
    }
    for (name, _) in &probes {
        let sent = writes_by(&sim, &format!("kubeplug/{name}"));
        assert!(sent.is_empty(), "{name} sent {sent:?}");
        // Refused as a whole, before the policy check: nothing of it is audited, and the
        // refusal names the problem.
        let lines = log_lines_with(&format!("plugin=\"{name}\""));
        assert!(
            lines.iter().any(|l| l.contains("invalid-output")
                && (l.contains("DNS-1123") || l.contains("subresource"))),
            "{name}: {lines:?}"
        );
        assert!(!records.iter().any(|r| r.plugin.name == *name), "{name}");
    }
    let control = requests_on(&sim, "patch", "pods");
    assert!(
        control
            .iter()
            .all(|c| c.1.as_deref() == Some("cm-ok") && c.0.as_deref() == Some("team-a")),
        "{control:?}"
    );
    controller.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_must_grant_the_kind_the_plugin_reconciles() -> Result {
    let sim = seeded_sim().await?;
    let controller = Controller::new(sim.client()?, fast_config());
    // hostile reconciles Deployments; this policy names only ConfigMaps.
    let plugin = load(&test_plugin("hostile")).await;
    let configmaps_only = "mode: enforce
namespaces: {names: [team-a]}
rules:
  - {apiVersion: v1, kind: ConfigMap, verbs: [patch], fields: [/data]}";
    let err = controller
        .add(
            PluginInstance::named(plugin.clone(), "greedy", None)
                .with_policy(policy("greedy", configmaps_only)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::KindNotGranted { .. }), "{err}");
    assert!(err.to_string().contains("apps/v1/Deployment"), "{err}");
    assert!(controller.plugins().is_empty());
    // Naming the kind, in reads or in a rule, lets it run.
    let granted = format!("{configmaps_only}\nreads: [{{apiVersion: apps/v1, kind: Deployment}}]");
    controller
        .add(PluginInstance::named(plugin, "greedy", None).with_policy(policy("greedy", &granted)))
        .await?;
    assert_eq!(controller.plugins(), vec!["greedy".to_string()]);
    controller.shutdown().await;
    Ok(())
}
