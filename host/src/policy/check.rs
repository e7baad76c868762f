//! Checking one action against a plugin's grants, before any API call.

use super::document::Verb;
use super::grants::{Grants, Rules};
use super::paths::{self, FieldPath};
use crate::contract::{Action, KindRef, PatchType};
use serde::Serialize;
use serde_json::Value;

/// Which grant an action lacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grant {
    Namespaces,
    Verbs,
    Fields,
    /// Another action of the same call was denied (all-or-nothing per call).
    Call,
}

impl Grant {
    /// The name in audit records and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Namespaces => "namespaces",
            Grant::Verbs => "verbs",
            Grant::Fields => "fields",
            Grant::Call => "call",
        }
    }
}

/// Why an action was denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("denied by {}: {reason}", grant.as_str())]
pub struct Denial {
    pub grant: Grant,
    pub reason: String,
}

fn deny(grant: Grant, reason: String) -> Result<(), Denial> {
    Err(Denial { grant, reason })
}

/// Whether `action` is an API write (logs and requeues are not).
pub fn is_write(action: &Action) -> bool {
    !matches!(action, Action::Log { .. } | Action::RequeueAfter { .. })
}

impl Grants {
    /// Checks one action: its namespace, its verb on its kind, and the field paths it sets.
    /// Logs and requeues are always allowed.
    pub fn check(&self, action: &Action) -> Result<(), Denial> {
        match action {
            Action::Log { .. } | Action::RequeueAfter { .. } => Ok(()),
            Action::Patch {
                target,
                patch_type,
                subresource,
                body,
            } => {
                self.check_namespace(target.namespace.as_deref())?;
                let status = subresource.as_deref() == Some("status");
                let verb = if status {
                    Verb::PatchStatus
                } else {
                    Verb::Patch
                };
                let touched = match patch_type {
                    PatchType::Merge => paths::merge_patch_paths(body),
                    PatchType::Json => paths::json_patch_paths(body).map_err(|e| Denial {
                        grant: Grant::Fields,
                        reason: format!("unreadable JSON patch: {e}"),
                    })?,
                    PatchType::Strategic => paths::strategic_patch_paths(body),
                    PatchType::Apply => paths::apply_paths(body),
                };
                self.check_write(&target.kind_ref(), verb, &touched, status)
            }
            Action::Create { manifest } => {
                let kind = KindRef::new(
                    manifest["apiVersion"].as_str().unwrap_or_default(),
                    manifest["kind"].as_str().unwrap_or_default(),
                );
                self.check_namespace(
                    manifest
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str),
                )?;
                self.check_write(&kind, Verb::Create, &paths::create_paths(manifest), false)
            }
            Action::Delete { target } => {
                self.check_namespace(target.namespace.as_deref())?;
                self.check_write(&target.kind_ref(), Verb::Delete, &[], false)
            }
            Action::Event { regarding, .. } => {
                self.check_namespace(regarding.namespace.as_deref())?;
                self.check_write(&regarding.kind_ref(), Verb::Event, &[], false)
            }
        }
    }

    fn check_namespace(&self, namespace: Option<&str>) -> Result<(), Denial> {
        if self.namespaces.allows(namespace) {
            return Ok(());
        }
        deny(
            Grant::Namespaces,
            match namespace {
                Some(ns) => format!("namespace {ns:?} is not granted"),
                None => "cluster-scoped objects need all namespaces granted".into(),
            },
        )
    }

    /// `verb` on `kind`, setting `touched` paths (`status`: the status subresource, whose
    /// `/status/...` paths the `patch-status` verb grants).
    fn check_write(
        &self,
        kind: &KindRef,
        verb: Verb,
        touched: &[FieldPath],
        status: bool,
    ) -> Result<(), Denial> {
        let rules = match &self.rules {
            Rules::Any => return Ok(()),
            Rules::Only(rules) => rules,
        };
        let Some(rule) = rules.get(kind).filter(|r| r.verbs.contains(&verb)) else {
            return deny(
                Grant::Verbs,
                format!("verb {} on {kind} is not granted", verb.as_str()),
            );
        };
        for path in touched {
            let status_path = status && path.0.first().is_some_and(|s| s == "status");
            if !status_path && !rule.fields.iter().any(|f| f.grants(path)) {
                return deny(
                    Grant::Fields,
                    format!("field {path} of {kind} is not granted"),
                );
            }
        }
        Ok(())
    }
}

