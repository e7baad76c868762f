//! The policy file of each plugin as the reloader last read it: a malformed file keeps the
//! last good state (another file, or none: the dry-run default) in force.

use super::files::digest;
use super::state::PolicyContent;
use crate::policy::{Policy, PolicyDocument, PolicyError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The policy file of one plugin.
#[derive(Default)]
pub(crate) struct PolicyEntry {
    /// The file as last read; `None` before the first read and after a failed read.
    pub seen: Option<PolicyContent>,
    /// The last readable state: `None` text means no file, the dry-run default.
    pub good: Option<GoodPolicy>,
    /// Why the current file does not parse.
    pub error: Option<String>,
}

/// A policy state that can run: the parsed file and its digest, or no file at all.
#[derive(Clone)]
pub(crate) struct GoodPolicy {
    /// What it was read from.
    pub content: PolicyContent,
    document: Option<Arc<PolicyDocument>>,
    file: PathBuf,
}

impl GoodPolicy {
    /// The policy of instance `name` this state stands for: the file's (checked when it was
    /// read), or the dry-run default.
    pub fn policy(&self, name: &str) -> Result<Policy, PolicyError> {
        match &self.document {
            Some(doc) => Policy::from_document(doc, name, &self.file),
            None => Ok(Policy::default()),
        }
    }
}

/// Reads the policy file of `name` when it changed since last time (or `force`).
pub(crate) fn read_policy(
    policies: &mut HashMap<String, PolicyEntry>,
    name: &str,
    file: &Path,
    force: bool,
) {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => Some(t),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            let entry = policies.entry(name.to_string()).or_default();
            entry.error = Some(format!("cannot read policy {}: {err}", file.display()));
            entry.seen = None;
            return;
        }
    };
    let seen = match &text {
        Some(t) => PolicyContent::File(digest(t.as_bytes())),
        None => PolicyContent::Absent,
    };
    let entry = policies.entry(name.to_string()).or_default();
    if entry.seen.as_ref() == Some(&seen) && !(force && entry.error.is_some()) {
        return;
    }
    entry.seen = Some(seen.clone());
    let document = match text.map(|t| PolicyDocument::parse(&t, file)).transpose() {
        Ok(d) => d.map(Arc::new),
        Err(err) => {
            entry.error = Some(err.to_string());
            return;
        }
    };
    let candidate = GoodPolicy {
        content: seen,
        document,
        file: file.to_path_buf(),
    };
    match candidate.policy(name) {
        Ok(_) => {
            if candidate.document.is_none() {
                tracing::warn!(plugin = name, policy = %file.display(), "no policy: running in dry-run (actions are audited, not sent)");
            }
            entry.good = Some(candidate);
            entry.error = None;
        }
        Err(err) => entry.error = Some(err.to_string()),
    }
}
