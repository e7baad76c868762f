//! A `Plugin`'s effective grant: what it requests, bounded by every `PluginPolicy` that
//! applies to its namespace. Pure, so each rule of the intersection is a test.
//!
//! - Each requested verb and field path must be granted on that kind by some applying
//!   policy (policies add up, like RBAC roles); one that is not refuses the whole request
//!   (`PermissionsExceedPolicy`, naming the rule), so a Plugin never runs with less than it
//!   was written for without saying so.
//! - The plugin sees and touches its own namespace only; another namespace only when an
//!   applying policy names it in `namespaces.names`, cluster-scoped writes only with a
//!   policy's `namespaces.clusterScoped: true`.
//! - Mode: enforce only when the Plugin asks for it and no applying policy says dry-run.
//! - Limits: the lowest of the request's and every applying policy's, field by field, where
//!   a policy sets the field; elsewhere the host's defaults (a request never raises them).
//! - No applying policy: the request runs as asked but in dry-run, confined to its
//!   namespace (as a plugin file without a policy file runs in dry-run).

use super::refusal::{Reason, Refusal};
use super::spec::{ClusterPolicySpec, PluginObjectSpec};
use crate::policy::FieldPattern;
use crate::policy::{
    API_VERSION, GrantsSpec, KIND, LimitsSpec, Mode, NamespacesSpec, PluginSpec, PolicyDocument,
    PolicyMetadata, PolicySpec, RuleSpec,
};
use sha2::{Digest, Sha256};

/// What a Plugin may do, as a policy document the host enforces like a file's.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The document (named after the instance).
    pub document: PolicyDocument,
    /// The applying policies, by name.
    pub policies: Vec<String>,
    /// The grant in one short line, for status and the dashboard.
    pub summary: String,
    /// SHA-256 of the document: a new grant is a new revision.
    pub digest: String,
}

fn exceeds(message: String) -> Refusal {
    Refusal::new(Reason::PermissionsExceedPolicy, message)
}

/// The effective grant of the Plugin `instance` in `namespace`, given the policies that
/// apply to that namespace (name and spec).
pub fn effective(
    namespace: &str,
    instance: &str,
    request: &PluginObjectSpec,
    policies: &[(&str, &ClusterPolicySpec)],
) -> Result<Effective, Refusal> {
    let asked = &request.permissions;
    let names: Vec<String> = policies.iter().map(|(n, _)| n.to_string()).collect();
    let which = || match names.len() {
        0 => format!("no PluginPolicy applies to namespace {namespace}"),
        _ => format!(
            "no PluginPolicy applying to namespace {namespace} ({}) grants it",
            names.join(", ")
        ),
    };
    for extra in asked.namespaces.names.iter().filter(|n| *n != namespace) {
        if !policies
            .iter()
            .any(|(_, p)| p.grants.namespaces.names.iter().any(|n| n == extra))
        {
            return Err(exceeds(format!(
                "spec.permissions.namespaces.names requests namespace {extra:?}: {}",
                which()
            )));
        }
    }
    if asked.namespaces.cluster_scoped
        && !policies
            .iter()
            .any(|(_, p)| p.grants.namespaces.cluster_scoped)
    {
        return Err(exceeds(format!(
            "spec.permissions.namespaces.clusterScoped requests cluster-scoped writes: {}",
            which()
        )));
    }
    let mut mode = request.mode;
    if !policies.is_empty() {
        for (i, rule) in asked.rules.iter().enumerate() {
            covered(i, rule, policies).map_err(|what| exceeds(format!("{what}: {}", which())))?;
        }
        for (i, read) in asked.reads.iter().enumerate() {
            let granted = policies.iter().any(|(_, p)| {
                let same = |v: &str, k: &str| v == read.api_version && k == read.kind;
                p.grants.reads.iter().any(|r| same(&r.api_version, &r.kind))
                    || p.grants.rules.iter().any(|r| same(&r.api_version, &r.kind))
            });
            if !granted {
                return Err(exceeds(format!(
                    "spec.permissions.reads[{i}] requests reading {} {}: {}",
                    read.api_version,
                    read.kind,
                    which()
                )));
            }
        }
        if policies.iter().any(|(_, p)| p.grants.mode == Mode::DryRun) {
            mode = Mode::DryRun;
        }
    } else {
        mode = Mode::DryRun;
    }
    let mut granted_names = vec![namespace.to_string()];
    for n in &asked.namespaces.names {
        if !granted_names.contains(n) {
            granted_names.push(n.clone());
        }
    }
    let limits = lowest(
        &asked.limits,
        policies.iter().map(|(_, p)| &p.grants.limits),
    );
    let document = PolicyDocument {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: PolicyMetadata {
            name: instance.into(),
        },
        spec: PolicySpec {
            grants: GrantsSpec {
                mode,
                namespaces: NamespacesSpec {
                    all: false,
                    cluster_scoped: asked.namespaces.cluster_scoped,
                    names: granted_names.clone(),
                    selector: None,
                },
                reads: asked.reads.clone(),
                rules: asked.rules.clone(),
                limits,
            },
            config: request.config.clone(),
            plugin: PluginSpec::default(),
        },
    };
    let text = serde_json::to_string(&document).unwrap_or_default();
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    let summary = summary(&document.spec.grants, &granted_names);
    Ok(Effective {
        document,
        policies: names,
        summary,
        digest,
    })
}

