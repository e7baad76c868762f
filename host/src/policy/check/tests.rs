use super::*;
use crate::contract::{EventType, LogLevel, ObjectRef};
use crate::policy::document::GrantsSpec;
use serde_json::json;

fn grants() -> Grants {
    let spec: GrantsSpec = serde_json::from_value(json!({
        "namespaces": {"names": ["a"]},
        "rules": [{"apiVersion": "apps/v1", "kind": "Deployment",
            "verbs": ["patch", "patch-status", "event"],
            "fields": ["/spec/template/spec/containers/*/image",
                "/spec/template/spec/containers/*/name", "/metadata/labels"]},
            {"apiVersion": "v1", "kind": "ConfigMap", "verbs": ["create", "delete"],
            "fields": ["/data"]}]
    }))
    .unwrap();
    Grants::from_spec(&spec).unwrap()
}

fn deploy(ns: &str) -> ObjectRef {
    ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some(ns.into()),
        name: "web".into(),
    }
}

fn patch(ns: &str, patch_type: PatchType, body: Value) -> Action {
    Action::Patch {
        target: deploy(ns),
        patch_type,
        subresource: None,
        body,
    }
}

fn namespaced(_: &KindRef) -> Result<Scope, String> {
    Ok(Scope::Namespaced)
}

fn grant_of(r: Result<(), Denial>) -> Option<Grant> {
    r.err().map(|d| d.grant)
}

#[test]
fn namespaces_are_checked_for_every_write() {
    let g = grants();
    let image =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
    assert_eq!(
        grant_of(g.check(
            &patch("a", PatchType::Strategic, image.clone()),
            Scope::Namespaced
        )),
        None
    );
    assert_eq!(
        grant_of(g.check(&patch("b", PatchType::Strategic, image), Scope::Namespaced)),
        Some(Grant::Namespaces)
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "b"}, "data": {"k": "v"}});
    assert_eq!(
        grant_of(g.check(&Action::Create { manifest: cm }, Scope::Namespaced)),
        Some(Grant::Namespaces)
    );
}

#[test]
fn verbs_are_checked_per_kind() {
    let g = grants();
    assert_eq!(
        grant_of(g.check(
            &Action::Delete {
                target: deploy("a")
            },
            Scope::Namespaced
        )),
        Some(Grant::Verbs)
    );
    let cm = ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("a".into()),
        name: "c".into(),
    };
    assert_eq!(
        grant_of(g.check(&Action::Delete { target: cm.clone() }, Scope::Namespaced)),
        None
    );
    let event = |regarding| Action::Event {
        regarding,
        event_type: EventType::Normal,
        reason: "R".into(),
        message: "m".into(),
        event_action: "Reconcile".into(),
    };
    assert_eq!(
        grant_of(g.check(&event(deploy("a")), Scope::Namespaced)),
        None
    );
    assert_eq!(
        grant_of(g.check(&event(cm), Scope::Namespaced)),
        Some(Grant::Verbs)
    );
    let status = Action::Patch {
        target: deploy("a"),
        patch_type: PatchType::Merge,
        subresource: Some("status".into()),
        body: json!({"status": {"phase": "x"}}),
    };
    assert_eq!(grant_of(g.check(&status, Scope::Namespaced)), None);
}

#[test]
fn fields_are_checked_for_every_patch_type_and_create() {
    let g = grants();
    let check = |t, body| grant_of(g.check(&patch("a", t, body), Scope::Namespaced));
    assert_eq!(
        check(
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": null}}})
        ),
        None
    );
    assert_eq!(
        check(PatchType::Merge, json!({"spec": {"replicas": 0}})),
        Some(Grant::Fields)
    );
    assert_eq!(
        check(
            PatchType::Json,
            json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x"}])
        ),
        None
    );
    assert_eq!(
        check(
            PatchType::Json,
            json!([{"op": "move", "from": "/spec/replicas", "path": "/metadata/labels/x"}])
        ),
        Some(Grant::Fields)
    );
    assert_eq!(
        check(PatchType::Json, json!({"op": "add"})),
        Some(Grant::Fields)
    );
    assert_eq!(
        check(
            PatchType::Strategic,
            json!({"spec": {"template": {"$patch": "replace", "spec": {"containers": []}}}})
        ),
        Some(Grant::Fields)
    );
    assert_eq!(
        check(
            PatchType::Apply,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}})
        ),
        None
    );
    assert_eq!(
        check(
            PatchType::Apply,
            json!({"metadata": {"annotations": {"a": "b"}}})
        ),
        Some(Grant::Fields)
    );
    let cm = |data: Value| Action::Create {
        manifest: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a"}, "data": data}),
    };
    assert_eq!(
        grant_of(g.check(&cm(json!({"k": "v"})), Scope::Namespaced)),
        None
    );
    let mut labelled = cm(json!({}));
    if let Action::Create { manifest } = &mut labelled {
        manifest["metadata"]["labels"] = json!({"x": "y"});
    }
    assert_eq!(
        grant_of(g.check(&labelled, Scope::Namespaced)),
        Some(Grant::Fields)
    );
}

