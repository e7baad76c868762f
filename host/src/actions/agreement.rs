//! Property test: the validator and the policy checker on one side, the executor's request
//! targets on the other, agree on what an action touches. For random actions (names,
//! namespaces, kinds of both scopes and unknown ones, subresources, patch bodies with
//! strategic directives) and random grants, every action that passes validation and the
//! check resolves to a request inside the grant: the namespace path segment granted (or the
//! cluster path with the cluster-scope grant), the kind's collection (Events for an event),
//! a granted verb, and a path of plain segments.

use super::target::{CLUSTER_EVENT_NAMESPACE, Method, Resource, path_segment, request_target};
use crate::contract::{
    Action, EventType, KindRef, ObjectRef, OutputLimits, PatchType, Scope, names, validate_actions,
};
use crate::policy::{Grants, GrantsSpec, Rules, Verb, check_call, kind_of};
use kube::api::ApiResource;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// Kinds the simulated discovery knows, with their scope; others are unknown.
const KINDS: &[(&str, &str, Scope)] = &[
    ("apps/v1", "Deployment", Scope::Namespaced),
    ("v1", "ConfigMap", Scope::Namespaced),
    ("v1", "Namespace", Scope::Cluster),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        Scope::Cluster,
    ),
];

fn scope_of(kind: &KindRef) -> Result<Scope, String> {
    KINDS
        .iter()
        .find(|(v, k, _)| *v == kind.api_version && *k == kind.kind)
        .map(|(_, _, s)| *s)
        .ok_or_else(|| "not served".into())
}

fn any_kind() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        8 => (0..KINDS.len()).prop_map(|i| (KINDS[i].0.to_string(), KINDS[i].1.to_string())),
        1 => Just(("example.com/v1".to_string(), "Widget".to_string())),
        1 => ("[a-z./]{0,12}", "[A-Za-z /?]{0,8}"),
    ]
}

fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["web", "a.b", "demo", "system:admin", "0"]).prop_map(str::to_string),
        3 => prop::sample::select(vec![
            "x?fieldManager=kube-controller-manager&a=",
            "x/../../../demo/deployments/web",
            "..", ".", "", "a b", "Web", "%2e%2e", "a#b", "a\nb", "x/y",
        ]).prop_map(str::to_string),
        2 => "[a-z0-9.:/?%#@ -]{0,12}",
    ]
}

fn any_namespace() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        6 => prop::sample::select(vec!["team-a", "team-b", "default", "kube-system"])
            .prop_map(|s| Some(s.to_string())),
        2 => prop::sample::select(vec!["", "team-a/../team-b", "Team-A", "team-a?x=1", "a.b"])
            .prop_map(|s| Some(s.to_string())),
    ]
}

fn any_subresource() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => Just(None),
        3 => prop::sample::select(vec!["status", "scale"]).prop_map(|s| Some(s.to_string())),
        1 => prop::sample::select(vec!["exec", "status/../..", "x?a=b", ""])
            .prop_map(|s| Some(s.to_string())),
    ]
}

/// Patch bodies, strategic directives among them; some name another object.
fn any_body() -> impl Strategy<Value = (PatchType, Value)> {
    let object = prop::sample::select(vec![
        json!({"metadata": {"labels": {"a": "b"}}}),
        json!({"spec": {"replicas": 0}}),
        json!({"status": {"phase": "x"}}),
        json!({"data": {"k": "v"}}),
        json!({"metadata": {"$patch": "replace", "labels": {"a": "b"}}}),
        json!({"$retainKeys": ["metadata"], "metadata": {"labels": {"a": "b"}}}),
        json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a", "image": "x"}]}}),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        json!({"metadata": {"name": "other", "labels": {"a": "b"}}}),
        json!({"metadata": {"namespace": "kube-system", "labels": {"a": "b"}}}),
        json!({"metadata": {"name": "web", "namespace": "team-a"}}),
        json!({}),
    ]);
    let ops = prop::sample::select(vec![
        json!([{"op": "add", "path": "/metadata/labels/a", "value": "b"}]),
        json!([{"op": "move", "from": "/spec/replicas", "path": "/metadata/labels/a"}]),
        json!([{"op": "replace", "path": "/metadata/name", "value": "other"}]),
        json!([]),
    ]);
    prop_oneof![
        (
            prop::sample::select(vec![
                PatchType::Merge,
                PatchType::Strategic,
                PatchType::Apply
            ]),
            object
        ),
        ops.prop_map(|o| (PatchType::Json, o)),
    ]
}

