//! The status shapes of the two CRDs, as the host writes them ([`super::status`] builds
//! them) and as the generated CRDs declare them (`kubeplug crds`): one type for both, so
//! the schema cannot drift from what is written. Nothing in a status is required by the
//! schema (absent fields take their defaults), as in the hand-written CRDs before: a status
//! another writer left partial is stored, and the host rebuilds it from its records.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `Plugin.status`: kstatus conditions plus what runs, written by one kubeplug replica.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PluginStatus {
    /// The metadata.generation this status describes.
    pub observed_generation: i64,
    /// Ready (the current generation runs), Reconciling, Stalled (with a reason) and
    /// Shadowing (a new revision runs in shadow).
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The mode the current revision runs in, after policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The running module's SHA-256 (`sha256:` and 64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Its first 12 hex digits (printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_digest: Option<String>,
    /// The image it was pulled from, pinned to the manifest's digest
    /// (oci://HOST/REPO:TAG@sha256:…); absent for a ConfigMap module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// What the module declares about itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<Declared>,
    /// The effective grant, in short form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// Which replica (or shards) runs it.
    pub runner: String,
    /// Recent counts seen by the replica that runs it.
    pub counts: Counts,
    /// The shadow rollout in progress or last finished: keys compared, agreeing, differing,
    /// example differences, why it was (not) promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub rollout: Option<Value>,
    /// The last few revisions that ran, newest first (rollback = re-apply one).
    #[schemars(with = "Vec<RevisionEntry>")]
    pub revisions: Vec<Value>,
}

/// `PluginPolicy.status`: whether kubeplug parsed and uses it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PluginPolicyStatus {
    /// The metadata.generation this status describes.
    pub observed_generation: i64,
    /// Ready (the policy parsed and is in force) or Stalled with a reason.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A kstatus condition (the shape of `metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Ready, Reconciling, Stalled or Shadowing.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// Machine-readable CamelCase reason (ModuleNotFound, DigestMismatch, CompileFailed,
    /// PermissionsExceedPolicy, ...).
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub reason: String,
    /// One line for humans.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
    /// The generation the condition was set for.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub observed_generation: i64,
    /// When the status last changed (RFC 3339).
    #[serde(default)]
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// Not known.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

/// What a module declares about itself.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct Declared {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The WIT contract version it was built against.
    pub contract: String,
}

/// Reconciles, errors and denied actions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct Counts {
    /// Reconciles.
    pub reconciles: u64,
    /// Reconciles that failed.
    pub errors: u64,
    /// Actions the policy denied.
    pub denied: u64,
}

/// One revision that ran.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default)]
pub struct RevisionEntry {
    /// `sha256:` and the module's 64 hex digits.
    pub digest: String,
    /// The image it came from, pinned by digest; absent for a ConfigMap module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The Plugin's generation it started from.
    pub generation: i64,
    /// When it started (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
}

/// The schema of an object whose fields the host chooses freely (kept as written).
fn free_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}