#[test]
fn one_denied_action_denies_every_write_of_the_call() {
    let g = grants();
    let actions = [
        patch(
            "a",
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": "y"}}}),
        ),
        Action::Log {
            level: LogLevel::Info,
            message: "hi".into(),
        },
        patch(
            "b",
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": "y"}}}),
        ),
    ];
    let results = check_call(&g, &actions, &namespaced);
    assert_eq!(grant_of(results[0].clone()), Some(Grant::Call));
    assert!(results[1].is_ok());
    assert_eq!(grant_of(results[2].clone()), Some(Grant::Namespaces));
    let ok = check_call(&g, &actions[..2], &namespaced);
    assert!(ok.iter().all(Result::is_ok));
}

#[test]
fn unconfigured_grants_allow_everything_for_dry_run() {
    let g = Grants::unconfigured();
    assert!(
        g.check(
            &Action::Delete {
                target: deploy("any")
            },
            Scope::Namespaced
        )
        .is_ok()
    );
}

fn cluster_grants(cluster_scoped: bool, all: bool) -> Grants {
    let spec: GrantsSpec = serde_json::from_value(json!({
        "namespaces": {"names": ["team-a"], "all": all, "clusterScoped": cluster_scoped},
        "rules": [{"apiVersion": "v1", "kind": "Namespace",
            "verbs": ["patch", "create", "delete", "event"], "fields": ["/metadata/labels"]}]
    }))
    .unwrap();
    Grants::from_spec(&spec).unwrap()
}

fn namespace_ref(namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: namespace.map(str::to_string),
        name: name.into(),
    }
}

fn cluster_actions(namespace: Option<&str>) -> Vec<Action> {
    let mut manifest = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "demo", "labels": {"a": "b"}}});
    if let Some(ns) = namespace {
        manifest["metadata"]["namespace"] = json!(ns);
    }
    vec![
        Action::Patch {
            target: namespace_ref(namespace, "demo"),
            patch_type: PatchType::Merge,
            subresource: None,
            body: json!({"metadata": {"labels": {"a": "b"}}}),
        },
        Action::Delete {
            target: namespace_ref(namespace, "victim"),
        },
        Action::Create { manifest },
        Action::Event {
            regarding: namespace_ref(namespace, "demo"),
            event_type: EventType::Normal,
            reason: "R".into(),
            message: "m".into(),
            event_action: "Reconcile".into(),
        },
    ]
}

#[test]
fn a_namespace_name_never_grants_a_cluster_scoped_kind() {
    // The bypass: a ref to v1 Namespace carrying the granted namespace.
    let g = cluster_grants(false, false);
    for a in cluster_actions(Some("team-a")) {
        assert_eq!(
            grant_of(g.check(&a, Scope::Cluster)),
            Some(Grant::Invalid),
            "{a:?}"
        );
    }
    for a in cluster_actions(None) {
        assert_eq!(
            grant_of(g.check(&a, Scope::Cluster)),
            Some(Grant::ClusterScoped),
            "{a:?}"
        );
    }
}

#[test]
fn all_namespaces_alone_is_not_the_cluster_grant() {
    let g = cluster_grants(false, true);
    for a in cluster_actions(None) {
        assert_eq!(
            grant_of(g.check(&a, Scope::Cluster)),
            Some(Grant::ClusterScoped),
            "{a:?}"
        );
    }
}

#[test]
fn the_cluster_grant_allows_cluster_scoped_writes_by_the_rules() {
    let g = cluster_grants(true, false);
    for a in cluster_actions(None) {
        assert_eq!(grant_of(g.check(&a, Scope::Cluster)), None, "{a:?}");
    }
    // Still the rules: a field outside them, or a namespace on the ref, is denied.
    let spec = Action::Patch {
        target: namespace_ref(None, "demo"),
        patch_type: PatchType::Merge,
        subresource: None,
        body: json!({"spec": {"finalizers": []}}),
    };
    assert_eq!(
        grant_of(g.check(&spec, Scope::Cluster)),
        Some(Grant::Fields)
    );
    for a in cluster_actions(Some("team-a")) {
        assert_eq!(grant_of(g.check(&a, Scope::Cluster)), Some(Grant::Invalid));
    }
}

#[test]
fn a_namespaced_kind_needs_a_namespace() {
    let g = cluster_grants(true, true);
    let mut d = deploy("a");
    d.namespace = None;
    assert_eq!(
        grant_of(g.check(&Action::Delete { target: d }, Scope::Namespaced)),
        Some(Grant::Invalid)
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert_eq!(
        grant_of(g.check(&Action::Create { manifest: cm }, Scope::Namespaced)),
        Some(Grant::Invalid)
    );
}

#[test]
fn an_unknown_kind_denies_the_call_as_invalid() {
    let g = cluster_grants(true, true);
    let unknown = |k: &KindRef| -> Result<Scope, String> {
        if k.kind == "Namespace" {
            Ok(Scope::Cluster)
        } else {
            Err("not served".into())
        }
    };
    let mut actions = cluster_actions(None);
    actions.push(Action::Delete {
        target: ObjectRef {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            namespace: Some("team-a".into()),
            name: "w".into(),
        },
    });
    let results = check_call(&g, &actions, &unknown);
    assert_eq!(grant_of(results[4].clone()), Some(Grant::Invalid));
    assert!(
        results[..4]
            .iter()
            .all(|r| grant_of(r.clone()) == Some(Grant::Call))
    );
}
