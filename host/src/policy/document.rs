//! The policy document as the operator writes it: a Kubernetes-style object
//! (`apiVersion: kubeplug.dev/v1alpha1`, `kind: PluginPolicy`), so that it can become a
//! custom resource later without changing shape. Parsing reports the file, line and field.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The only apiVersion this host reads.
pub const API_VERSION: &str = "kubeplug.dev/v1alpha1";
/// The kind of a policy document.
pub const KIND: &str = "PluginPolicy";

/// A `PluginPolicy` document.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyDocument {
    /// The document's API version.
    pub api_version: String,
    /// Always `PluginPolicy`.
    pub kind: String,
    /// Its name: the plugin instance it governs.
    pub metadata: PolicyMetadata,
    /// What is granted.
    #[serde(default)]
    pub spec: PolicySpec,
}

/// Object metadata; `name` is the plugin instance the policy is for.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyMetadata {
    /// The instance it governs.
    pub name: String,
}

/// A policy file's `spec`: what the operator grants one plugin instance, its configuration
/// and the build it governs. Every field has a safe default when absent (see the module
/// documentation of [`crate::policy`]). Read field by field as the parser streams it (see
/// its `Deserialize`), so errors keep their line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// The mode, namespaces, kinds, rules and limits granted (also a `PluginPolicy`'s).
    #[serde(flatten)]
    pub grants: GrantsSpec,
    /// Free JSON handed to the plugin as its configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// Which build of the plugin this policy governs (default: whatever file has the
    /// instance's name).
    pub plugin: PluginSpec,
}

/// What a policy grants, as written: the fields a policy file's `spec` and a
/// `PluginPolicy`'s `spec` share (each embeds it flattened, so they stay top-level fields of
/// `spec`). Every field grants nothing when absent. Its fields are [`GrantsSpec::FIELDS`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantsSpec {
    /// `enforce` or `dry-run` (the default): in dry-run nothing is sent, every action is
    /// checked and recorded as what would have been done. A PluginPolicy in dry-run holds
    /// every Plugin it applies to in dry-run.
    #[serde(default)]
    pub mode: Mode,
    /// Namespaces the plugin may see and touch, and whether it may write cluster-scoped
    /// objects (default: none). A PluginPolicy's are those its Plugins may request beyond
    /// their own namespace.
    #[serde(default)]
    pub namespaces: NamespacesSpec,
    /// Kinds it may read through the cache beyond the one it reconciles (an owned kind a
    /// rule grants a write on is readable too; a kind the plugin only declares is not).
    #[serde(default)]
    pub reads: Vec<KindSpec>,
    /// Verbs and field paths granted per kind (default: none).
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
    /// Per-call limits and the write budget; a PluginPolicy's are the highest its Plugins
    /// may have.
    #[serde(default)]
    pub limits: LimitsSpec,
}

impl GrantsSpec {
    /// Its field names as written, for the documents that embed it.
    pub const FIELDS: &[&str] = &["mode", "namespaces", "reads", "rules", "limits"];

    /// Reads the value of `key` from `map` into its field when `key` is one of
    /// [`Self::FIELDS`] (`Ok(false)`, nothing read, otherwise): lets a document embedding it
    /// read its fields where they stand, with the parser's position.
    pub fn read_field<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match key {
            "mode" => self.mode = map.next_value()?,
            "namespaces" => self.namespaces = map.next_value()?,
            "reads" => self.reads = map.next_value()?,
            "rules" => self.rules = map.next_value()?,
            "limits" => self.limits = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl PolicySpec {
    /// Its field names as written: [`GrantsSpec::FIELDS`], `config` and `plugin`.
    pub const FIELDS: &[&str] = &[
        "mode",
        "namespaces",
        "reads",
        "rules",
        "limits",
        "config",
        "plugin",
    ];
}

/// Reads a `spec` streaming, unlike serde's `flatten`, which would buffer the grants: their
/// errors would lose their line and a plain scalar such as `2024` in a string field would be
/// refused as a number. An unknown or repeated field is refused by name.
impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("PolicySpec", PolicySpec::FIELDS, PolicySpecVisitor)
    }
}