/// Whether the policies grant every verb and field of requested rule `i`; else what is not.
fn covered(
    i: usize,
    rule: &RuleSpec,
    policies: &[(&str, &ClusterPolicySpec)],
) -> Result<(), String> {
    let kind = format!("{} {}", rule.api_version, rule.kind);
    let same_kind = || {
        policies
            .iter()
            .flat_map(|(_, p)| &p.grants.rules)
            .filter(|r| r.api_version == rule.api_version && r.kind == rule.kind)
    };
    for verb in &rule.verbs {
        if !same_kind().any(|r| r.verbs.contains(verb)) {
            return Err(format!(
                "spec.permissions.rules[{i}] ({kind}) requests verb {}",
                verb.as_str()
            ));
        }
    }
    for field in &rule.fields {
        let Ok(wanted) = FieldPattern::parse(field) else {
            return Err(format!(
                "spec.permissions.rules[{i}] ({kind}) has an invalid field path {field:?}"
            ));
        };
        let granted = same_kind()
            .flat_map(|r| &r.fields)
            .any(|f| FieldPattern::parse(f).is_ok_and(|g| g.covers(&wanted)));
        if !granted {
            return Err(format!(
                "spec.permissions.rules[{i}] ({kind}) requests field {field}"
            ));
        }
    }
    Ok(())
}

/// Each limit: the lowest of the request's and the policies' where some policy sets it;
/// where none does, unset (the host's defaults apply). A tenant's request can lower a
/// limit a policy sets, never raise a call's memory, time or actions above the host's
/// flags: a Plugin without a policy cannot ask for 1 GiB and ten-minute calls.
fn lowest<'a>(
    asked: &LimitsSpec,
    policies: impl Iterator<Item = &'a LimitsSpec> + Clone,
) -> LimitsSpec {
    fn min<T: PartialOrd + Copy>(
        asked: Option<T>,
        set: impl Iterator<Item = Option<T>>,
    ) -> Option<T> {
        let lowest = set.flatten().fold(None, |m: Option<T>, x| {
            Some(m.map_or(x, |m| if x < m { x } else { m }))
        })?;
        Some(match asked {
            Some(a) if a < lowest => a,
            _ => lowest,
        })
    }
    LimitsSpec {
        memory_mib: min(asked.memory_mib, policies.clone().map(|l| l.memory_mib)),
        timeout_ms: min(asked.timeout_ms, policies.clone().map(|l| l.timeout_ms)),
        max_actions: min(asked.max_actions, policies.clone().map(|l| l.max_actions)),
        writes_per_second: min(
            asked.writes_per_second,
            policies.clone().map(|l| l.writes_per_second),
        ),
        write_burst: min(asked.write_burst, policies.map(|l| l.write_burst)),
    }
}

