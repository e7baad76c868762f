//! Checking one action against a plugin's grants, before any API call.

use super::document::Verb;
use super::grants::{Grants, Rules};
use super::paths::{self, FieldPath};
use crate::contract::text::shown;
use crate::contract::{Action, KindRef, PatchType, Scope};
use serde::Serialize;
use serde_json::Value;

/// Which grant an action lacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grant {
    /// The object's namespace is not granted.
    Namespaces,
    /// A write to a cluster-scoped object without `namespaces.clusterScoped`.
    ClusterScoped,
    /// The verb (patch, patch-status, create, delete, event) is not granted on the kind.
    Verbs,
    /// The write touches a field outside the rule's field patterns.
    Fields,
    /// Another action of the same call was denied (all-or-nothing per call).
    Call,
    /// Not a grant: the action does not fit its kind (a namespace on a cluster-scoped
    /// object, none on a namespaced one, a kind the API server does not serve). Refused
    /// whatever the policy.
    Invalid,
}

impl Grant {
    /// The name in audit records and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Namespaces => "namespaces",
            Grant::ClusterScoped => "cluster-scoped",
            Grant::Verbs => "verbs",
            Grant::Fields => "fields",
            Grant::Call => "call",
            Grant::Invalid => "invalid",
        }
    }
}

/// Why an action was denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("denied by {}: {reason}", grant.as_str())]
pub struct Denial {
    /// Which grant is missing.
    pub grant: Grant,
    /// What the action asked for (plugin text shown escaped).
    pub reason: String,
}

fn deny(grant: Grant, reason: String) -> Result<(), Denial> {
    Err(Denial { grant, reason })
}

/// Whether `action` is an API write (logs and requeues are not), as [`Action::effect`] says.
pub fn is_write(action: &Action) -> bool {
    matches!(action.effect(), crate::contract::Effect::Write(_))
}

/// The kind an API write acts on (the regarding object's for an event); `None` for logs and
/// requeues. Its scope decides how the action is checked and where it is sent.
pub fn kind_of(action: &Action) -> Option<KindRef> {
    match action {
        Action::Patch { target, .. } | Action::Delete { target } => Some(target.kind_ref()),
        Action::Event { regarding, .. } => Some(regarding.kind_ref()),
        Action::Create { manifest } => Some(KindRef::new(
            manifest["apiVersion"].as_str().unwrap_or_default(),
            manifest["kind"].as_str().unwrap_or_default(),
        )),
        Action::Log { .. } | Action::RequeueAfter { .. } => None,
    }
}

/// The namespace an API write names (the manifest's for a create, the regarding object's
/// for an event); `None` for cluster-scoped objects.
pub fn namespace_of(action: &Action) -> Option<&str> {
    match action {
        Action::Patch { target, .. } | Action::Delete { target } => target.namespace.as_deref(),
        Action::Event { regarding, .. } => regarding.namespace.as_deref(),
        Action::Create { manifest } => manifest
            .pointer("/metadata/namespace")
            .and_then(Value::as_str),
        Action::Log { .. } | Action::RequeueAfter { .. } => None,
    }
}

impl Grants {
    /// Checks one action on a kind of `scope`: where it is (a granted namespace, or the
    /// cluster-scope grant), its verb on its kind, and the field paths it sets. Logs and
    /// requeues are always allowed.
    pub fn check(&self, action: &Action, scope: Scope) -> Result<(), Denial> {
        let Some(kind) = kind_of(action) else {
            return Ok(());
        };
        self.check_scope(&kind, scope, namespace_of(action))?;
        match action {
            Action::Log { .. } | Action::RequeueAfter { .. } => Ok(()),
            Action::Patch {
                patch_type,
                subresource,
                body,
                ..
            } => {
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
                self.check_write(&kind, verb, &touched, status)
            }
            Action::Create { manifest } => {
                self.check_write(&kind, Verb::Create, &paths::create_paths(manifest), false)
            }
            Action::Delete { .. } => self.check_write(&kind, Verb::Delete, &[], false),
            Action::Event { .. } => self.check_write(&kind, Verb::Event, &[], false),
        }
    }

    /// A namespaced kind needs a granted namespace; a cluster-scoped one no namespace and
    /// the cluster-scope grant.
    fn check_scope(
        &self,
        kind: &KindRef,
        scope: Scope,
        namespace: Option<&str>,
    ) -> Result<(), Denial> {
        match (scope, namespace) {
            (Scope::Namespaced, Some(ns)) => self.check_namespace(ns),
            (Scope::Namespaced, None) => deny(
                Grant::Invalid,
                format!(
                    "{} is namespaced: the action names no namespace",
                    shown(&kind.to_string())
                ),
            ),
            (Scope::Cluster, Some(ns)) => deny(
                Grant::Invalid,
                format!(
                    "{} is cluster-scoped: the action names namespace {:?}",
                    shown(&kind.to_string()),
                    shown(ns)
                ),
            ),
            (Scope::Cluster, None) if self.cluster_scoped => Ok(()),
            (Scope::Cluster, None) => deny(
                Grant::ClusterScoped,
                format!(
                    "{} is cluster-scoped and namespaces.clusterScoped is not granted",
                    shown(&kind.to_string())
                ),
            ),
        }
    }

    fn check_namespace(&self, namespace: &str) -> Result<(), Denial> {
        if self.namespaces.allows(Some(namespace)) {
            return Ok(());
        }
        deny(
            Grant::Namespaces,
            format!("namespace {:?} is not granted", shown(namespace)),
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
                format!(
                    "verb {} on {} is not granted",
                    verb.as_str(),
                    shown(&kind.to_string())
                ),
            );
        };
        for path in touched {
            let status_path = status && path.0.first().is_some_and(|s| s == "status");
            if !status_path && !rule.fields.iter().any(|f| f.grants(path)) {
                return deny(
                    Grant::Fields,
                    format!(
                        "field {} of {} is not granted",
                        shown(&path.to_string()),
                        shown(&kind.to_string())
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Checks every action of a call, each on the scope `scope_of` gives its kind (from
/// discovery; an `Err` names why the kind has none, and denies the action as invalid).
/// All-or-nothing: if any action is denied, every API write of the call is denied too (the
/// others with [`Grant::Call`]); logs and requeues stay allowed.
pub fn check_call(
    grants: &Grants,
    actions: &[Action],
    scope_of: &dyn Fn(&KindRef) -> Result<Scope, String>,
) -> Vec<Result<(), Denial>> {
    let mut results: Vec<_> = actions
        .iter()
        .map(|a| match kind_of(a) {
            None => Ok(()),
            Some(kind) => match scope_of(&kind) {
                Ok(scope) => grants.check(a, scope),
                Err(why) => deny(
                    Grant::Invalid,
                    format!("kind {}: {}", shown(&kind.to_string()), shown(&why)),
                ),
            },
        })
        .collect();
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
mod tests;
