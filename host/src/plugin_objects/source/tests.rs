use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, Time};
use kube::api::ObjectMeta;
use serde_json::Value;

fn plugin(
    namespace: &str,
    name: &str,
    created: Option<&str>,
    generation: Option<i64>,
) -> Arc<DynamicObject> {
    Arc::new(DynamicObject {
        types: None,
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            resource_version: Some("7".into()),
            creation_timestamp: created.map(|t| Time(t.parse().unwrap())),
            generation,
            ..ObjectMeta::default()
        },
        data: serde_json::json!({}),
    })
}

fn names(plugins: &[Arc<DynamicObject>]) -> Vec<String> {
    plugins
        .iter()
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
        .collect()
}

/// The kinds the source watches and writes are the ones the CRDs the host installs define:
/// the group, the served version, the kind and the plural of each.
#[test]
fn the_kinds_are_the_ones_the_crds_define() {
    for (resource, crd) in [
        (
            plugin_resource(),
            include_str!("../../../deploy/crds/plugins.yaml"),
        ),
        (
            policy_resource(),
            include_str!("../../../deploy/crds/pluginpolicies.yaml"),
        ),
    ] {
        let docs = crate::manifest::parse_documents(crd, "crd").unwrap();
        let spec = &docs[0]["spec"];
        assert_eq!(spec["group"], resource.group.as_str());
        assert_eq!(spec["names"]["kind"], resource.kind.as_str());
        assert_eq!(spec["names"]["plural"], resource.plural.as_str());
        let versions = spec["versions"].as_array().unwrap();
        assert!(
            versions
                .iter()
                .any(|v| v["name"] == resource.version.as_str() && v["served"] == Value::Bool(true)),
            "{} {}: not served by its CRD",
            resource.kind,
            resource.version
        );
        assert_eq!(resource.api_version, format!("{GROUP}/{VERSION}"));
    }
}

/// The source starts following only once the API server serves both kinds (a status
/// subresource alone is not its kind).
#[test]
fn both_kinds_must_be_served() {
    let list = |names: &[&str]| APIResourceList {
        group_version: format!("{GROUP}/{VERSION}"),
        resources: names
            .iter()
            .map(|n| APIResource {
                name: n.to_string(),
                ..APIResource::default()
            })
            .collect(),
    };
    assert!(serves_both(&list(&[
        "plugins",
        "plugins/status",
        "pluginpolicies"
    ])));
    assert!(!serves_both(&list(&["plugins", "plugins/status"])));
    assert!(!serves_both(&list(&["pluginpolicies", "plugins/status"])));
    assert!(!serves_both(&list(&[])));
}

/// A watch event wakes a pass when something may have changed: not the relist's start nor
/// each object it lists again (its end does), and not the host's own status write come
/// back, once; a deletion always does.
#[test]
fn a_pass_is_woken_by_changes_not_by_a_relist_or_its_own_writes() {
    let echoes = Echoes::default();
    let obj = plugin("team-a", "p", None, None);
    assert!(!wakes(&Event::Init, &echoes));
    assert!(!wakes(&Event::InitApply((*obj).clone()), &echoes));
    assert!(wakes(&Event::InitDone, &echoes));
    assert!(wakes(&Event::Apply((*obj).clone()), &echoes));
    echoes.expect("team-a", "p", "7".into());
    assert!(
        !wakes(&Event::Apply((*obj).clone()), &echoes),
        "its own write"
    );
    assert!(
        wakes(&Event::Apply((*obj).clone()), &echoes),
        "the echo is used up"
    );
    echoes.expect("team-a", "p", "7".into());
    assert!(wakes(&Event::Delete((*obj).clone()), &echoes));
}

/// The oldest Plugins get the host's slots: sorted by creation time, then namespace and
/// name (a Plugin without a creation time, which the API server always sets, comes first).
#[test]
fn plugins_are_taken_oldest_first() {
    let mut plugins = vec![
        plugin("b", "new", Some("2026-03-01T00:00:00Z"), None),
        plugin("b", "old", Some("2026-01-01T00:00:00Z"), None),
        plugin("a", "tie", Some("2026-02-01T00:00:00Z"), None),
        plugin("a", "same", Some("2026-02-01T00:00:00Z"), None),
        plugin("z", "untimed", None, None),
    ];
    oldest_first(&mut plugins);
    assert_eq!(
        names(&plugins),
        ["z/untimed", "b/old", "a/same", "a/tie", "b/new"]
    );
}

/// What a pass remembers per Plugin is keyed by `namespace/name`, at its generation.
#[test]
fn generations_by_namespace_and_name() {
    let plugins = [
        plugin("team-a", "p", None, Some(3)),
        plugin("team-b", "p", None, None),
    ];
    let generations = generations(plugins.iter().map(|o| &**o));
    assert_eq!(
        generations,
        HashMap::from([("team-a/p".to_string(), 3), ("team-b/p".to_string(), 0)])
    );
}

/// A module built for another contract, or not a plugin, is refused as unsupported (a
/// rebuild with another SDK mends it); one that is not a component at all as failing to
/// compile. The loader's words are the message.
#[test]
fn a_module_for_another_contract_is_unsupported_any_other_failure_does_not_compile() {
    let origin = || "ConfigMap team-a/m".to_string();
    let unsupported = [
        LoadError::ContractMismatch {
            origin: origin(),
            found: "0.9.0".into(),
            supported: "0.1.0".into(),
        },
        LoadError::NotAPlugin {
            origin: origin(),
            exports: "wasi:cli/run".into(),
        },
    ];
    for err in unsupported {
        let message = err.to_string();
        let refusal = load_refusal(err);
        assert_eq!(refusal.reason, Reason::ContractUnsupported);
        assert_eq!(refusal.message, message);
    }
    for err in [
        LoadError::NotWasm { origin: origin() },
        LoadError::NotAComponent { origin: origin() },
    ] {
        assert_eq!(load_refusal(err).reason, Reason::CompileFailed);
    }
}

/// Times written to status are whole seconds in UTC, as Kubernetes writes them.
#[test]
fn now_is_to_the_second() {
    let now = now();
    let t: k8s_openapi::jiff::Timestamp = now.parse().unwrap();
    assert_eq!(t.subsec_nanosecond(), 0, "{now}");
    assert_eq!(now.len(), "2026-01-02T03:04:05Z".len(), "{now}");
    assert!(now.ends_with('Z'), "{now}");
}
