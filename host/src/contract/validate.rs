//! Checks on what a plugin returns, before anything else looks at it: bounded in number and
//! size, patch bodies and manifests valid JSON of the right shape, references complete.

use super::event_fields::EventFieldError;
use super::names::{self, NameError};
use super::{Action, ObjectRef};
use serde_json::Value;

/// Bounds on one call's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// At most this many actions per call.
    pub max_actions: usize,
    /// At most this many bytes of text (bodies, manifests, messages) per call.
    pub max_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_actions: 1000,
            max_bytes: 4 << 20,
        }
    }
}

/// Why a call's output was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputViolation {
    /// More actions than the policy's `maxActions`.
    #[error("returned {count} actions, more than the limit of {limit}")]
    TooManyActions {
        /// Actions returned.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// More bytes of actions than allowed.
    #[error("returned {bytes} bytes of actions, more than the limit of {limit}")]
    TooLarge {
        /// Bytes returned.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// One action does not hold together (bad JSON, missing field, bad name, ...).
    #[error("action {index} ({action}): {reason}")]
    Invalid {
        /// Its position in the list, from 0.
        index: usize,
        /// Its verb.
        action: &'static str,
        /// What is wrong with it.
        reason: ActionFault,
    },
}

/// What is wrong with one action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionFault {
    /// A JSON text it carries does not parse.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// A name, namespace, kind, apiVersion or subresource Kubernetes would refuse.
    #[error(transparent)]
    Name(#[from] NameError),
    /// An Event's reason or action that is not CamelCase.
    #[error(transparent)]
    EventField(#[from] EventFieldError),
    /// An empty namespace where cluster-scoped objects omit it.
    #[error("empty {0} (omit it for cluster-scoped objects)")]
    EmptyNamespace(&'static str),
    /// A manifest that is not a JSON object, or whose metadata is not one.
    #[error("{0} must be a JSON object")]
    NotAnObject(&'static str),
    /// A manifest field that must be a string.
    #[error("{0} must be a string")]
    NotAString(String),
    /// A manifest without apiVersion or kind.
    #[error("a manifest needs apiVersion and kind")]
    NoKind,
    /// A manifest without a name or generateName.
    #[error("a manifest needs metadata.name or metadata.generateName")]
    NoName,
    /// A patch body naming another object than its target.
    #[error("the body's metadata.{0} is not the target's {0}")]
    OtherObject(&'static str),
    /// A JSON patch that is not a list of operations.
    #[error("a JSON patch must be an array of operations")]
    JsonPatchNotArray,
    /// A merge or strategic patch that is not an object.
    #[error("a patch body must be a JSON object")]
    PatchNotObject,
}

/// Parses a JSON text an action carries, naming the action when it is not JSON.
pub(crate) fn parse_json(
    index: usize,
    action: &'static str,
    text: &str,
) -> Result<Value, OutputViolation> {
    serde_json::from_str(text).map_err(|e| OutputViolation::Invalid {
        index,
        action,
        reason: ActionFault::Json(e.to_string()),
    })
}

/// Checks the count and total size first (cheap, before any parsing), then every action.
pub fn validate_actions(actions: &[Action], limits: OutputLimits) -> Result<(), OutputViolation> {
    if actions.len() > limits.max_actions {
        return Err(OutputViolation::TooManyActions {
            count: actions.len(),
            limit: limits.max_actions,
        });
    }
    for (index, action) in actions.iter().enumerate() {
        check_action(action).map_err(|reason| OutputViolation::Invalid {
            index,
            action: action.kind(),
            reason,
        })?;
    }
    Ok(())
}

/// A reference's apiVersion, kind, namespace and name, as Kubernetes accepts them: each of
/// them ends up in a URL (discovery, the object's path), so nothing else gets through.
fn check_ref(r: &ObjectRef) -> Result<(), ActionFault> {
    check_kind(&r.api_version, &r.kind)?;
    if let Some(ns) = &r.namespace {
        if ns.is_empty() {
            return Err(ActionFault::EmptyNamespace("namespace"));
        }
        names::dns_label("namespace", ns)?;
    }
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Ok(names::object_name(group, &r.kind, &r.name)?)
}

fn check_kind(api_version: &str, kind: &str) -> Result<(), NameError> {
    names::api_version(api_version)?;
    names::kind(kind)
}

/// A string field of a manifest: absent, or a string.
fn manifest_str<'a>(manifest: &'a Value, pointer: &str) -> Result<Option<&'a str>, ActionFault> {
    match manifest.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ActionFault::NotAString(pointer[1..].replace('/', "."))),
    }
}

/// A manifest to create: an object with apiVersion, kind and metadata.name or
/// metadata.generateName, all as Kubernetes accepts them.
fn check_manifest(manifest: &Value) -> Result<(), ActionFault> {
    if !manifest.is_object() {
        return Err(ActionFault::NotAnObject("a manifest"));
    }
    if manifest.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ActionFault::NotAnObject("metadata"));
    }
    let api_version = manifest_str(manifest, "/apiVersion")?.unwrap_or("");
    let kind = manifest_str(manifest, "/kind")?.unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(ActionFault::NoKind);
    }
    check_kind(api_version, kind)?;
    let name = manifest_str(manifest, "/metadata/name")?;
    let generate = manifest_str(manifest, "/metadata/generateName")?;
    if name.unwrap_or("").is_empty() && generate.unwrap_or("").is_empty() {
        return Err(ActionFault::NoName);
    }
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        names::object_name(group, kind, name)?;
    }
    if let Some(prefix) = generate.filter(|g| !g.is_empty()) {
        names::generate_name(prefix)?;
    }
    if let Some(ns) = manifest_str(manifest, "/metadata/namespace")? {
        if ns.is_empty() {
            return Err(ActionFault::EmptyNamespace("metadata.namespace"));
        }
        names::dns_label("metadata.namespace", ns)?;
    }
    Ok(())
}

