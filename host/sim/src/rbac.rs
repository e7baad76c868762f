//! The RBAC authorizer over the `rbac.authorization.k8s.io/v1` objects the sim stores, as the
//! real server's: a request is allowed when a rule of a ClusterRole bound by a
//! ClusterRoleBinding, or of a Role or ClusterRole bound by a RoleBinding of the request's
//! namespace, names its verb, API group, resource (with subresource) and name, for a binding
//! subject that is the user, one of its groups or (for a ServiceAccount) its user name.
//! `system:masters` is allowed everything before RBAC is asked, as the real server's
//! privileged-group authorizer does. Not evaluated: aggregated ClusterRoles
//! (`aggregationRule`), and the escalation checks on writes of roles and bindings (README).

use super::attributes::{Attributes, ResourceAttributes};
use super::authn::{MASTERS, UserInfo, split_service_account};
use super::store::Store;
use serde_json::Value;
use std::sync::Arc;

/// Storage keys of the RBAC kinds.
pub const ROLES: &str = "roles.rbac.authorization.k8s.io";
/// See [`ROLES`].
pub const CLUSTER_ROLES: &str = "clusterroles.rbac.authorization.k8s.io";
/// See [`ROLES`].
pub const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";
/// See [`ROLES`].
pub const CLUSTER_ROLE_BINDINGS: &str = "clusterrolebindings.rbac.authorization.k8s.io";

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether it is allowed.
    pub allowed: bool,
    /// Why, as the real RBAC authorizer says it (`RBAC: allowed by ClusterRoleBinding "x" of
    /// ClusterRole "y" to Group "z"`); empty when nothing allowed it.
    pub reason: String,
}

/// Whether `user` may do `attrs`, by the RBAC objects in `store`.
pub fn authorize(store: &Store, user: &UserInfo, attrs: &Attributes) -> Decision {
    if user.in_group(MASTERS) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut allowed_by = None;
    visit_rules(store, user, namespace_of(attrs), |source, rule| {
        if rule_allows(rule, attrs) {
            allowed_by = Some(source());
            false
        } else {
            true
        }
    });
    match allowed_by {
        Some(source) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {source}"),
        },
        None => Decision {
            allowed: false,
            reason: String::new(),
        },
    }
}

/// Every rule that applies to `user` in `namespace` (the ClusterRoleBindings' alone for an
/// empty namespace), in the order the authorizer visits them; for the rules review.
pub fn rules_for(store: &Store, user: &UserInfo, namespace: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    visit_rules(store, user, namespace, |_, rule| {
        rules.push(rule.clone());
        true
    });
    rules
}

fn namespace_of(attrs: &Attributes) -> &str {
    match attrs {
        Attributes::Resource(r) => &r.namespace,
        Attributes::NonResource { .. } => "",
    }
}

/// Calls `visit(describe, rule)` for each rule bound to `user` (ClusterRoleBindings first,
/// then the RoleBindings of `namespace`) until it returns false.
fn visit_rules(
    store: &Store,
    user: &UserInfo,
    namespace: &str,
    mut visit: impl FnMut(&dyn Fn() -> String, &Value) -> bool,
) {
    let (bindings, _, _) = store.list(CLUSTER_ROLE_BINDINGS, None, None, None, |_| true);
    for binding in &bindings {
        let Some(subject) = matching_subject(binding, user, "") else {
            continue;
        };
        if binding["roleRef"]["kind"] != "ClusterRole" {
            continue;
        }
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let Some(role) = store.get(CLUSTER_ROLES, "", role_name) else {
            continue;
        };
        let describe = || {
            format!(
                "ClusterRoleBinding {:?} of ClusterRole {role_name:?} to {}",
                binding["metadata"]["name"].as_str().unwrap_or_default(),
                describe_subject(subject, "")
            )
        };
        for rule in rules_of(&role) {
            if !visit(&describe, rule) {
                return;
            }
        }
    }
    if namespace.is_empty() {
        return;
    }
    let (bindings, _, _) = store.list(ROLE_BINDINGS, Some(namespace), None, None, |_| true);
    for binding in &bindings {
        let Some(subject) = matching_subject(binding, user, namespace) else {
            continue;
        };
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let role: Option<Arc<Value>> = match role_kind {
            "Role" => store.get(ROLES, namespace, role_name),
            "ClusterRole" => store.get(CLUSTER_ROLES, "", role_name),
            _ => None,
        };
        let Some(role) = role else {
            continue;
        };
        let describe = || {
            format!(
                "RoleBinding {:?} of {role_kind} {role_name:?} to {}",
                format!(
                    "{}/{namespace}",
                    binding["metadata"]["name"].as_str().unwrap_or_default()
                ),
                describe_subject(subject, namespace)
            )
        };
        for rule in rules_of(&role) {
            if !visit(&describe, rule) {
                return;
            }
        }
    }
}

fn rules_of(role: &Value) -> impl Iterator<Item = &Value> {
    role["rules"].as_array().into_iter().flatten()
}

