//! The two custom resources as the host reads them (`kubeplug.dev/v1alpha1`): a tenant's
//! `Plugin` (what it asks to run in its namespace) and the platform team's cluster-scoped
//! `PluginPolicy` (what it allows, and in which namespaces). Unknown fields are refused, so
//! a misspelt or unsupported field is a status reason, never silently ignored.

use super::crd_status::{PluginPolicyStatus, PluginStatus};
use crate::policy::{GrantsSpec, KindSpec, LimitsSpec, Mode, NamespaceSelectorSpec, RuleSpec};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API group of both kinds.
pub const GROUP: &str = "kubeplug.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";

/// `Plugin.spec`: what the tenant asks to run. The `Plugin` CRD
/// (`host/deploy/crds/plugins.yaml`) is generated from this type (`kubeplug crds`).
#[derive(CustomResource, Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(description = "What the tenant asks to run.")]
#[kube(
    group = "kubeplug.dev",
    version = "v1alpha1",
    kind = "Plugin",
    root = "PluginObject",
    namespaced,
    status = "PluginStatus",
    shortname = "kp",
    derive = "PartialEq",
    doc = "A sandboxed WebAssembly reconciler a tenant runs in its own namespace. Its module comes from a ConfigMap in the same namespace or an OCI image; what it may do is what it requests in spec.permissions, bounded by the PluginPolicies that apply to its namespace.",
    printcolumn = r#"{"name": "Mode", "type": "string", "jsonPath": ".status.mode", "description": "The mode the current revision runs in (enforce or dry-run), after policy."}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "description": "Whether the current revision is running."}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason", "description": "Why it is (not) ready."}"#,
    printcolumn = r#"{"name": "Digest", "type": "string", "jsonPath": ".status.shortDigest", "description": "The first 12 hex digits of the running module's SHA-256."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct PluginObjectSpec {
    /// Where the WebAssembly component comes from: exactly one of configMap or image.
    pub module: ModuleSpec,
    /// What the tenant asks for: `enforce` (the default) or `dry-run`; the policies may
    /// lower it to dry-run, never raise it.
    #[serde(default = "enforce")]
    pub mode: Mode,
    /// Free JSON handed to the plugin as its configuration.
    #[serde(default)]
    #[schemars(schema_with = "free_json")]
    pub config: Option<Value>,
    /// What it asks to be granted.
    #[serde(default)]
    pub permissions: Permissions,
    /// How a new revision rolls out.
    #[serde(default)]
    pub rollout: Option<RolloutSpec>,
    /// The ServiceAccount of the Plugin's namespace it acts as: its reads are bounded by
    /// what that account may `get`/`list`/`watch`, its writes are sent impersonating it.
    /// Absent: the one an applying policy names, else `default`.
    #[serde(default)]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
}

/// The schema of free JSON: any value, kept as written (the API server prunes nothing).
fn free_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

fn enforce() -> Mode {
    Mode::Enforce
}

/// `spec.module`: exactly one of `configMap` and `image`, and an optional digest pin.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.configMap) != has(self.image)").message("exactly one of configMap or image must be set"))]
pub struct ModuleSpec {
    /// A ConfigMap in the Plugin's own namespace (there is no namespace field: a Plugin
    /// never reads another namespace's module).
    #[serde(default)]
    pub config_map: Option<ConfigMapRef>,
    /// An OCI reference, `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`, from a registry a
    /// PluginPolicy lists in `spec.modules.images`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the Plugin's namespace holding the
    /// image's registry credentials (only its entry for the image's registry is used).
    #[serde(default)]
    #[schemars(length(min = 1, max = 253))]
    pub pull_secret: Option<String>,
    /// The SHA-256 the module must have (64 hex digits, either case).
    #[serde(default)]
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{64}$"))]
    pub sha256: Option<String>,
}

/// `spec.module.configMap`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapRef {
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The `binaryData` key holding the component (default `plugin.wasm`).
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_key() -> String {
    "plugin.wasm".into()
}

/// `spec.permissions`: the policy rule format, requested rather than granted.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permissions {
    /// Namespaces beyond its own, and cluster-scoped writes: granted only by a policy that
    /// names them explicitly.
    #[serde(default)]
    pub namespaces: RequestedNamespaces,
    /// Kinds it reads beyond the one it reconciles.
    #[serde(default)]
    pub reads: Vec<KindSpec>,
    /// Verbs and field paths per kind.
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
    /// Per-call limits and the write budget it asks for (the policies may lower them).
    #[serde(default)]
    pub limits: LimitsSpec,
}

