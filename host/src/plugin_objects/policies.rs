//! The PluginPolicies of a pass: which are in force (a spec that stops parsing keeps its last
//! good one), which apply to a namespace (by name, or by its labels), and each policy's
//! status (how many namespaces with Plugins it applies to).

use super::pass_state::State;
use super::source::{PluginObjects, now, policy_resource};
use super::spec::{ClusterPolicySpec, parse_spec};
use super::status::{differs_beyond_counts, policy_status};
use super::truth::{StatusWrite, write_status};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The policies in force, by name, and why the others' specs were refused.
pub(super) type InForce = (Vec<(String, ClusterPolicySpec)>, BTreeMap<String, String>);

/// The policies in force among `objects`: each one's spec, or while it does not parse or
/// validate, its last good one (remembered in `state`, for existing policies only).
pub(super) fn in_force(state: &mut State, objects: &[Arc<DynamicObject>]) -> InForce {
    let mut errors: BTreeMap<String, String> = BTreeMap::new();
    let mut in_force: Vec<(String, ClusterPolicySpec)> = Vec::new();
    for p in objects {
        let name = p.name_any();
        match parse_spec::<ClusterPolicySpec>(&p.data).and_then(|s| s.validate().map(|()| s)) {
            Ok(spec) => {
                state.good_policies.insert(name.clone(), spec.clone());
                in_force.push((name, spec));
            }
            Err(err) => {
                if let Some(good) = state.good_policies.get(&name) {
                    in_force.push((name.clone(), good.clone()));
                }
                errors.insert(name, err);
            }
        }
    }
    let names: HashSet<String> = objects.iter().map(|p| p.name_any()).collect();
    state.good_policies.retain(|n, _| names.contains(n));
    (in_force, errors)
}

/// Whether policy `p` applies to `namespace` (with its labels, when known).
pub(super) fn applies_to_names(
    p: &ClusterPolicySpec,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    p.applies_to.names.iter().any(|n| n == namespace)
        || p.applies_to.selector.as_ref().is_some_and(|s| {
            labels.is_some_and(|l| s.match_labels.iter().all(|(k, v)| l.get(k) == Some(v)))
        })
}

impl PluginObjects {
    /// The policies in force that apply to `namespace` (its labels read once per pass, into
    /// `labels`, when a policy selects by them).
    pub(super) async fn applying<'a>(
        &self,
        namespace: &str,
        in_force: &'a [(String, ClusterPolicySpec)],
        labels: &mut HashMap<String, BTreeMap<String, String>>,
    ) -> Vec<(&'a str, &'a ClusterPolicySpec)> {
        if in_force
            .iter()
            .any(|(_, p)| p.applies_to.selector.is_some())
            && !labels.contains_key(namespace)
        {
            let api: Api<Namespace> = Api::all(self.inner.client.clone());
            let found = match api.get_opt(namespace).await {
                Ok(ns) => ns.and_then(|n| n.metadata.labels).unwrap_or_default(),
                Err(err) => {
                    tracing::warn!(
                        namespace,
                        "cannot read the namespace's labels for PluginPolicy selectors: {err}"
                    );
                    BTreeMap::new()
                }
            };
            labels.insert(namespace.to_string(), found);
        }
        in_force
            .iter()
            .filter(|(_, p)| applies_to_names(p, namespace, labels.get(namespace)))
            .map(|(n, p)| (n.as_str(), p))
            .collect()
    }

    /// Writes each policy's status where it changed beyond its counts: its spec's error,
    /// if any, and the namespaces with Plugins it applies to.
    pub(super) async fn report_policies(
        &self,
        objects: &[Arc<DynamicObject>],
        plugins: &[Arc<DynamicObject>],
        (in_force, errors): (&[(String, ClusterPolicySpec)], &BTreeMap<String, String>),
        labels: &HashMap<String, BTreeMap<String, String>>,
    ) {
        let namespaces: HashSet<String> = plugins.iter().filter_map(|o| o.namespace()).collect();
        for p in objects {
            let name = p.name_any();
            let applies = namespaces
                .iter()
                .filter(|ns| {
                    in_force
                        .iter()
                        .any(|(n, s)| *n == name && applies_to_names(s, ns, labels.get(*ns)))
                })
                .count();
            let status = policy_status(
                p.metadata.generation.unwrap_or(0),
                errors.get(&name).map(String::as_str),
                applies,
                p.data.get("status"),
                &now(),
            );
            if differs_beyond_counts(&status, p.data.get("status")) {
                let resource = policy_resource();
                let read_back = p.data.get("status");
                let written = write_status(
                    &self.inner.client,
                    &resource,
                    None,
                    &name,
                    &status,
                    read_back,
                    p.metadata.resource_version.as_deref(),
                )
                .await;
                if written == StatusWrite::Conflict {
                    self.inner.wake.notify_one();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use serde_json::json;

    fn policy(name: &str, spec: serde_json::Value) -> Arc<DynamicObject> {
        Arc::new(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: json!({ "spec": spec }),
        })
    }

    #[test]
    fn a_policy_that_stops_parsing_keeps_its_last_good_spec_until_deleted() {
        let mut state = State::default();
        let good = policy("p", json!({"appliesTo": {"names": ["team-a"]}}));
        let (kept, errors) = in_force_of(&mut state, &good);
        assert_eq!(kept.len(), 1);
        assert!(errors.is_empty());

        let bad = policy(
            "p",
            json!({"appliesTo": {"names": ["team-a"]}, "nonsense": 1}),
        );
        let (kept, errors) = in_force_of(&mut state, &bad);
        assert_eq!(kept.len(), 1, "the last good spec stays in force");
        assert!(applies_to_names(&kept[0].1, "team-a", None));
        assert!(errors.contains_key("p"));

        let (kept, _) = in_force(&mut state, &[]);
        assert!(kept.is_empty());
        assert!(
            state.good_policies.is_empty(),
            "a deleted policy is forgotten"
        );
        let (in_force, errors) = in_force_of(&mut state, &bad);
        assert!(
            in_force.is_empty(),
            "a new bad spec has nothing to fall back on"
        );
        assert!(errors.contains_key("p"));
    }

    fn in_force_of(state: &mut State, p: &Arc<DynamicObject>) -> InForce {
        in_force(state, std::slice::from_ref(p))
    }

    #[test]
    fn a_policy_applies_by_name_or_by_labels() {
        let spec: ClusterPolicySpec = serde_json::from_value(json!({
            "appliesTo": {"names": ["team-a"], "selector": {"matchLabels": {"tier": "tenant"}}}
        }))
        .unwrap();
        let tenant = BTreeMap::from([("tier".to_string(), "tenant".to_string())]);
        let other = BTreeMap::from([("tier".to_string(), "system".to_string())]);
        assert!(applies_to_names(&spec, "team-a", None));
        assert!(applies_to_names(&spec, "team-b", Some(&tenant)));
        assert!(!applies_to_names(&spec, "team-b", Some(&other)));
        assert!(!applies_to_names(&spec, "team-b", None), "labels unknown");
    }
}
