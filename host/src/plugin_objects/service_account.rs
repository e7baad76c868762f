//! The third bound of a Plugin's grant, after its request and the PluginPolicies: the
//! rights of the ServiceAccount it acts as. The host reads every kind through one shared
//! cache, which the API server never checks per plugin, so each kind a Plugin would be
//! handed (the one it reconciles, the children it manages, the kinds it reads) must be one
//! its ServiceAccount may `get`, `list` and `watch` itself in every namespace of the grant,
//! as the cluster's authorizer answers (`SubjectAccessReview`). Writes need no such check
//! here: they are sent impersonating the ServiceAccount, and the API server refuses what
//! it may not do.

use super::refusal::{Reason, Refusal};
use super::spec::{ClusterPolicySpec, PluginObjectSpec};
use crate::cluster::{
    AccessReviewer, DEFAULT_SERVICE_ACCOUNT, KindRegistry, Principal, ResolveError, ResourceAccess,
};
use crate::contract::KindRef;

/// The verbs a cached kind is read with (the host lists and watches it; imports get it).
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Access reviews of one Plugin in flight at once.
const CONCURRENT_REVIEWS: usize = 8;

/// The ServiceAccount the Plugin in `namespace` acts as: the one the applying policies
/// name (a Plugin asking for another is refused), else the Plugin's own choice, else
/// `default`.
pub(super) fn principal_of(
    namespace: &str,
    spec: &PluginObjectSpec,
    policies: &[(&str, &ClusterPolicySpec)],
) -> Result<Principal, Refusal> {
    let named: Vec<(&str, &str)> = policies
        .iter()
        .filter_map(|(n, p)| p.service_account_name.as_deref().map(|sa| (*n, sa)))
        .collect();
    let asked = spec.service_account_name.as_deref();
    let name = match (named.first(), asked) {
        (Some((policy, sa)), Some(asked)) if *sa != asked => {
            return Err(Refusal::new(
                Reason::PermissionsExceedPolicy,
                format!(
                    "spec.serviceAccountName {asked:?}: PluginPolicy {policy} makes its Plugins act as ServiceAccount {sa:?}"
                ),
            ));
        }
        (Some((_, sa)), _) => *sa,
        (None, Some(asked)) => asked,
        (None, None) => DEFAULT_SERVICE_ACCOUNT,
    };
    if let Some((policy, other)) = named.iter().find(|(_, sa)| *sa != name) {
        return Err(Refusal::new(
            Reason::PermissionsExceedPolicy,
            format!(
                "the applying PluginPolicies name different ServiceAccounts ({name:?}, and {other:?} in {policy})"
            ),
        ));
    }
    Principal::service_account(namespace, name)
        .map_err(|e| Refusal::new(Reason::InvalidSpec, format!("spec.serviceAccountName: {e}")))
}

/// Refuses reading Secrets without a PluginPolicy that grants them: a tenant's own request
/// alone never puts Secrets in the host's cache for a plugin, whatever its account may do.
pub(super) fn secrets_need_a_policy(
    readable: &[KindRef],
    policies: &[(&str, &ClusterPolicySpec)],
) -> Result<(), Refusal> {
    let secret = KindRef::new("v1", "Secret");
    if policies.is_empty() && readable.contains(&secret) {
        return Err(Refusal::new(
            Reason::PermissionsExceedPolicy,
            "the plugin would read v1 Secret: reading Secrets needs a PluginPolicy that grants them",
        ));
    }
    Ok(())
}