/// The map visitor of [`PolicySpec`]'s `Deserialize`.
struct PolicySpecVisitor;

impl<'de> Visitor<'de> for PolicySpecVisitor {
    type Value = PolicySpec;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a policy spec (a mapping)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PolicySpec, A::Error> {
        let mut spec = PolicySpec::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Some(&field) = PolicySpec::FIELDS.iter().find(|f| **f == key) else {
                return Err(de::Error::unknown_field(&key, PolicySpec::FIELDS));
            };
            if seen.contains(&field) {
                return Err(de::Error::duplicate_field(field));
            }
            seen.push(field);
            match field {
                "config" => spec.config = map.next_value()?,
                "plugin" => spec.plugin = map.next_value()?,
                _ => {
                    if !spec.grants.read_field(field, &mut map)? {
                        return Err(de::Error::unknown_field(field, PolicySpec::FIELDS));
                    }
                }
            }
        }
        Ok(spec)
    }
}

/// Binds a policy to one build of its plugin: with `sha256` set, only a `.wasm` file with
/// exactly that SHA-256 digest runs under it; another file is refused (and a running
/// version keeps running).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// The SHA-256 of the `.wasm` file, 64 hex digits (`sha256sum` output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl PluginSpec {
    /// The pinned digest in lower case, as the host writes digests.
    pub fn pinned_sha256(&self) -> Option<String> {
        self.sha256.as_deref().map(str::to_ascii_lowercase)
    }
}

/// Whether actions are sent or only recorded.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Allowed actions are sent to the API server.
    Enforce,
    /// Nothing is sent; every action is checked and recorded as what would have been done.
    #[default]
    DryRun,
}

/// Namespaces granted: `all: true`, a list of `names`, and/or namespaces whose labels match
/// `selector.matchLabels`; and, only with `clusterScoped: true`, writes to cluster-scoped
/// objects.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacesSpec {
    /// Every namespace (of the host's scope).
    #[serde(default)]
    pub all: bool,
    /// Writes (per `rules`) to cluster-scoped objects: Namespaces, ClusterRoles, Nodes…
    /// Never implied by `all` or by any namespace name.
    #[serde(default)]
    pub cluster_scoped: bool,
    /// These namespaces, by name.
    #[serde(default)]
    #[schemars(inner(length(max = 63)))]
    pub names: Vec<String>,
    /// The namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<NamespaceSelectorSpec>,
}

/// A label selector on namespaces (`matchLabels` only).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceSelectorSpec {
    /// Labels a namespace must all carry.
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
}

/// A kind: `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindSpec {
    /// `group/version`, or `version` for the core group.
    #[schemars(length(min = 1))]
    pub api_version: String,
    /// The kind, e.g. `ConfigMap`.
    #[schemars(length(min = 1))]
    pub kind: String,
}

/// What the plugin may do to one kind.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// `group/version`, or `version` for the core group.
    #[schemars(length(min = 1))]
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The writes granted on it.
    #[serde(default)]
    pub verbs: Vec<Verb>,
    /// Field path prefixes patches and creates may set (`/spec/template/spec/containers/*/image`).
    #[serde(default)]
    pub fields: Vec<String>,
}

/// A write the plugin may be granted on a kind.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Patch the object itself (and its `scale` subresource).
    Patch,
    /// Patch its `status` subresource.
    PatchStatus,
    /// Create objects of the kind.
    Create,
    /// Delete objects of the kind.
    Delete,
    /// Report Events about objects of the kind.
    Event,
}

impl Verb {
    /// The name used in documents, logs and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Patch => "patch",
            Verb::PatchStatus => "patch-status",
            Verb::Create => "create",
            Verb::Delete => "delete",
            Verb::Event => "event",
        }
    }
}

