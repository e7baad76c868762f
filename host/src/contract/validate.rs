//! Checks on what a plugin returns, before anything else looks at it: bounded in number and
//! size, patch bodies and manifests valid JSON of the right shape, references complete.

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
    #[error("returned {count} actions, more than the limit of {limit}")]
    TooManyActions { count: usize, limit: usize },
    #[error("returned {bytes} bytes of actions, more than the limit of {limit}")]
    TooLarge { bytes: usize, limit: usize },
    #[error("action {index} ({action}): {reason}")]
    Invalid {
        index: usize,
        action: &'static str,
        reason: String,
    },
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
        reason: format!("invalid JSON: {e}"),
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

fn check_ref(r: &ObjectRef) -> Result<(), String> {
    if r.api_version.is_empty() || r.kind.is_empty() || r.name.is_empty() {
        return Err(format!("incomplete object reference {r:?}"));
    }
    if r.namespace.as_deref() == Some("") {
        return Err("empty namespace (omit it for cluster-scoped objects)".into());
    }
    Ok(())
}

fn check_action(action: &Action) -> Result<(), String> {
    match action {
        Action::Patch {
            target,
            body,
            patch_type,
            subresource,
        } => {
            check_ref(target)?;
            if subresource.as_deref() == Some("") {
                return Err("empty subresource".into());
            }
            match (patch_type, body) {
                (super::PatchType::Json, Value::Array(_)) => Ok(()),
                (super::PatchType::Json, _) => {
                    Err("a JSON patch must be an array of operations".into())
                }
                (_, Value::Object(_)) => Ok(()),
                _ => Err("a patch body must be a JSON object".into()),
            }
        }
        Action::Create { manifest } => {
            let field = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
            if field("/apiVersion").is_empty() || field("/kind").is_empty() {
                return Err("a manifest needs apiVersion and kind".into());
            }
            if field("/metadata/name").is_empty() && field("/metadata/generateName").is_empty() {
                return Err("a manifest needs metadata.name or metadata.generateName".into());
            }
            Ok(())
        }
        Action::Delete { target } => check_ref(target),
        Action::Event {
            regarding,
            reason,
            event_action,
            ..
        } => {
            check_ref(regarding)?;
            super::event_fields::check_camel_case("reason", reason)?;
            super::event_fields::check_camel_case("action", event_action)
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
                ..
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
}