/// `spec.permissions.namespaces`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedNamespaces {
    /// Other namespaces, by name.
    #[serde(default)]
    #[schemars(inner(length(max = 63)))]
    pub names: Vec<String>,
    /// Writes to cluster-scoped objects.
    #[serde(default)]
    pub cluster_scoped: bool,
}

/// `spec.rollout`: a new revision first runs in shadow (dry-run, beside the live one).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// How long the shadow runs before promotion is considered.
    #[serde(default)]
    pub shadow: Option<ShadowSpec>,
    /// The most keys on which the two revisions may decide differently for promotion.
    #[serde(default)]
    pub max_differing: Option<u64>,
    /// Promote now, whatever the comparison says.
    #[serde(default)]
    pub promote: bool,
}

/// `spec.rollout.shadow`: a number of compared reconciles, or a duration, or both (the
/// first reached ends the shadow).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShadowSpec {
    /// Keys compared.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub reconciles: Option<u64>,
    /// A duration such as `90s`, `5m` or `1h30m`.
    #[serde(default)]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub duration: Option<String>,
}

/// `PluginPolicy.spec`: the grants of a policy file's spec ([`GrantsSpec`], flattened; not
/// `config` and the digest pin, which belong to the Plugin) plus the namespaces whose Plugins
/// it bounds, module sources and ServiceAccount. An unknown field, of the grants too, is
/// refused by serde's `deny_unknown_fields` here (the grants' own one does not apply when
/// flattened). The `PluginPolicy` CRD (`host/deploy/crds/pluginpolicies.yaml`) is generated
/// from this type.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(description = "What is allowed, and to whose Plugins.")]
#[kube(
    group = "kubeplug.dev",
    version = "v1alpha1",
    kind = "PluginPolicy",
    root = "PluginPolicyObject",
    plural = "pluginpolicies",
    status = "PluginPolicyStatus",
    shortname = "kpp",
    derive = "PartialEq",
    doc = "What the platform team allows the Plugins of some namespaces to do: the policy document of a policy file, plus the namespaces it applies to.",
    printcolumn = r#"{"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "description": "The most a matching Plugin may run in (enforce or dry-run)."}"#,
    printcolumn = r#"{"name": "Applies-To", "type": "string", "jsonPath": ".spec.appliesTo.names", "description": "The namespaces whose Plugins it bounds, by name."}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "description": "Whether kubeplug parsed and uses it."}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason", "description": "Why it is (not) ready."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct ClusterPolicySpec {
    /// The mode, namespaces, kinds, rules and limits it allows (a policy file's grants).
    #[serde(flatten)]
    pub grants: GrantsSpec,
    /// The namespaces whose Plugins it bounds (none when absent).
    #[serde(default)]
    pub applies_to: AppliesTo,
    /// Where its Plugins' modules may come from besides their namespace's ConfigMaps.
    #[serde(default)]
    pub modules: ModulesSpec,
    /// The ServiceAccount (of each Plugin's own namespace) its Plugins act as; a Plugin
    /// naming another one is refused. Absent: the Plugin's choice, else `default`.
    #[serde(default)]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
}

/// `PluginPolicy.spec.modules`: the registries and repositories its Plugins may pull
/// modules from (none unless listed: a tenant's image makes the host send requests).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModulesSpec {
    /// `HOST[:PORT]` (the whole registry) or `HOST[:PORT]/REPO` (that repository and the
    /// ones under it, at a `/` boundary).
    #[serde(default)]
    #[schemars(length(max = MAX_IMAGE_SOURCES), inner(length(min = 1, max = 300)))]
    pub images: Vec<String>,
    /// The signatures their images must carry (`kubeplug verify`'s config: `allOf`,
    /// `anyOf` of `pubKey` rules), besides the host's `--verification-config`; checked by
    /// the host, which refuses the policy with the field at fault.
    #[serde(default)]
    #[schemars(schema_with = "free_json")]
    pub verification: Option<crate::oci::verification::VerificationConfig>,
}

/// The most entries of `spec.modules.images`.
pub const MAX_IMAGE_SOURCES: usize = 64;