fn any_ref() -> impl Strategy<Value = ObjectRef> {
    (any_kind(), any_namespace(), any_name()).prop_map(|((api_version, kind), namespace, name)| {
        ObjectRef {
            api_version,
            kind,
            namespace,
            name,
        }
    })
}

fn any_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (any_ref(), any_subresource(), any_body()).prop_map(|(target, subresource, (patch_type, body))| {
            Action::Patch { target, patch_type, subresource, body }
        }),
        2 => (any_ref(), any::<bool>(), prop::sample::select(vec![
            json!({"labels": {"a": "b"}}), json!({}), json!({"annotations": {"x": "y"}}),
        ])).prop_map(|(r, generate, extra)| {
            let mut metadata = extra;
            if generate {
                metadata["generateName"] = json!(r.name);
            } else {
                metadata["name"] = json!(r.name);
            }
            if let Some(ns) = r.namespace {
                metadata["namespace"] = json!(ns);
            }
            Action::Create {
                manifest: json!({"apiVersion": r.api_version, "kind": r.kind,
                    "metadata": metadata, "data": {"k": "v"}}),
            }
        }),
        2 => any_ref().prop_map(|target| Action::Delete { target }),
        2 => any_ref().prop_map(|regarding| Action::Event {
            regarding,
            event_type: EventType::Normal,
            reason: "Probed".into(),
            message: "m".into(),
            event_action: "Reconcile".into(),
        }),
    ]
}

/// A policy: some namespaces, `all`, the cluster-scope grant, per known kind some verbs and
/// field patterns; now and then no policy at all (every verb on every kind, dry-run).
fn any_grants() -> impl Strategy<Value = Grants> {
    let verbs = prop::sample::subsequence(
        vec!["patch", "patch-status", "create", "delete", "event"],
        0..=5,
    );
    let fields = prop::sample::subsequence(vec!["/metadata/labels", "/spec", "/data", "/"], 0..=2);
    let rules = prop::collection::vec((verbs, fields), KINDS.len());
    let names = prop::sample::subsequence(vec!["team-a", "team-b"], 0..=2);
    prop_oneof![
        9 => (names, any::<bool>(), any::<bool>(), rules).prop_map(|(names, all, cluster, rules)| {
            let rules: Vec<Value> = KINDS
                .iter()
                .zip(rules)
                .map(|((v, k, _), (verbs, fields))| {
                    json!({"apiVersion": v, "kind": k, "verbs": verbs, "fields": fields})
                })
                .collect();
            let spec: GrantsSpec = serde_json::from_value(json!({
                "namespaces": {"names": names, "all": all, "clusterScoped": cluster},
                "rules": rules,
            }))
            .expect("a valid spec");
            Grants::from_spec(&spec).expect("valid patterns")
        }),
        1 => Just(Grants::unconfigured()),
    ]
}

/// The verb the request needs on the action's kind.
fn verb_of(action: &Action) -> Verb {
    match action {
        Action::Patch { subresource, .. } if subresource.as_deref() == Some("status") => {
            Verb::PatchStatus
        }
        Action::Patch { .. } => Verb::Patch,
        Action::Create { .. } => Verb::Create,
        Action::Delete { .. } => Verb::Delete,
        Action::Event { .. } | Action::Log { .. } | Action::RequeueAfter { .. } => Verb::Event,
    }
}

/// What the kind's collection is called (discovery's plural, here made up).
fn resource_of(kind: &KindRef) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind),
        &format!("{}s", kind.kind.to_lowercase()),
    )
}