/// The first subject of `binding` that `user` is (`binding_namespace`: a RoleBinding's, the
/// default namespace of its ServiceAccount subjects).
fn matching_subject<'a>(
    binding: &'a Value,
    user: &UserInfo,
    binding_namespace: &str,
) -> Option<&'a Value> {
    binding["subjects"]
        .as_array()?
        .iter()
        .find(|s| subject_matches(s, user, binding_namespace))
}

fn subject_matches(subject: &Value, user: &UserInfo, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => user.name == name,
        Some("Group") => user.in_group(name),
        Some("ServiceAccount") => {
            let namespace = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            !namespace.is_empty() && split_service_account(&user.name) == Some((namespace, name))
        }
        _ => false,
    }
}

fn describe_subject(subject: &Value, binding_namespace: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let namespace = subject["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_namespace);
        return format!("{kind} {:?}", format!("{name}/{namespace}"));
    }
    format!("{kind} {name:?}")
}

fn strings<'a>(rule: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    rule[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether one PolicyRule allows `attrs` (the real server's `RuleAllows`).
pub fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    let verb_matches = strings(rule, "verbs").any(|v| v == "*" || v == attrs.verb());
    if !verb_matches {
        return false;
    }
    match attrs {
        Attributes::Resource(r) => resource_rule_allows(rule, r),
        Attributes::NonResource { path, .. } => strings(rule, "nonResourceURLs").any(|url| {
            url == "*"
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        }),
    }
}

fn resource_rule_allows(rule: &Value, r: &ResourceAttributes) -> bool {
    if !strings(rule, "apiGroups").any(|g| g == "*" || g == r.group) {
        return false;
    }
    let combined = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let resource_matches = strings(rule, "resources").any(|res| {
        res == "*"
            || res == combined
            || (!r.subresource.is_empty() && res.strip_prefix("*/") == Some(r.subresource.as_str()))
    });
    if !resource_matches {
        return false;
    }
    let mut names = strings(rule, "resourceNames").peekable();
    names.peek().is_none() || names.any(|n| n == r.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes::Resource(ResourceAttributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        })
    }

    #[test]
    fn rules_match_as_kubernetes_matches_them() {
        let status = json!({"apiGroups": ["kubeplug.dev"], "resources": ["plugins/status"], "verbs": ["patch"]});
        assert!(rule_allows(
            &status,
            &res("patch", "kubeplug.dev", "plugins", "status", "t1", "p")
        ));
        assert!(
            !rule_allows(
                &status,
                &res("patch", "kubeplug.dev", "plugins", "", "t1", "p")
            ),
            "a subresource rule does not grant the main resource"
        );
        let main = json!({"apiGroups": ["kubeplug.dev"], "resources": ["plugins"], "verbs": ["*"]});
        assert!(
            !rule_allows(
                &main,
                &res("patch", "kubeplug.dev", "plugins", "status", "t1", "p")
            ),
            "nor the main resource its subresources"
        );
        let star = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]});
        assert!(rule_allows(
            &star,
            &res("get", "apps", "deployments", "status", "", "x")
        ));
        assert!(!rule_allows(
            &star,
            &res("list", "apps", "deployments", "", "", "")
        ));
        let any_status = json!({"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]});
        assert!(rule_allows(
            &any_status,
            &res("get", "", "pods", "status", "a", "p")
        ));
        assert!(!rule_allows(
            &any_status,
            &res("get", "", "pods", "", "a", "p")
        ));
        let named = json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["pull"], "verbs": ["get", "list"]});
        assert!(rule_allows(
            &named,
            &res("get", "", "secrets", "", "a", "pull")
        ));
        assert!(!rule_allows(
            &named,
            &res("get", "", "secrets", "", "a", "other")
        ));
        assert!(
            !rule_allows(&named, &res("list", "", "secrets", "", "a", "")),
            "resourceNames never match a list"
        );
        let urls = json!({"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]});
        let path = |p: &str| Attributes::NonResource {
            verb: "get".into(),
            path: p.into(),
        };
        assert!(rule_allows(&urls, &path("/apis/apps/v1")));
        assert!(rule_allows(&urls, &path("/version")));
        assert!(!rule_allows(&urls, &path("/sim/faults")));
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let sa = UserInfo::new(
            "system:serviceaccount:t1:default",
            &["system:serviceaccounts"],
        );
        let by_default_namespace = json!({"kind": "ServiceAccount", "name": "default"});
        assert!(subject_matches(&by_default_namespace, &sa, "t1"));
        assert!(!subject_matches(&by_default_namespace, &sa, "t2"));
        assert!(!subject_matches(&by_default_namespace, &sa, ""));
        let explicit = json!({"kind": "ServiceAccount", "name": "default", "namespace": "t1"});
        assert!(subject_matches(&explicit, &sa, "t2"));
        let group = json!({"kind": "Group", "name": "system:serviceaccounts"});
        assert!(subject_matches(&group, &sa, ""));
        let user = json!({"kind": "User", "name": "system:serviceaccount:t1:default"});
        assert!(subject_matches(&user, &sa, ""));
        assert!(!subject_matches(
            &json!({"kind": "User", "name": "alice"}),
            &sa,
            ""
        ));
    }
}