impl ModulesSpec {
    /// Whether `registry/repository` is one of the listed sources or under one.
    pub fn allows(&self, registry: &str, repository: &str) -> bool {
        let full = format!("{registry}/{repository}");
        self.images.iter().any(|source| {
            let source = source.trim_end_matches('/');
            full == source
                || full
                    .strip_prefix(source)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    fn validate(&self) -> Result<(), String> {
        if let Some(v) = &self.verification {
            v.validate()
                .map_err(|e| format!("spec.modules.verification: {e}"))?;
        }
        if self.images.len() > MAX_IMAGE_SOURCES {
            return Err(format!(
                "spec.modules.images: {} entries, at most {MAX_IMAGE_SOURCES}",
                self.images.len()
            ));
        }
        for (i, source) in self.images.iter().enumerate() {
            let trimmed = source.trim_end_matches('/');
            let as_ref = if trimmed.contains('/') {
                format!("oci://{trimmed}")
            } else {
                format!("oci://{trimmed}/x")
            };
            if source.contains("://") || source.contains(['@', '*']) || source.len() > 300 {
                return Err(format!(
                    "spec.modules.images[{i}] {:?}: expected HOST[:PORT] or HOST[:PORT]/REPO, without a scheme, tag, digest or wildcard",
                    crate::contract::text::shown_max(source, 100)
                ));
            }
            let parsed = crate::oci::OciRef::parse(&as_ref)
                .map_err(|e| format!("spec.modules.images[{i}]: {}", e.why))?;
            if parsed.tag.is_some() {
                return Err(format!(
                    "spec.modules.images[{i}] {source:?}: a registry or repository, not a tag"
                ));
            }
        }
        Ok(())
    }
}

/// `PluginPolicy.spec.appliesTo`: namespaces by name and/or by labels.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliesTo {
    /// These namespaces.
    #[serde(default)]
    #[schemars(inner(length(max = 63)))]
    pub names: Vec<String>,
    /// The namespaces whose labels match.
    #[serde(default)]
    pub selector: Option<NamespaceSelectorSpec>,
}

impl ClusterPolicySpec {
    /// Checks what serde cannot: every field path parses, the limits are in range, and
    /// the namespace names are DNS labels. The first fault, with its field path.
    pub fn validate(&self) -> Result<(), String> {
        for (i, rule) in self.grants.rules.iter().enumerate() {
            for (j, f) in rule.fields.iter().enumerate() {
                crate::policy::FieldPattern::parse(f)
                    .map_err(|e| format!("spec.rules[{i}].fields[{j}]: {e}"))?;
            }
        }
        crate::policy::PolicyLimits::resolve(&self.grants.limits)
            .map_err(|e| format!("spec.limits.{}: {}", e.field, e.message))?;
        self.modules.validate()?;
        if let Some(sa) = &self.service_account_name
            && !kubeplug_vocab::names::is_dns_subdomain(sa)
        {
            return Err(format!(
                "spec.serviceAccountName {:?} is not a DNS-1123 subdomain",
                crate::contract::text::shown_max(sa, 64)
            ));
        }
        let names = self
            .applies_to
            .names
            .iter()
            .map(|n| ("spec.appliesTo.names", n));
        let extra = self
            .grants
            .namespaces
            .names
            .iter()
            .map(|n| ("spec.namespaces.names", n));
        for (field, n) in names.chain(extra) {
            crate::contract::names::dns_label(field, n)?;
        }
        Ok(())
    }
}

/// Parses an object's `spec` as `T`, with the field path of what does not fit.
pub fn parse_spec<T: for<'de> Deserialize<'de>>(object: &Value) -> Result<T, String> {
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    if spec.is_null() {
        return Err("spec is missing".into());
    }
    serde_json::from_value(spec).map_err(|e| format!("spec: {e}"))
}

/// Parses a Go-style duration (`90s`, `5m`, `1h30m`, `500ms`), as Kubernetes tools write
/// them; at most a day.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 90s, 5m or 1h30m");
    let mut rest = text.trim();
    if rest.is_empty() || rest.len() > 32 {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    if total > 86_400.0 {
        return Err(format!("{text:?} is longer than a day"));
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_sources_match_at_path_boundaries() {
        let m = super::ModulesSpec {
            images: vec!["reg.example:5000/team-a/".into(), "other.example".into()],
            verification: None,
        };
        assert!(m.validate().is_ok());
        assert!(m.allows("reg.example:5000", "team-a"));
        assert!(m.allows("reg.example:5000", "team-a/pinner"));
        assert!(!m.allows("reg.example:5000", "team-ab/pinner"));
        assert!(!m.allows("reg.example", "team-a/pinner"));
        assert!(m.allows("other.example", "anything/at/all"));
        assert!(!m.allows("other.example.evil", "x"));
        assert!(!super::ModulesSpec::default().allows("reg.example", "x"));
        for bad in [
            "oci://reg.example/x",
            "reg.example/x:v1",
            "reg.example/x@sha256:00",
            "reg.example/*",
            "",
            "Reg.Example/UPPER",
        ] {
            let m = super::ModulesSpec {
                images: vec![bad.into()],
                verification: None,
            };
            let err = m.validate().unwrap_err();
            assert!(err.starts_with("spec.modules.images[0]"), "{bad}: {err}");
        }
        let many = super::ModulesSpec {
            images: vec!["r.example".into(); super::MAX_IMAGE_SOURCES + 1],
            verification: None,
        };
        assert!(many.validate().unwrap_err().contains("at most 64"));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn a_plugin_spec_parses_with_defaults() {
        let spec: PluginObjectSpec = parse_spec(&json!({"spec": {
            "module": {"configMap": {"name": "pinner"}},
            "permissions": {"rules": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "verbs": ["patch"], "fields": ["/metadata/labels"]}]}
        }}))
        .unwrap();
        assert_eq!(spec.mode, Mode::Enforce);
        assert_eq!(spec.module.config_map.unwrap().key, "plugin.wasm");
        assert_eq!(spec.permissions.rules.len(), 1);
    }

    #[test]
    fn another_namespaces_config_map_is_an_unknown_field() {
        let err = parse_spec::<PluginObjectSpec>(&json!({"spec": {
            "module": {"configMap": {"name": "pinner", "namespace": "team-b"}}}}))
        .unwrap_err();
        assert!(err.contains("unknown field `namespace`"), "{err}");
        let err = parse_spec::<PluginObjectSpec>(&json!({"metadata": {}})).unwrap_err();
        assert!(err.contains("spec is missing"), "{err}");
    }

    #[test]
    fn a_policy_is_checked_beyond_its_shape() {
        let p = |v: Value| {
            serde_json::from_value::<ClusterPolicySpec>(v)
                .unwrap()
                .validate()
        };
        assert_eq!(p(json!({"appliesTo": {"names": ["team-a"]}})), Ok(()));
        let err = p(json!({"rules": [{"apiVersion": "v1", "kind": "Pod", "fields": ["spec"]}]}));
        assert!(err.unwrap_err().contains("spec.rules[0].fields[0]"));
        let err = p(json!({"limits": {"memoryMib": 4096}})).unwrap_err();
        assert!(err.contains("spec.limits.memoryMib"), "{err}");
        let err = p(json!({"appliesTo": {"names": ["Team_A"]}})).unwrap_err();
        assert!(err.contains("spec.appliesTo.names"), "{err}");
    }

    #[test]
    fn a_policy_keeps_its_shape_and_refuses_unknown_fields_by_name() {
        let spec: ClusterPolicySpec = serde_json::from_value(json!({
            "mode": "enforce", "namespaces": {"names": ["shared"]},
            "reads": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "rules": [{"apiVersion": "v1", "kind": "Pod", "verbs": ["patch"]}],
            "limits": {"timeoutMs": 500}, "appliesTo": {"names": ["team-a"]},
            "serviceAccountName": "runner"
        }))
        .unwrap();
        assert_eq!(spec.grants.mode, Mode::Enforce);
        assert_eq!(spec.grants.namespaces.names, ["shared"]);
        assert_eq!(spec.grants.reads[0].kind, "ConfigMap");
        assert_eq!(spec.grants.rules[0].kind, "Pod");
        assert_eq!(spec.grants.limits.timeout_ms, Some(500));
        assert_eq!(spec.applies_to.names, ["team-a"]);
        let written = serde_json::to_value(&spec).unwrap();
        assert_eq!(written["mode"], "enforce", "the grants are fields of spec");
        assert_eq!(written["appliesTo"]["names"][0], "team-a");
        for (bad, field) in [
            (json!({"rulez": []}), "rulez"),
            (json!({"mode": "enforce", "grants": {}}), "grants"),
            (json!({"limits": {"memMib": 1}}), "memMib"),
        ] {
            let err = serde_json::from_value::<ClusterPolicySpec>(bad).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("unknown field `{field}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("500ms").unwrap().as_millis(), 500);
        for bad in ["", "5", "5d", "m", "1h-3m", "25h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