/// Limits as written; absent ones take the host's defaults (or, for the write budget, 5
/// writes per second with a burst of 10). Checked and resolved into a
/// [`PolicyLimits`](super::PolicyLimits) when the document is parsed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitsSpec {
    /// Memory of one call's sandbox, in MiB (1–1024, the runtime's cap).
    #[schemars(range(min = 1, max = 1024))]
    pub memory_mib: Option<usize>,
    /// Time limit of one call, in milliseconds (1–600000).
    #[schemars(range(min = 1, max = 600_000))]
    pub timeout_ms: Option<u64>,
    /// Most actions one call may return (1–100000).
    #[schemars(range(min = 1, max = 100_000))]
    pub max_actions: Option<usize>,
    /// Sustained API writes per second (default 5).
    #[schemars(extend("exclusiveMinimum" = true, "minimum" = 0))]
    pub writes_per_second: Option<f64>,
    /// Writes allowed at once above the sustained rate (1–100000, default 10).
    #[schemars(range(min = 1, max = 100_000))]
    pub write_burst: Option<u32>,
}

/// Why a policy document cannot be used. Always names the file; `line` where known.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file cannot be read.
    #[error("cannot read policy {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a YAML document of the policy's shape.
    #[error("invalid policy {}: {source}", file.display())]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's error (boxed: it is large, and errors travel in `Result`s).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A field holds a value the host refuses.
    #[error("invalid policy {}{}: field {field}: {message}", file.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Field {
        /// The file.
        file: PathBuf,
        /// The field's line, where known.
        line: Option<usize>,
        /// The field, as a path (`spec.limits.memoryMib`).
        field: String,
        /// What is wrong with its value.
        message: String,
    },
}

impl PolicyDocument {
    /// Parses one policy document; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<PolicyDocument, PolicyError> {
        let doc: PolicyDocument =
            serde_saphyr::from_str(text).map_err(|source| PolicyError::Syntax {
                file: file.to_path_buf(),
                source: Box::new(source),
            })?;
        let field_error = |field: &str, needle: &str, message: String| PolicyError::Field {
            file: file.to_path_buf(),
            line: line_of(text, needle),
            field: field.to_string(),
            message,
        };
        if doc.api_version != API_VERSION {
            return Err(field_error(
                "apiVersion",
                "apiVersion",
                format!("{:?} is not {API_VERSION:?}", doc.api_version),
            ));
        }
        if doc.kind != KIND {
            return Err(field_error(
                "kind",
                "kind",
                format!("{:?} is not {KIND:?}", doc.kind),
            ));
        }
        if doc.metadata.name.is_empty() {
            return Err(field_error("metadata.name", "name", "is empty".into()));
        }
        for (i, rule) in doc.spec.grants.rules.iter().enumerate() {
            for (j, f) in rule.fields.iter().enumerate() {
                if let Err(e) = super::paths::FieldPattern::parse(f) {
                    return Err(field_error(
                        &format!("spec.rules[{i}].fields[{j}]"),
                        f,
                        e.to_string(),
                    ));
                }
            }
        }
        if let Some(pin) = &doc.spec.plugin.sha256
            && !(pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(field_error(
                "spec.plugin.sha256",
                "sha256",
                format!(
                    "{:?} is not a SHA-256 digest (64 hex digits, as sha256sum prints)",
                    crate::contract::text::shown_max(pin, 128)
                ),
            ));
        }
        if let Err(e) = super::limits::PolicyLimits::resolve(&doc.spec.grants.limits) {
            return Err(field_error(
                &format!("spec.limits.{}", e.field),
                e.field,
                e.message,
            ));
        }
        Ok(doc)
    }

    /// Reads and parses a policy file.
    pub fn read(file: &Path) -> Result<PolicyDocument, PolicyError> {
        let text = std::fs::read_to_string(file).map_err(|source| PolicyError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(&text, file)
    }
}