/// A patch body may not name another object than its target: `metadata.name` and
/// `metadata.namespace`, where the body sets them, are the target's.
fn check_body_names(target: &ObjectRef, body: &Value) -> Result<(), ActionFault> {
    let Some(metadata) = body.get("metadata") else {
        return Ok(());
    };
    if let Some(name) = metadata.get("name")
        && name.as_str() != Some(target.name.as_str())
    {
        return Err(ActionFault::OtherObject("name"));
    }
    if let Some(ns) = metadata.get("namespace")
        && ns.as_str() != target.namespace.as_deref()
    {
        return Err(ActionFault::OtherObject("namespace"));
    }
    Ok(())
}

fn check_action(action: &Action) -> Result<(), ActionFault> {
    match action {
        Action::Patch {
            target,
            body,
            patch_type,
            subresource,
        } => {
            check_ref(target)?;
            if let Some(sub) = subresource {
                names::subresource(sub)?;
            }
            match (patch_type, body) {
                (super::PatchType::Json, Value::Array(_)) => Ok(()),
                (super::PatchType::Json, _) => Err(ActionFault::JsonPatchNotArray),
                (_, Value::Object(_)) => check_body_names(target, body),
                _ => Err(ActionFault::PatchNotObject),
            }
        }
        Action::Create { manifest } => check_manifest(manifest),
        Action::Delete { target } => check_ref(target),
        Action::Event {
            regarding,
            reason,
            event_action,
            ..
        } => {
            check_ref(regarding)?;
            super::event_fields::check_camel_case("reason", reason)?;
            Ok(super::event_fields::check_camel_case(
                "action",
                event_action,
            )?)
        }
        Action::Log { .. } | Action::RequeueAfter { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::PatchType;
    use serde_json::json;

    fn target() -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        }
    }

    fn patch(patch_type: PatchType, body: Value) -> Action {
        Action::Patch {
            target: target(),
            patch_type,
            subresource: None,
            body,
        }
    }

    #[test]
    fn counts_actions_against_the_limit() {
        let many = vec![Action::RequeueAfter { after_ms: 1 }; 11];
        let limits = OutputLimits {
            max_actions: 10,
            max_bytes: 1000,
        };
        assert_eq!(
            validate_actions(&many, limits),
            Err(OutputViolation::TooManyActions {
                count: 11,
                limit: 10
            })
        );
        assert!(validate_actions(&many[..10], limits).is_ok());
    }

    #[test]
    fn json_patches_are_arrays_and_other_patches_objects() {
        let limits = OutputLimits::default();
        assert!(validate_actions(&[patch(PatchType::Json, json!([]))], limits).is_ok());
        assert!(validate_actions(&[patch(PatchType::Json, json!({}))], limits).is_err());
        assert!(validate_actions(&[patch(PatchType::Merge, json!([1]))], limits).is_err());
        assert!(validate_actions(&[patch(PatchType::Strategic, json!({"a": 1}))], limits).is_ok());
    }

    #[test]
    fn manifests_need_kind_and_name() {
        let limits = OutputLimits::default();
        let ok = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(validate_actions(&[Action::Create { manifest: ok }], limits).is_ok());
        let nameless = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        let err = validate_actions(&[Action::Create { manifest: nameless }], limits).unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }

    #[test]
    fn references_must_be_complete() {
        let mut t = target();
        t.name.clear();
        let err = validate_actions(&[Action::Delete { target: t }], OutputLimits::default());
        assert!(matches!(
            err,
            Err(OutputViolation::Invalid {
                index: 0,
                action: "delete",
                reason: ActionFault::Name(NameError::ObjectName {
                    path_segment: false,
                    ..
                }),
            })
        ));
    }

    #[test]
    fn invalid_json_names_the_action() {
        let err = parse_json(3, "patch", "{not json").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("action 3 (patch): invalid JSON"),
            "{err}"
        );
    }

    fn refused(action: Action) -> String {
        validate_actions(&[action], OutputLimits::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn hostile_names_are_invalid_output_for_every_action() {
        for bad in [
            "x?fieldManager=kube-controller-manager&a=",
            "x/../../../demo/deployments/web",
            "..",
            "a b",
            "Web",
        ] {
            let mut t = target();
            t.name = bad.into();
            for action in [
                Action::Delete { target: t.clone() },
                patch(PatchType::Merge, json!({})),
                Action::Event {
                    regarding: t.clone(),
                    event_type: crate::contract::EventType::Normal,
                    reason: "R".into(),
                    message: "m".into(),
                    event_action: "Reconcile".into(),
                },
            ] {
                let action = match action {
                    Action::Patch {
                        patch_type, body, ..
                    } => Action::Patch {
                        target: t.clone(),
                        patch_type,
                        subresource: None,
                        body,
                    },
                    other => other,
                };
                let err = refused(action);
                assert!(err.contains("DNS-1123 subdomain"), "{bad}: {err}");
            }
            let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": bad, "namespace": "default"}});
            assert!(
                refused(Action::Create { manifest }).contains("DNS-1123"),
                "{bad}"
            );
        }
    }

    #[test]
    fn namespaces_must_be_dns_labels() {
        for bad in ["team-a/../team-b", "Team", "a.b", "", &"a".repeat(64)] {
            let mut t = target();
            t.namespace = Some(bad.into());
            assert!(
                validate_actions(&[Action::Delete { target: t }], OutputLimits::default()).is_err(),
                "{bad:?}"
            );
            let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": bad}});
            assert!(
                validate_actions(&[Action::Create { manifest }], OutputLimits::default()).is_err(),
                "{bad:?}"
            );
        }
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": 7}});
        assert!(refused(Action::Create { manifest }).contains("must be a string"));
    }

    #[test]
    fn subresources_are_status_or_scale() {
        let with = |sub: &str| Action::Patch {
            target: target(),
            patch_type: PatchType::Merge,
            subresource: Some(sub.into()),
            body: json!({}),
        };
        assert!(validate_actions(&[with("status")], OutputLimits::default()).is_ok());
        assert!(validate_actions(&[with("scale")], OutputLimits::default()).is_ok());
        for bad in [
            "x?fieldManager=kube-controller-manager&a=",
            "x/../../../demo/deployments/web",
            "exec",
            "",
        ] {
            assert!(refused(with(bad)).contains("subresource"), "{bad:?}");
        }
    }

    #[test]
    fn generate_names_kinds_and_api_versions_are_checked() {
        let create = |m: Value| refused(Action::Create { manifest: m });
        let err = create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "x/../y-", "namespace": "default"}}));
        assert!(err.contains("generateName"), "{err}");
        let err = create(json!({"apiVersion": "../v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}}));
        assert!(err.contains("apiVersion"), "{err}");
        let err = create(json!({"apiVersion": "v1", "kind": "Config Map",
            "metadata": {"name": "c"}}));
        assert!(err.contains("kind"), "{err}");
        let mut t = target();
        t.api_version = "apps/v1/../../api".into();
        assert!(refused(Action::Delete { target: t }).contains("apiVersion"));
        let ok = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "web-", "namespace": "default"}});
        assert!(
            validate_actions(&[Action::Create { manifest: ok }], OutputLimits::default()).is_ok()
        );
    }

    #[test]
    fn a_patch_body_cannot_name_another_object() {
        let err = refused(patch(
            PatchType::Apply,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "other", "namespace": "default"}}),
        ));
        assert!(err.contains("metadata.name"), "{err}");
        let err = refused(patch(
            PatchType::Merge,
            json!({"metadata": {"namespace": "kube-system"}}),
        ));
        assert!(err.contains("metadata.namespace"), "{err}");
        let same = patch(
            PatchType::Apply,
            json!({"metadata": {"name": "web", "namespace": "default"}}),
        );
        assert!(validate_actions(&[same], OutputLimits::default()).is_ok());
    }

    #[test]
    fn a_huge_name_is_not_repeated_in_the_error() {
        let mut t = target();
        t.name = format!("x\n{}", "y".repeat(10 << 20));
        let err = refused(Action::Delete { target: t });
        assert!(err.len() < 4096, "{} bytes", err.len());
    }
}
