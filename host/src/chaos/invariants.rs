//! The invariants a run must end with: every key reconciled (demo Deployments pinned, each
//! Foo's one Deployment with its replicas, each Customcluster with `count` Pods of its
//! message and its status), no duplicated child and no orphan, no plugin left failed, the
//! same final objects as the fault-free run of the same workload, and every write the hosts
//! sent inside the policy of the loaded plugin that sent it. How many writes they sent is
//! bounded beside, in [`super::write_bound`].

use super::schedule::HOST_AGENT;
use super::snapshot::{Child, Snapshot};
use super::workload::{CRD_NS, Expected, PINNED_IMAGE, PINNED_NS};
use super::write_action::{self, WriteAction};
use crate::policy::{Mode, Policy};
use kubeplug_sim::RequestRecord;
use serde_json::Value;
use std::collections::BTreeMap;

/// What is wrong with `snapshot`, one sentence per problem (empty: every invariant holds).
/// `baseline` is the fault-free run's [`Snapshot::comparable`] (`None` for that run itself);
/// `plugin_problems` what the host says about plugins that do not run.
pub fn check(
    snapshot: &Snapshot,
    expected: &Expected,
    baseline: Option<&BTreeMap<String, Value>>,
    plugin_problems: &[String],
) -> Vec<String> {
    let mut wrong: Vec<String> = plugin_problems.to_vec();
    pinned(snapshot, expected, &mut wrong);
    foos(snapshot, expected, &mut wrong);
    clusters(snapshot, expected, &mut wrong);
    orphans(snapshot, &mut wrong);
    if let Some(baseline) = baseline {
        let ours = snapshot.comparable();
        let keys: std::collections::BTreeSet<&String> =
            ours.keys().chain(baseline.keys()).collect();
        for key in keys {
            match (ours.get(key), baseline.get(key)) {
                (Some(a), Some(b)) if a == b => {}
                (a, b) => wrong.push(format!(
                    "{key} differs from the fault-free run: {} instead of {}",
                    a.map_or("absent".into(), Value::to_string),
                    b.map_or("absent".into(), Value::to_string)
                )),
            }
        }
    }
    wrong
}

/// The hosts' writes in `requests` that no loaded plugin's policy allows, one sentence each
/// naming the request. A write is judged by the host's own checker against the policy of
/// the plugin its field manager (an Event's `reportingController`) names; a delete names
/// none (DeleteOptions has no field manager), so it must be allowed by some loaded plugin's
/// policy. `policies` are the loaded plugins' by name; only enforced ones may write.
pub fn writes_in_policy(
    requests: &[RequestRecord],
    policies: &BTreeMap<String, Policy>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    // The replicas' own Leases are no plugin's action.
    let coordination = |r: &RequestRecord| {
        r.group == "coordination.k8s.io"
            && r.resource == "leases"
            && r.namespace.as_deref() == Some(super::host_process::LEASE_NAMESPACE)
    };
    let host_writes = requests.iter().filter(|r| {
        r.user_agent.contains(HOST_AGENT)
            && super::WRITES.contains(&r.verb.as_str())
            && !coordination(r)
    });
    for r in host_writes {
        let request = format!("{} {} (answered {})", r.verb, r.path, r.status);
        let denied = match write_action::from_record(r) {
            Err(why) => Some(why),
            Ok(w) => out_of_policy(&w, policies),
        };
        if let Some(why) = denied {
            wrong.push(format!("a write outside its policy: {request}: {why}"));
        }
    }
    wrong
}

/// Why `write` is outside every policy it could be sent under (`None`: it is inside one).
fn out_of_policy(write: &WriteAction, policies: &BTreeMap<String, Policy>) -> Option<String> {
    let judge = |name: &str, policy: &Policy| match policy.mode {
        Mode::DryRun => Err(format!("{name} runs in dry-run and sends nothing")),
        Mode::Enforce => policy
            .grants
            .check(&write.action, write.scope)
            .map_err(|denial| format!("{name}'s policy: {denial}")),
    };
    match &write.plugin {
        Some(name) => match policies.get(name) {
            None => Some(format!("sent as plugin {name}, which is not loaded")),
            Some(policy) => judge(name, policy).err(),
        },
        None => {
            let judged: Vec<Result<(), String>> = policies
                .iter()
                .map(|(name, policy)| judge(name, policy))
                .collect();
            if judged.iter().any(Result::is_ok) {
                return None;
            }
            let denials: Vec<String> = judged.into_iter().filter_map(Result::err).collect();
            Some(format!(
                "it names no plugin and no loaded plugin's policy allows it ({})",
                match denials.is_empty() {
                    true => "no plugin loaded".to_string(),
                    false => denials.join("; "),
                }
            ))
        }
    }
}