/// Whether `principal` may read each of `readable` in each of `namespaces` (cluster-wide
/// for a cluster-scoped kind); else the first kind, verb and namespace it may not.
pub(super) async fn may_read(
    reviewer: &dyn AccessReviewer,
    kinds: &KindRegistry,
    principal: &Principal,
    readable: &[KindRef],
    namespaces: &[String],
) -> Result<(), Refusal> {
    for kind in readable {
        match kinds.scope(kind).await {
            // A kind not served: the controller refuses to start it, saying so.
            Err(ResolveError::Unknown { .. }) => continue,
            Err(err) => return Err(lookup_failed(kind, principal, &err)),
            Ok(_) => {}
        }
        let resolved = kinds
            .resolve(kind)
            .await
            .map_err(|e| lookup_failed(kind, principal, &e))?;
        let scopes: Vec<Option<&str>> = match resolved.namespaced {
            true => namespaces.iter().map(|n| Some(n.as_str())).collect(),
            false => vec![None],
        };
        let resource = &resolved.resource;
        let accesses: Vec<ResourceAccess> = scopes
            .into_iter()
            .flat_map(|namespace| {
                READ_VERBS.into_iter().map(move |verb| ResourceAccess {
                    verb,
                    group: resource.group.clone(),
                    resource: resource.plural.clone(),
                    namespace: namespace.map(str::to_string),
                })
            })
            .collect();
        // A few reviews in flight at once, answers taken in order (the first refusal
        // reported is the one a review in turn would find): one at a time, 1,000 new
        // Plugins waited for 3,000 round trips.
        for batch in accesses.chunks(CONCURRENT_REVIEWS) {
            let reviews: Vec<_> = batch
                .iter()
                .map(|access| reviewer.allowed(principal, access))
                .collect();
            let answers = futures::future::join_all(reviews).await;
            for (access, allowed) in batch.iter().zip(answers) {
                let (verb, namespace) = (access.verb, access.namespace.as_deref());
                let allowed = allowed.map_err(|e| {
                    Refusal::new(
                        Reason::AccessReviewFailed,
                        format!("cannot check {principal}'s rights: {e}"),
                    )
                })?;
                if !allowed {
                    let where_ = match namespace {
                        Some(ns) => format!("in namespace {ns}"),
                        None => "cluster-wide".to_string(),
                    };
                    return Err(Refusal::new(
                        Reason::PermissionsExceedServiceAccount,
                        format!(
                            "{principal} may not {verb} {} ({kind}) {where_}, and the plugin would read them; grant it with a Role and RoleBinding, or drop the kind from what the plugin reads",
                            resolved.resource.plural
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn lookup_failed(kind: &KindRef, principal: &Principal, err: &dyn std::fmt::Display) -> Refusal {
    Refusal::new(
        Reason::AccessReviewFailed,
        format!("cannot look {kind} up to check {principal}'s rights: {err}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sa: Option<&str>) -> PluginObjectSpec {
        let mut v = serde_json::json!({"module": {"configMap": {"name": "m"}}});
        if let Some(sa) = sa {
            v["serviceAccountName"] = sa.into();
        }
        serde_json::from_value(v).unwrap()
    }

    fn policy(sa: Option<&str>) -> ClusterPolicySpec {
        ClusterPolicySpec {
            service_account_name: sa.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn the_account_is_the_policys_then_the_plugins_then_default() {
        let none: &[(&str, &ClusterPolicySpec)] = &[];
        assert_eq!(
            principal_of("t", &spec(None), none).unwrap().name(),
            "default"
        );
        assert_eq!(
            principal_of("t", &spec(Some("bot")), none).unwrap().name(),
            "bot"
        );
        let p = policy(Some("runner"));
        let named = [("p", &p)];
        assert_eq!(
            principal_of("t", &spec(None), &named).unwrap().name(),
            "runner"
        );
        assert_eq!(
            principal_of("t", &spec(Some("runner")), &named)
                .unwrap()
                .name(),
            "runner"
        );
        let refused = principal_of("t", &spec(Some("admin")), &named).unwrap_err();
        assert_eq!(refused.reason, Reason::PermissionsExceedPolicy);
        let q = policy(Some("other"));
        let both = [("p", &p), ("q", &q)];
        assert!(principal_of("t", &spec(None), &both).is_err());
        assert!(principal_of("t", &spec(Some("Bad Name")), none).is_err());
    }

    #[test]
    fn secrets_are_never_read_without_a_policy() {
        let secret = [KindRef::new("v1", "Secret")];
        let none: &[(&str, &ClusterPolicySpec)] = &[];
        assert!(secrets_need_a_policy(&secret, none).is_err());
        assert!(secrets_need_a_policy(&[KindRef::new("v1", "ConfigMap")], none).is_ok());
        let p = policy(None);
        assert!(secrets_need_a_policy(&secret, &[("p", &p)]).is_ok());
    }
}
