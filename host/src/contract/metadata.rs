//! What a plugin says about itself.

use super::KindRef;
use serde::Serialize;

/// A plugin's self-description, read once when it loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginMetadata {
    pub name: String,
    pub version: String,
    /// The kind whose keys it reconciles.
    pub reconciles: KindRef,
    /// Kinds it owns: their changes enqueue the owner's key.
    pub owns: Vec<KindRef>,
    /// Whether requests carry the last successfully reconciled version.
    pub wants_previous: bool,
}

impl PluginMetadata {
    /// Checks what the host relies on: a usable name and well-formed kinds.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !name_ok {
            return Err(format!(
                "plugin name {:?} must be 1-63 characters of a-z, 0-9 and '-'",
                self.name
            ));
        }
        for k in std::iter::once(&self.reconciles).chain(&self.owns) {
            if k.api_version.is_empty() || k.kind.is_empty() {
                return Err(format!("kind {k} needs both apiVersion and kind"));
            }
        }
        Ok(())
    }
}