fn assert_inside_grant(grants: &Grants, action: &Action) -> Result<(), TestCaseError> {
    let kind = kind_of(action).expect("a write");
    let scope = scope_of(&kind)
        .map_err(|e| TestCaseError::fail(format!("allowed an unknown kind: {e}")))?;
    let target = request_target(action, scope)
        .map_err(|e| TestCaseError::fail(format!("allowed but unresolvable: {e}")))?
        .expect("a write has a target");
    // The collection: the kind's own, or Events for an event.
    let (expected_resource, expected_method) = match action {
        Action::Patch { .. } => (Resource::Kind(kind.clone()), Method::Patch),
        Action::Create { .. } => (Resource::Kind(kind.clone()), Method::Post),
        Action::Delete { .. } => (Resource::Kind(kind.clone()), Method::Delete),
        Action::Event { .. } | Action::Log { .. } | Action::RequeueAfter { .. } => {
            (Resource::Events, Method::Post)
        }
    };
    prop_assert_eq!(&target.resource, &expected_resource);
    prop_assert_eq!(target.method, expected_method);
    // Where: a granted namespace of a namespaced kind, or the cluster with the cluster grant
    // (an event about a cluster-scoped object: in `default`, under the cluster grant).
    match (&target.namespace, scope, &target.resource) {
        (Some(ns), Scope::Namespaced, _) => {
            prop_assert!(grants.namespaces.allows(Some(ns)), "{ns}")
        }
        (Some(ns), Scope::Cluster, Resource::Events) => {
            prop_assert_eq!(ns.as_str(), CLUSTER_EVENT_NAMESPACE);
            prop_assert!(grants.cluster_scoped);
        }
        (None, Scope::Cluster, Resource::Kind(_)) => prop_assert!(grants.cluster_scoped),
        other => prop_assert!(false, "{other:?} is outside any grant"),
    }
    // What: the verb on this kind.
    if let Rules::Only(rules) = &grants.rules {
        let rule = rules.get(&kind);
        prop_assert!(rule.is_some_and(|r| r.verbs.contains(&verb_of(action))));
    }
    // The name and subresource are Kubernetes' and need no escaping; the path is plain.
    for segment in [&target.namespace, &target.name, &target.subresource]
        .into_iter()
        .flatten()
    {
        prop_assert_eq!(
            path_segment(segment).map_err(|e| TestCaseError::fail(e.to_string()))?,
            segment.as_str()
        );
    }
    if let Some(name) = &target.name {
        prop_assert!(names::object_name(kind.group(), &kind.kind, name).is_ok());
    }
    if let Some(sub) = &target.subresource {
        prop_assert!(names::SUBRESOURCES.contains(&sub.as_str()));
    }
    let path = target
        .path(&resource_of(&kind))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    prop_assert!(
        segments
            .iter()
            .all(|s| !s.is_empty() && *s != "." && *s != ".." && !s.contains(['?', '#', '%'])),
        "{path}"
    );
    // `/api/<v>` or `/apis/<group>/<v>`, then `namespaces/<ns>` exactly when namespaced,
    // the collection, the name, the subresource: nothing more.
    let (base, plural) = match &target.resource {
        Resource::Kind(k) => (
            if k.group().is_empty() { 2 } else { 3 },
            resource_of(k).plural,
        ),
        Resource::Events => (3, "events".to_string()),
    };
    let mut rest: Vec<&str> = segments[base..].to_vec();
    if let Some(ns) = &target.namespace {
        prop_assert_eq!(&rest[..2], &["namespaces", ns.as_str()][..], "{}", path);
        rest.drain(..2);
    }
    let mut expected = vec![plural.as_str()];
    expected.extend(target.name.as_deref());
    expected.extend(target.subresource.as_deref());
    prop_assert_eq!(rest, expected, "{}", path);
    // A patch body naming an object names this one.
    if let Action::Patch {
        target: r, body, ..
    } = action
    {
        if let Some(n) = body.pointer("/metadata/name") {
            prop_assert_eq!(n.as_str(), Some(r.name.as_str()));
        }
        if let Some(n) = body.pointer("/metadata/namespace") {
            prop_assert_eq!(n.as_str(), r.namespace.as_deref());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    #[test]
    fn allowed_actions_resolve_inside_the_grant(
        grants in any_grants(),
        actions in prop::collection::vec(any_action(), 1..4),
    ) {
        if validate_actions(&actions, OutputLimits::default()).is_err() {
            return Ok(());
        }
        let checks = check_call(&grants, &actions, &scope_of);
        for (action, check) in actions.iter().zip(checks) {
            if check.is_ok() {
                assert_inside_grant(&grants, action)?;
            }
        }
    }
}

/// The generators reach the interesting cases: some calls are allowed, cluster-scoped ones
/// among them, and some are refused at each stage (otherwise the property says little).
#[test]
fn the_generators_cover_allowed_and_refused_actions() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut invalid, mut denied, mut allowed, mut allowed_cluster) = (0, 0, 0, 0);
    for _ in 0..2000 {
        let grants = any_grants().new_tree(&mut runner).unwrap().current();
        let action = any_action().new_tree(&mut runner).unwrap().current();
        if validate_actions(std::slice::from_ref(&action), OutputLimits::default()).is_err() {
            invalid += 1;
            continue;
        }
        let check = check_call(&grants, std::slice::from_ref(&action), &scope_of).remove(0);
        match check {
            Err(_) => denied += 1,
            Ok(()) => {
                allowed += 1;
                let kind = kind_of(&action).unwrap();
                if scope_of(&kind) == Ok(Scope::Cluster) {
                    allowed_cluster += 1;
                }
            }
        }
    }
    assert!(
        invalid > 100 && denied > 100 && allowed > 50 && allowed_cluster > 5,
        "invalid {invalid}, denied {denied}, allowed {allowed} (cluster {allowed_cluster})"
    );
}