fn pinned(snapshot: &Snapshot, expected: &Expected, wrong: &mut Vec<String>) {
    for name in &expected.deployments {
        let key = format!("{PINNED_NS}/{name}");
        let Some(d) = snapshot.deployments.get(&key) else {
            wrong.push(format!("Deployment {key} is gone"));
            continue;
        };
        let images: Vec<&str> = d.view["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["image"].as_str())
            .collect();
        if images.iter().any(|i| *i != PINNED_IMAGE) {
            wrong.push(format!(
                "Deployment {key} unreconciled: image {} instead of {PINNED_IMAGE}",
                images.join(",")
            ));
        }
    }
}

fn controlled<'a>(
    children: impl Iterator<Item = &'a Child>,
    kind: &str,
    uid: &str,
) -> Vec<&'a Child> {
    children
        .filter(|c| {
            c.owner
                .as_ref()
                .is_some_and(|(k, _, u)| k == kind && u == uid)
        })
        .collect()
}

fn foos(snapshot: &Snapshot, expected: &Expected, wrong: &mut Vec<String>) {
    for (name, (deployment, replicas)) in &expected.foos {
        let Some(parent) = snapshot.foos.get(name) else {
            wrong.push(format!("Foo {CRD_NS}/{name} is gone"));
            continue;
        };
        let children = controlled(snapshot.deployments.values(), "Foo", &parent.uid);
        match children.as_slice() {
            [] => wrong.push(format!("Foo {CRD_NS}/{name} unreconciled: no Deployment")),
            [d] => {
                if d.key != format!("{CRD_NS}/{deployment}") {
                    wrong.push(format!(
                        "Foo {CRD_NS}/{name} unreconciled: its Deployment is {} instead of {CRD_NS}/{deployment}",
                        d.key
                    ));
                }
                if d.view["replicas"] != *replicas {
                    wrong.push(format!(
                        "Foo {CRD_NS}/{name} unreconciled: Deployment {} has {} replicas instead of {replicas}",
                        d.key, d.view["replicas"]
                    ));
                }
            }
            many => wrong.push(format!(
                "Foo {CRD_NS}/{name} has {} Deployments (duplicated child): {}",
                many.len(),
                many.iter()
                    .map(|d| d.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        let available = &parent.view["status"]["availableReplicas"];
        if *available != *replicas {
            wrong.push(format!(
                "Foo {CRD_NS}/{name} unreconciled: status.availableReplicas {available} instead of {replicas}"
            ));
        }
    }
}

fn clusters(snapshot: &Snapshot, expected: &Expected, wrong: &mut Vec<String>) {
    for (name, (count, message)) in &expected.clusters {
        let Some(cc) = snapshot.clusters.get(name) else {
            wrong.push(format!("Customcluster {CRD_NS}/{name} is gone"));
            continue;
        };
        let pods = controlled(snapshot.pods.iter(), "Customcluster", &cc.uid);
        let n = pods.len() as i64;
        if n > *count {
            wrong.push(format!(
                "Customcluster {CRD_NS}/{name} has {n} Pods instead of {count} (duplicated children)"
            ));
        } else if n < *count {
            wrong.push(format!(
                "Customcluster {CRD_NS}/{name} unreconciled: {n} Pods instead of {count}"
            ));
        }
        let stale = pods
            .iter()
            .filter(|p| p.view["message"] != message.as_str())
            .count();
        if stale > 0 {
            wrong.push(format!(
                "Customcluster {CRD_NS}/{name} unreconciled: {stale} Pods run another message than {message:?}"
            ));
        }
        let status = &cc.view["status"];
        let want_message = if *count > 0 { message.as_str() } else { "" };
        if status["count"] != *count || status["message"] != want_message {
            wrong.push(format!(
                "Customcluster {CRD_NS}/{name} unreconciled: status {status} instead of count {count}, message {want_message:?}"
            ));
        }
    }
}

fn orphans(snapshot: &Snapshot, wrong: &mut Vec<String>) {
    let live = |kind: &str, uid: &str| match kind {
        "Foo" => snapshot.foos.values().any(|f| f.uid == uid),
        "Customcluster" => snapshot.clusters.values().any(|c| c.uid == uid),
        _ => true,
    };
    let children = snapshot
        .deployments
        .values()
        .map(|d| ("Deployment", d))
        .chain(snapshot.pods.iter().map(|p| ("Pod", p)));
    for (kind, child) in children {
        match &child.owner {
            Some((owner_kind, owner, uid)) if !live(owner_kind, uid) => wrong.push(format!(
                "orphan {kind} {}: its owner {owner_kind} {owner} ({uid}) is gone",
                child.key
            )),
            None if child.label.is_some() => wrong.push(format!(
                "orphan {kind} {}: labelled controller={} but controlled by nothing",
                child.key,
                child.label.as_deref().unwrap_or_default()
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::Parent;
    use super::*;
    use serde_json::json;

    /// A snapshot where every invariant holds for [`expected`].
    fn good() -> (Snapshot, Expected) {
        let expected = Expected {
            deployments: vec!["web-0".into()],
            foos: [("foo-0".to_string(), ("foo-0-a".to_string(), 2))].into(),
            clusters: [("cc-0".to_string(), (1, "m1".to_string()))].into(),
        };
        let owned =
            |kind: &str, name: &str, uid: &str| Some((kind.into(), name.into(), uid.into()));
        let snapshot = Snapshot {
            deployments: [
                Child {
                    key: "demo/web-0".into(),
                    view: json!({"replicas": 1, "containers": [{"name": "app", "image": PINNED_IMAGE}]}),
                    ..Child::default()
                },
                Child {
                    key: "crd-demo/foo-0-a".into(),
                    owner: owned("Foo", "foo-0", "u-foo"),
                    label: Some("foo-0".into()),
                    view: json!({"replicas": 2}),
                },
            ]
            .into_iter()
            .map(|c| (c.key.clone(), c))
            .collect(),
            foos: [(
                "foo-0".to_string(),
                Parent {
                    uid: "u-foo".into(),
                    view: json!({"status": {"availableReplicas": 2}}),
                },
            )]
            .into(),
            clusters: [(
                "cc-0".to_string(),
                Parent {
                    uid: "u-cc".into(),
                    view: json!({"status": {"count": 1, "message": "m1"}}),
                },
            )]
            .into(),
            pods: vec![Child {
                key: "crd-demo/cc-0-abcde".into(),
                owner: owned("Customcluster", "cc-0", "u-cc"),
                label: Some("cc-0".into()),
                view: json!({"message": "m1", "phase": "Running"}),
            }],
        };
        (snapshot, expected)
    }

    #[test]
    fn a_reconciled_state_passes_and_matches_itself() {
        let (snapshot, expected) = good();
        let baseline = snapshot.comparable();
        assert_eq!(
            check(&snapshot, &expected, Some(&baseline), &[]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_duplicated_pod_an_unpinned_deployment_and_an_orphan_are_caught() {
        let (mut snapshot, expected) = good();
        let baseline = snapshot.comparable();
        let mut twin = snapshot.pods[0].clone();
        twin.key = "crd-demo/cc-0-fghij".into();
        snapshot.pods.push(twin);
        snapshot.deployments.get_mut("demo/web-0").unwrap().view["containers"][0]["image"] =
            json!("alpine:3.4");
        let mut orphan = snapshot.pods[0].clone();
        orphan.key = "crd-demo/cc-9-zzzzz".into();
        orphan.owner = Some(("Customcluster".into(), "cc-9".into(), "u-gone".into()));
        snapshot.pods.push(orphan);
        let wrong = check(
            &snapshot,
            &expected,
            Some(&baseline),
            &["plugin x failed".into()],
        );
        let has = |s: &str| wrong.iter().any(|w| w.contains(s));
        assert!(has("plugin x failed"), "{wrong:?}");
        assert!(
            has("cc-0 has 2 Pods instead of 1 (duplicated children)"),
            "{wrong:?}"
        );
        assert!(
            has("demo/web-0 unreconciled: image alpine:3.4"),
            "{wrong:?}"
        );
        assert!(has("orphan Pod crd-demo/cc-9-zzzzz"), "{wrong:?}");
        assert!(has("differs from the fault-free run"), "{wrong:?}");
    }

    /// The Rust seed plugins' policies, as a run loads them.
    fn rust_policies() -> BTreeMap<String, Policy> {
        let file = std::path::Path::new("x.policy.yaml");
        super::super::PluginSet::Rust
            .policies()
            .into_iter()
            .map(|(name, text)| {
                let doc = crate::policy::PolicyDocument::parse(&text, file).unwrap();
                (
                    name.to_string(),
                    Policy::from_document(&doc, name, file).unwrap(),
                )
            })
            .collect()
    }

    /// A host's write (user agent of a chaos host) of a Deployment in `ns`.
    fn write(verb: &str, ns: &str, manager: Option<&str>, body: Value) -> RequestRecord {
        RequestRecord {
            verb: verb.into(),
            path: format!("/apis/apps/v1/namespaces/{ns}/deployments/web"),
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: Some(ns.into()),
            name: Some("web".into()),
            patch_type: (verb == "patch").then(|| "strategic".into()),
            field_manager: manager.map(|m| format!("kubeplug/{m}")),
            user_agent: format!("kubeplug/chaos ({HOST_AGENT}-0)"),
            status: 200,
            body: Some(body),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn writes_inside_their_plugins_policies_pass() {
        let image = json!({"metadata": {"resourceVersion": "9"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.13"}]}}}});
        let requests = [
            write("patch", PINNED_NS, Some("image-pinner"), image),
            // sample-controller may delete Deployments in crd-demo; a delete names no plugin.
            write("delete", CRD_NS, None, json!({})),
            // The workload's own writes are not the hosts'.
            RequestRecord {
                user_agent: "kubeplug-sim/client".into(),
                ..write("delete", PINNED_NS, None, json!({}))
            },
        ];
        assert_eq!(
            writes_in_policy(&requests, &rust_policies()),
            Vec::<String>::new()
        );
    }

    /// A replica's write of its member Lease in `ns`.
    fn lease(ns: &str) -> RequestRecord {
        RequestRecord {
            verb: "update".into(),
            path: format!(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/kubeplug-chaos-host-0"
            ),
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            namespace: Some(ns.into()),
            name: Some("kubeplug-chaos-host-0".into()),
            user_agent: format!("kubeplug/chaos ({HOST_AGENT}-0)"),
            status: 200,
            body: Some(json!({})),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn the_replicas_own_leases_are_no_plugins_write_but_leases_elsewhere_are() {
        let own = [lease(crate::chaos::host_process::LEASE_NAMESPACE)];
        assert_eq!(
            writes_in_policy(&own, &rust_policies()),
            Vec::<String>::new()
        );
        let elsewhere = [lease(PINNED_NS)];
        assert_eq!(writes_in_policy(&elsewhere, &rust_policies()).len(), 1);
    }

    #[test]
    fn writes_outside_their_plugins_policies_are_reported_with_the_request() {
        let replicas = json!({"spec": {"replicas": 5}});
        let requests = [
            // image-pinner may set images, not replicas.
            write("patch", PINNED_NS, Some("image-pinner"), replicas.clone()),
            // sample-controller may patch Deployments of crd-demo only.
            write(
                "patch",
                PINNED_NS,
                Some("sample-controller"),
                replicas.clone(),
            ),
            // A plugin that is not loaded.
            write("patch", PINNED_NS, Some("intruder"), replicas),
            // No policy lets anyone delete a Deployment in demo.
            write("delete", PINNED_NS, None, json!({})),
        ];
        let wrong = writes_in_policy(&requests, &rust_policies());
        assert_eq!(wrong.len(), 4, "{wrong:?}");
        let request = "patch /apis/apps/v1/namespaces/demo/deployments/web (answered 200)";
        assert!(wrong[0].contains(request), "{wrong:?}");
        assert!(
            wrong[0].contains("image-pinner's policy: denied by fields"),
            "{wrong:?}"
        );
        assert!(
            wrong[1].contains("sample-controller's policy: denied by namespaces"),
            "{wrong:?}"
        );
        assert!(
            wrong[2].contains("plugin intruder, which is not loaded"),
            "{wrong:?}"
        );
        assert!(
            wrong[3].contains("delete /apis/apps/v1/namespaces/demo/deployments/web")
                && wrong[3].contains("no loaded plugin's policy allows it"),
            "{wrong:?}"
        );
    }

    #[test]
    fn a_second_deployment_of_a_foo_and_stale_replicas_are_caught() {
        let (mut snapshot, expected) = good();
        let mut second = snapshot.deployments["crd-demo/foo-0-a"].clone();
        second.key = "crd-demo/foo-0-b".into();
        snapshot.deployments.insert(second.key.clone(), second);
        let wrong = check(&snapshot, &expected, None, &[]);
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("has 2 Deployments (duplicated child)")),
            "{wrong:?}"
        );
        let (mut snapshot, expected) = good();
        snapshot
            .deployments
            .get_mut("crd-demo/foo-0-a")
            .unwrap()
            .view["replicas"] = json!(1);
        let wrong = check(&snapshot, &expected, None, &[]);
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("has 1 replicas instead of 2")),
            "{wrong:?}"
        );
    }
}