/// `team-a; apps/v1 Deployment: patch,event; reads: v1 ConfigMap; enforce`, capped.
fn summary(spec: &GrantsSpec, namespaces: &[String]) -> String {
    let mut parts = vec![namespaces.join(",")];
    if spec.namespaces.cluster_scoped {
        parts.push("cluster-scoped".into());
    }
    for r in &spec.rules {
        let verbs: Vec<&str> = r.verbs.iter().map(|v| v.as_str()).collect();
        parts.push(format!("{} {}: {}", r.api_version, r.kind, verbs.join(",")));
    }
    if !spec.reads.is_empty() {
        let reads: Vec<String> = spec
            .reads
            .iter()
            .map(|k| format!("{} {}", k.api_version, k.kind))
            .collect();
        parts.push(format!("reads: {}", reads.join(",")));
    }
    parts.push(
        match spec.mode {
            Mode::Enforce => "enforce",
            Mode::DryRun => "dry-run",
        }
        .into(),
    );
    let mut line = parts.join("; ");
    if line.len() > 256 {
        let mut cut = 255;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::super::spec::parse_spec;
    use super::*;
    use serde_json::json;

    fn request(permissions: serde_json::Value) -> PluginObjectSpec {
        parse_spec(&json!({"spec": {"module": {"configMap": {"name": "m"}},
            "permissions": permissions}}))
        .unwrap()
    }

    fn policy(spec: serde_json::Value) -> ClusterPolicySpec {
        serde_json::from_value(spec).unwrap()
    }

    fn tenants() -> ClusterPolicySpec {
        policy(
            json!({"mode": "enforce", "appliesTo": {"names": ["team-a"]},
            "limits": {"timeoutMs": 500, "writesPerSecond": 2.0},
            "rules": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "verbs": ["patch", "event"],
                "fields": ["/spec/template/spec/containers/*/image", "/metadata/labels"]}]}),
        )
    }

    fn pinner() -> PluginObjectSpec {
        request(json!({"limits": {"timeoutMs": 2000},
            "rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch"],
            "fields": ["/spec/template/spec/containers/*/image", "/metadata/labels/pinned"]}]}))
    }

    #[test]
    fn a_request_within_a_policy_runs_in_its_own_namespace_under_the_lowest_limits() {
        let p = tenants();
        let e = effective("team-a", "team-a/pinner", &pinner(), &[("tenants", &p)]).unwrap();
        let grants = &e.document.spec.grants;
        assert_eq!(grants.mode, Mode::Enforce);
        assert_eq!(grants.namespaces.names, vec!["team-a".to_string()]);
        assert!(!grants.namespaces.all && !grants.namespaces.cluster_scoped);
        assert_eq!(grants.limits.timeout_ms, Some(500));
        assert_eq!(grants.limits.writes_per_second, Some(2.0));
        assert_eq!(e.document.metadata.name, "team-a/pinner");
        assert_eq!(e.policies, vec!["tenants".to_string()]);
        assert!(
            e.summary.contains("apps/v1 Deployment: patch"),
            "{}",
            e.summary
        );
    }

    #[test]
    fn a_verb_field_read_or_namespace_beyond_every_policy_is_refused_by_rule() {
        let p = tenants();
        let ps = [("tenants", &p)];
        for (permissions, want) in [
            (
                json!({"rules": [{"apiVersion": "v1", "kind": "Secret", "verbs": ["patch"]}]}),
                "rules[0] (v1 Secret) requests verb patch",
            ),
            (
                json!({"rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["delete"]}]}),
                "requests verb delete",
            ),
            (
                json!({"rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch"],
                "fields": ["/spec/replicas"]}]}),
                "requests field /spec/replicas",
            ),
            (
                json!({"rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch"],
                "fields": ["/metadata"]}]}),
                "requests field /metadata",
            ),
            (
                json!({"reads": [{"apiVersion": "v1", "kind": "Secret"}]}),
                "reads[0] requests reading v1 Secret",
            ),
            (
                json!({"namespaces": {"names": ["team-b"]}}),
                "namespace \"team-b\"",
            ),
            (
                json!({"namespaces": {"clusterScoped": true}}),
                "cluster-scoped",
            ),
        ] {
            let err = effective("team-a", "team-a/x", &request(permissions), &ps).unwrap_err();
            assert_eq!(err.reason, Reason::PermissionsExceedPolicy);
            assert!(err.message.contains(want), "{want}: {}", err.message);
            assert!(err.message.contains("(tenants)"), "{}", err.message);
        }
    }

    #[test]
    fn policies_add_up_and_dry_run_wins() {
        let a = tenants();
        let b = policy(
            json!({"mode": "dry-run", "namespaces": {"names": ["shared"]},
            "reads": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["delete"]}]}),
        );
        let r = request(json!({"namespaces": {"names": ["shared"]},
            "reads": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch", "delete"],
                "fields": ["/metadata/labels"]}]}));
        let e = effective("team-a", "team-a/x", &r, &[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(e.document.spec.grants.mode, Mode::DryRun);
        assert_eq!(
            e.document.spec.grants.namespaces.names,
            vec!["team-a", "shared"]
        );
        let only_a = effective("team-a", "team-a/x", &r, &[("a", &a)]).unwrap_err();
        assert!(only_a.message.contains("\"shared\""), "{}", only_a.message);
        let mut no_shared = r.clone();
        no_shared.permissions.namespaces.names.clear();
        let only_a = effective("team-a", "team-a/x", &no_shared, &[("a", &a)]).unwrap_err();
        assert!(only_a.message.contains("verb delete"), "{}", only_a.message);
    }

    #[test]
    fn a_request_never_raises_a_limit_no_policy_sets() {
        let greedy = request(json!({"limits": {"memoryMib": 1024, "timeoutMs": 600000,
            "maxActions": 100000, "writesPerSecond": 1000.0, "writeBurst": 100000}}));
        let none = effective("team-a", "team-a/x", &greedy, &[]).unwrap();
        assert_eq!(none.document.spec.grants.limits, LimitsSpec::default());
        let p = tenants();
        let capped = effective("team-a", "team-a/x", &greedy, &[("tenants", &p)]).unwrap();
        assert_eq!(capped.document.spec.grants.limits.timeout_ms, Some(500));
        assert_eq!(
            capped.document.spec.grants.limits.writes_per_second,
            Some(2.0)
        );
        assert_eq!(capped.document.spec.grants.limits.memory_mib, None);
    }

    #[test]
    fn without_a_policy_it_runs_as_asked_in_dry_run_confined_to_its_namespace() {
        let e = effective("team-a", "team-a/pinner", &pinner(), &[]).unwrap();
        assert_eq!(e.document.spec.grants.mode, Mode::DryRun);
        assert_eq!(e.document.spec.grants.namespaces.names, vec!["team-a"]);
        let err = effective(
            "team-a",
            "team-a/x",
            &request(json!({"namespaces": {"names": ["kube-system"]}})),
            &[],
        )
        .unwrap_err();
        assert!(
            err.message.contains("no PluginPolicy applies"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_new_grant_is_a_new_digest() {
        let p = tenants();
        let a = effective("team-a", "team-a/p", &pinner(), &[("tenants", &p)]).unwrap();
        let b = effective("team-a", "team-a/p", &pinner(), &[]).unwrap();
        assert_ne!(a.digest, b.digest);
        let again = effective("team-a", "team-a/p", &pinner(), &[("tenants", &p)]).unwrap();
        assert_eq!(a.digest, again.digest);
    }
}