/// The 1-based line of the first occurrence of `needle`, to point at a semantic error.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PolicyDocument, PolicyError> {
        PolicyDocument::parse(text, Path::new("p.policy.yaml"))
    }

    #[test]
    fn parses_a_full_document() {
        let doc = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata:
  name: image-pinner
spec:
  mode: enforce
  namespaces:
    names: [team-a, team-b]
  reads:
    - apiVersion: v1
      kind: ConfigMap
  rules:
    - apiVersion: apps/v1
      kind: Deployment
      verbs: [patch, patch-status, event]
      fields: [/spec/template/spec/containers/*/image]
  limits:
    memoryMib: 32
    timeoutMs: 500
    maxActions: 10
    writesPerSecond: 2.5
    writeBurst: 5
  config:
    image: nginx:1.25
",
        )
        .unwrap();
        assert_eq!(doc.metadata.name, "image-pinner");
        assert_eq!(doc.spec.grants.mode, Mode::Enforce);
        assert_eq!(doc.spec.grants.namespaces.names, ["team-a", "team-b"]);
        assert_eq!(
            doc.spec.grants.rules[0].verbs,
            [Verb::Patch, Verb::PatchStatus, Verb::Event]
        );
        assert_eq!(doc.spec.grants.limits.writes_per_second, Some(2.5));
        assert_eq!(doc.spec.config.unwrap()["image"], "nginx:1.25");
    }

    #[test]
    fn limits_outside_their_range_name_the_field() {
        for (limits, field) in [
            ("{memoryMib: 0}", "memoryMib"),
            ("{memoryMib: 1125899906842624}", "memoryMib"),
            ("{timeoutMs: 0}", "timeoutMs"),
            ("{maxActions: 0}", "maxActions"),
            ("{writeBurst: 0}", "writeBurst"),
        ] {
            let text = format!(
                "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: x}}\nspec:\n  limits: {limits}\n"
            );
            let err = parse(&text).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("between 1 and"),
                "{limits}: {err}"
            );
        }
    }

    #[test]
    fn limits_are_bounded_by_the_runtimes_caps_with_the_line() {
        let doc = |limits: &str| {
            parse(&format!(
                "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: x}}\nspec:\n  limits:\n    {limits}\n"
            ))
        };
        assert!(doc("memoryMib: 1024").is_ok());
        assert!(doc("timeoutMs: 600000").is_ok());
        let err = doc("memoryMib: 1025").unwrap_err().to_string();
        assert!(
            err.contains("line 6")
                && err.contains("spec.limits.memoryMib")
                && err.contains("1024 MiB is the most memory the runtime gives one call's sandbox"),
            "{err}"
        );
        let err = doc("timeoutMs: 600001").unwrap_err().to_string();
        assert!(err.contains("600000 ms is the longest call"), "{err}");
    }

    #[test]
    fn defaults_are_safe() {
        let doc =
            parse("apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: x}\n")
                .unwrap();
        assert_eq!(doc.spec.grants.mode, Mode::DryRun);
        assert!(!doc.spec.grants.namespaces.all && doc.spec.grants.namespaces.names.is_empty());
        assert!(doc.spec.grants.rules.is_empty() && doc.spec.grants.reads.is_empty());
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let err = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: x}
spec:
  mode: enforce
  nmespaces: {all: true}
",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("p.policy.yaml"), "{err}");
        assert!(err.contains("nmespaces"), "{err}");
        assert!(err.contains("line 6"), "{err}");
    }

    #[test]
    fn bad_verb_names_line_and_value() {
        let err = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: x}
spec:
  rules:
    - apiVersion: v1
      kind: Pod
      verbs: [patch, destroy]
  config: {}
",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("destroy") && err.contains("line 8"), "{err}");
    }

    #[test]
    fn the_grants_fields_are_read_where_they_stand() {
        let doc = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: x}
spec:
  namespaces:
    names: [2024]
    selector: {matchLabels: {tier: 1}}
  limits: {memMib: 3}
  config: {}
",
        );
        let err = doc.unwrap_err().to_string();
        assert!(
            err.contains("unknown field `memMib`") && err.contains("line 8"),
            "{err}"
        );
        let doc = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: x}
spec:
  namespaces:
    names: [2024]
    selector: {matchLabels: {tier: 1}}
",
        )
        .unwrap();
        let namespaces = &doc.spec.grants.namespaces;
        assert_eq!(
            namespaces.names,
            ["2024"],
            "a plain scalar is a string here"
        );
        assert_eq!(
            namespaces.selector.as_ref().unwrap().match_labels["tier"],
            "1"
        );
    }

    #[test]
    fn the_field_lists_are_the_types_fields() {
        let schema = schemars::schema_for!(GrantsSpec);
        let mut properties: Vec<&str> = schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .expect("GrantsSpec has properties")
            .keys()
            .map(String::as_str)
            .collect();
        properties.sort_unstable();
        let mut fields = GrantsSpec::FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(fields, properties);
        assert_eq!(
            PolicySpec::FIELDS,
            [GrantsSpec::FIELDS, &["config", "plugin"]].concat()
        );
        let full = PolicySpec {
            grants: GrantsSpec {
                mode: Mode::Enforce,
                namespaces: NamespacesSpec {
                    all: true,
                    names: vec!["a".into()],
                    ..Default::default()
                },
                reads: vec![KindSpec {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                }],
                rules: vec![RuleSpec {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    verbs: vec![Verb::Patch],
                    fields: vec!["/metadata/labels".into()],
                }],
                limits: LimitsSpec {
                    memory_mib: Some(8),
                    ..Default::default()
                },
            },
            config: Some(serde_json::json!({"a": 1})),
            plugin: PluginSpec {
                sha256: Some("ab".repeat(32)),
            },
        };
        let written = serde_json::to_value(&full).unwrap();
        let keys: Vec<&str> = written
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = PolicySpec::FIELDS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected, "flattened: the grants are fields of spec");
        let read: PolicySpec = serde_json::from_value(written).unwrap();
        assert_eq!(read, full, "every field written is read back");
    }

    #[test]
    fn a_repeated_field_is_refused_by_name() {
        let err = serde_json::from_str::<PolicySpec>(r#"{"rules": [], "rules": []}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate field `rules`"), "{err}");
    }

    #[test]
    fn semantic_errors_name_the_field_and_line() {
        let err = parse(
            "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: x}
spec:
  rules:
    - apiVersion: v1
      kind: Pod
      fields: [spec/containers]
",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("line 8") && err.contains("spec.rules[0].fields[0]"),
            "{err}"
        );
        let err = parse("apiVersion: v1\nkind: PluginPolicy\nmetadata: {name: x}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 1") && err.contains("apiVersion"),
            "{err}"
        );
    }

    #[test]
    fn a_digest_pin_is_64_hex_digits() {
        let doc = |pin: &str| {
            parse(&format!(
                "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: x}}\nspec:\n  plugin:\n    sha256: {pin:?}\n"
            ))
        };
        let upper = "AB".repeat(32);
        let pinned = doc(&upper).unwrap().spec.plugin.pinned_sha256();
        assert_eq!(pinned, Some("ab".repeat(32)), "compared in lower case");
        for bad in [
            "ab".repeat(31),
            "ab".repeat(33),
            format!("sha256:{}", "ab".repeat(32)),
            "zz".repeat(32),
        ] {
            let err = doc(&bad).unwrap_err().to_string();
            assert!(
                err.contains("spec.plugin.sha256")
                    && err.contains("line 6")
                    && err.contains("64 hex digits"),
                "{bad}: {err}"
            );
        }
        let none =
            parse("apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: x}\n");
        assert_eq!(none.unwrap().spec.plugin.pinned_sha256(), None);
    }
}
