//! Multi-tenant policy: what each plugin may read and write, checked before any API call,
//! with every decision audited. See `README.md` in this folder for the document format and
//! its defaults.
//!
//! Defaults, in short: a plugin **without** a policy runs in dry-run (nothing is sent, every
//! action is audited as what would have been done), sees every namespace of the host's
//! scope and reads only the kind it reconciles (never a kind merely because the plugin
//! declares it owns it). A policy document's absent fields grant nothing: no namespaces, no
//! extra kinds, no verbs, no field paths, dry-run, a write budget of 5 writes/s (burst 10)
//! and the host's memory, timeout and action limits.
//!
//! Rule per call: **all-or-nothing**. If any action of a call is denied, none of its API
//! actions are sent (each is recorded as denied); its logs and requeue-after still apply.

mod audit;
mod budget;
mod check;
mod document;
mod grants;
mod limits;
mod paths;

pub use audit::{
    AuditRecord, AuditSink, CallDecisions, Decision, PluginIdentity, decision_line, digest,
};
pub use budget::{
    DEFAULT_WRITE_BURST, DEFAULT_WRITES_PER_SECOND, MAX_WRITE_BURST, WriteBudget, WriteRate,
    WriteRateError,
};
pub use check::{Denial, Grant, check_call, is_write, kind_of, namespace_of};
pub use document::{
    API_VERSION, GrantsSpec, KIND, KindSpec, LimitsSpec, Mode, NamespaceSelectorSpec,
    NamespacesSpec, PluginSpec, PolicyDocument, PolicyError, PolicyMetadata, PolicySpec, RuleSpec,
    Verb,
};
pub use grants::{Grants, NamespaceLabels, NamespaceSelector, Namespaces, Rule, Rules};
pub use limits::{LimitsFieldError, PolicyLimits};
pub use paths::{
    FieldPath, FieldPattern, PathError, apply_paths, create_paths, json_patch_paths,
    merge_patch_paths, strategic_patch_paths,
};

use crate::cluster::Principal;
use crate::plugin::Limits;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A plugin's policy, ready to enforce.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Enforce (send allowed actions) or dry-run (audit only).
    pub mode: Mode,
    /// What the plugin may read and write.
    pub grants: Grants,
    /// Its limits, checked and resolved when its document was read (absent call limits:
    /// the host's).
    pub limits: PolicyLimits,
    /// The configuration handed to the plugin (JSON text).
    pub config: Option<Arc<str>>,
    /// The file it came from; `None` for the default of a plugin without a policy.
    pub source: Option<PathBuf>,
    /// The only plugin file digest (SHA-256, lower-case hex) this policy governs, if pinned.
    pub plugin_sha256: Option<String>,
    /// Who its writes are sent as (impersonated), so the API server's RBAC bounds them
    /// too: a Plugin object's ServiceAccount. `None`: as the host (plugin files, whose
    /// policy the operator wrote).
    pub principal: Option<Principal>,
}

impl Policy {
    /// This policy with its namespace label selector (if any) looking labels up in
    /// `namespaces`, the host's `v1 Namespace` cache: what the controller runs.
    pub fn bind_namespaces(&self, namespaces: Arc<dyn NamespaceLabels>) -> Policy {
        let mut bound = self.clone();
        bound.grants.namespaces = self.grants.namespaces.bound(namespaces);
        bound
    }
}

impl Default for Policy {
    /// The policy of a plugin without a document: dry-run, every namespace, reads only the
    /// kind it reconciles, every action checked as allowed (and so recorded as dry-run).
    fn default() -> Self {
        Policy {
            mode: Mode::DryRun,
            grants: Grants::unconfigured(),
            limits: PolicyLimits::default(),
            config: None,
            source: None,
            plugin_sha256: None,
            principal: None,
        }
    }
}

impl Policy {
    /// Full trust, as before policies existed: enforce, every namespace, every verb and
    /// field, no write budget. For single-tenant hosts and tests, never a default.
    pub fn trusted() -> Self {
        Policy {
            mode: Mode::Enforce,
            limits: PolicyLimits::unlimited_writes(),
            ..Policy::default()
        }
    }

    /// The policy of a parsed document for the plugin instance `name`.
    pub fn from_document(
        doc: &PolicyDocument,
        name: &str,
        file: &Path,
    ) -> Result<Self, PolicyError> {
        if doc.metadata.name != name {
            return Err(PolicyError::Field {
                file: file.to_path_buf(),
                line: None,
                field: "metadata.name".into(),
                message: format!("{:?} is not the plugin's name {name:?}", doc.metadata.name),
            });
        }
        let grants = Grants::from_spec(&doc.spec.grants).map_err(|e| PolicyError::Field {
            file: file.to_path_buf(),
            line: None,
            field: "spec.rules.fields".into(),
            message: e.to_string(),
        })?;
        // Checked with its line already when the document was parsed; checked here again
        // for a document built otherwise.
        let limits =
            PolicyLimits::resolve(&doc.spec.grants.limits).map_err(|e| PolicyError::Field {
                file: file.to_path_buf(),
                line: None,
                field: format!("spec.limits.{}", e.field),
                message: e.message,
            })?;
        Ok(Policy {
            mode: doc.spec.grants.mode,
            grants,
            limits,
            config: doc.spec.config.as_ref().map(|c| c.to_string().into()),
            source: Some(file.to_path_buf()),
            plugin_sha256: doc.spec.plugin.pinned_sha256(),
            principal: None,
        })
    }

    /// Reads `file` as the policy of plugin instance `name`.
    pub fn read(file: &Path, name: &str) -> Result<Self, PolicyError> {
        Self::from_document(&PolicyDocument::read(file)?, name, file)
    }

    /// The host's per-call limits with this policy's overrides.
    pub fn call_limits(&self, host: Limits) -> Limits {
        self.limits.call_limits(host)
    }

    /// A fresh write budget as this policy sets it.
    pub fn write_budget(&self) -> WriteBudget {
        self.limits.write_rate().budget()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_policies_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
        for name in ["image-pinner", "change-logger"] {
            let p = Policy::read(&dir.join(format!("{name}.policy.yaml")), name).unwrap();
            assert_eq!(p.mode, Mode::Enforce, "{name}");
        }
    }

    #[test]
    fn limits_override_the_host_and_name_must_match() {
        let text = "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: a}
spec:
  limits: {memoryMib: 8, timeoutMs: 200, maxActions: 3}
  config: {image: x}
";
        let file = Path::new("a.policy.yaml");
        let doc = PolicyDocument::parse(text, file).unwrap();
        let p = Policy::from_document(&doc, "a", file).unwrap();
        let l = p.call_limits(Limits::default());
        assert_eq!(
            (l.memory_bytes, l.timeout, l.output.max_actions),
            (8 << 20, std::time::Duration::from_millis(200), 3)
        );
        assert_eq!(p.config.as_deref(), Some(r#"{"image":"x"}"#));
        assert_eq!(p.mode, Mode::DryRun);
        let err = Policy::from_document(&doc, "b", file)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.policy.yaml") && err.contains("metadata.name"),
            "{err}"
        );
        let default = Policy::default().call_limits(Limits::default());
        assert_eq!(default.timeout, Limits::default().timeout);
    }
}