/// Checks every action of a call. All-or-nothing: if any action is denied, every API write
/// of the call is denied too (the others with [`Grant::Call`]); logs and requeues stay
/// allowed.
pub fn check_call(grants: &Grants, actions: &[Action]) -> Vec<Result<(), Denial>> {
    let mut results: Vec<_> = actions.iter().map(|a| grants.check(a)).collect();
    if let Some(first) = results.iter().position(Result::is_err) {
        for (r, a) in results.iter_mut().zip(actions) {
            if r.is_ok() && is_write(a) {
                *r = deny(
                    Grant::Call,
                    format!("action {first} of the same call was denied"),
                );
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{EventType, LogLevel, ObjectRef};
    use crate::policy::document::PolicySpec;
    use serde_json::json;

    fn grants() -> Grants {
        let spec: PolicySpec = serde_json::from_value(json!({
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

    fn grant_of(r: Result<(), Denial>) -> Option<Grant> {
        r.err().map(|d| d.grant)
    }

    #[test]
    fn namespaces_are_checked_for_every_write() {
        let g = grants();
        let image =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert_eq!(
            grant_of(g.check(&patch("a", PatchType::Strategic, image.clone()))),
            None
        );
        assert_eq!(
            grant_of(g.check(&patch("b", PatchType::Strategic, image))),
            Some(Grant::Namespaces)
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "b"}, "data": {"k": "v"}});
        assert_eq!(
            grant_of(g.check(&Action::Create { manifest: cm })),
            Some(Grant::Namespaces)
        );
    }

    #[test]
    fn verbs_are_checked_per_kind() {
        let g = grants();
        assert_eq!(
            grant_of(g.check(&Action::Delete {
                target: deploy("a")
            })),
            Some(Grant::Verbs)
        );
        let cm = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("a".into()),
            name: "c".into(),
        };
        assert_eq!(
            grant_of(g.check(&Action::Delete { target: cm.clone() })),
            None
        );
        let event = |regarding| Action::Event {
            regarding,
            event_type: EventType::Normal,
            reason: "R".into(),
            message: "m".into(),
            event_action: "Reconcile".into(),
        };
        assert_eq!(grant_of(g.check(&event(deploy("a")))), None);
        assert_eq!(grant_of(g.check(&event(cm))), Some(Grant::Verbs));
        let status = Action::Patch {
            target: deploy("a"),
            patch_type: PatchType::Merge,
            subresource: Some("status".into()),
            body: json!({"status": {"phase": "x"}}),
        };
        assert_eq!(grant_of(g.check(&status)), None);
    }

    #[test]
    fn fields_are_checked_for_every_patch_type_and_create() {
        let g = grants();
        let check = |t, body| grant_of(g.check(&patch("a", t, body)));
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
        assert_eq!(grant_of(g.check(&cm(json!({"k": "v"})))), None);
        let mut labelled = cm(json!({}));
        if let Action::Create { manifest } = &mut labelled {
            manifest["metadata"]["labels"] = json!({"x": "y"});
        }
        assert_eq!(grant_of(g.check(&labelled)), Some(Grant::Fields));
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
        let results = check_call(&g, &actions);
        assert_eq!(grant_of(results[0].clone()), Some(Grant::Call));
        assert!(results[1].is_ok());
        assert_eq!(grant_of(results[2].clone()), Some(Grant::Namespaces));
        let ok = check_call(&g, &actions[..2]);
        assert!(ok.iter().all(Result::is_ok));
    }

    #[test]
    fn unconfigured_grants_allow_everything_for_dry_run() {
        let g = Grants::unconfigured();
        assert!(
            g.check(&Action::Delete {
                target: deploy("any")
            })
            .is_ok()
        );
    }
}
