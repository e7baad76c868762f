//! What a plugin says about itself, and the bounds it must keep: metadata is read once at
//! load and then used by routing, watches and every audit record, so each field is capped
//! before anything uses it.

use super::KindRef;
use super::names::{self, is_dns_label};
use super::text::shown_max;
use serde::Serialize;

/// The longest name a plugin may declare: a DNS-1123 label.
pub const MAX_PLUGIN_NAME_BYTES: usize = names::MAX_LABEL;
/// The longest plugin version.
pub const MAX_VERSION_BYTES: usize = 128;
/// The most kinds a plugin may declare it owns.
pub const MAX_OWNED_KINDS: usize = 16;
/// The longest apiVersion: a group (a DNS subdomain, 253) and a version (a DNS label, 63).
pub const MAX_API_VERSION_BYTES: usize = names::MAX_SUBDOMAIN + 1 + names::MAX_LABEL;
/// The longest kind name (a DNS label once lower-cased, as for custom resources).
pub const MAX_KIND_BYTES: usize = names::MAX_KIND;

/// How much of a refused value an error shows.
const SHOWN: usize = 64;

/// A plugin's self-description, read once when it loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginMetadata {
    /// The name the plugin declares (shown only: the file's name is the instance's).
    pub name: String,
    /// The plugin's own version, e.g. `1.2.0`.
    pub version: String,
    /// The kind whose keys it reconciles.
    pub reconciles: KindRef,
    /// Kinds it owns: their changes enqueue the owner's key.
    pub owns: Vec<KindRef>,
    /// Whether requests carry the last successfully reconciled version.
    pub wants_previous: bool,
}

/// Whether `s` is an apiVersion: `version` or `group/version`, by the one grammar the host
/// checks everywhere ([`names::api_version`], the API server's).
fn is_api_version(s: &str) -> bool {
    names::api_version(s).is_ok()
}

/// Whether `s` is a kind name ([`names::kind`]).
fn is_kind(s: &str) -> bool {
    names::kind(s).is_ok()
}

/// Why a plugin's metadata was refused (a refused value shown capped and escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// More owned kinds than [`MAX_OWNED_KINDS`].
    #[error("declares {count} owned kinds, more than the limit of {MAX_OWNED_KINDS}")]
    TooManyOwnedKinds {
        /// How many it declared.
        count: usize,
    },
    /// A name that is not a DNS label.
    #[error(
        "plugin name {value} ({bytes} bytes) must be a DNS label: 1-{MAX_PLUGIN_NAME_BYTES} characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
    )]
    Name {
        /// The name as shown.
        value: String,
        /// Its length.
        bytes: usize,
    },
    /// An empty, long or unprintable version.
    #[error(
        "version {value} ({bytes} bytes) must be 1-{MAX_VERSION_BYTES} bytes without spaces or control characters"
    )]
    Version {
        /// The version as shown.
        value: String,
        /// Its length.
        bytes: usize,
    },
    /// A declared kind whose apiVersion is not `version` or `group/version`.
    #[error(
        "{role}: apiVersion {value} ({bytes} bytes) must be `version` or `group/version` (a DNS subdomain and a lower-case version, at most {MAX_API_VERSION_BYTES} bytes)"
    )]
    ApiVersion {
        /// Where it was declared (`reconciled kind`, `owned kind 3`).
        role: String,
        /// The apiVersion as shown.
        value: String,
        /// Its length.
        bytes: usize,
    },
    /// A declared kind whose name is not a kind name.
    #[error(
        "{role}: kind {value} ({bytes} bytes) must be 1-{MAX_KIND_BYTES} ASCII letters and digits, starting with a letter"
    )]
    Kind {
        /// Where it was declared.
        role: String,
        /// The kind as shown.
        value: String,
        /// Its length.
        bytes: usize,
    },
}

/// `value` as an error shows it: its first [`SHOWN`] bytes, escaped and quoted.
fn quoted(value: &str) -> String {
    format!("{:?}", shown_max(value, SHOWN))
}

/// Checks one declared kind; `role` says where it was declared.
fn check_kind(role: &str, k: &KindRef) -> Result<(), MetadataError> {
    if !is_api_version(&k.api_version) {
        return Err(MetadataError::ApiVersion {
            role: role.to_string(),
            value: quoted(&k.api_version),
            bytes: k.api_version.len(),
        });
    }
    if !is_kind(&k.kind) {
        return Err(MetadataError::Kind {
            role: role.to_string(),
            value: quoted(&k.kind),
            bytes: k.kind.len(),
        });
    }
    Ok(())
}

impl PluginMetadata {
    /// Refuses more than [`MAX_OWNED_KINDS`] owned kinds; checked first, on the count
    /// alone, before the kinds are converted or compared with anything.
    pub fn check_owned_count(count: usize) -> Result<(), MetadataError> {
        if count > MAX_OWNED_KINDS {
            return Err(MetadataError::TooManyOwnedKinds { count });
        }
        Ok(())
    }

    /// Checks what the host relies on, sizes first: a DNS-label name, a short printable
    /// version, at most [`MAX_OWNED_KINDS`] owned kinds, well-formed kinds. Errors show at
    /// most a short, escaped prefix of a refused value.
    pub fn validate(&self) -> Result<(), MetadataError> {
        Self::check_owned_count(self.owns.len())?;
        if !is_dns_label(&self.name) {
            return Err(MetadataError::Name {
                value: quoted(&self.name),
                bytes: self.name.len(),
            });
        }
        let version_ok = !self.version.is_empty()
            && self.version.len() <= MAX_VERSION_BYTES
            && self
                .version
                .chars()
                .all(|c| c.is_ascii_graphic() || c.is_alphanumeric());
        if !version_ok {
            return Err(MetadataError::Version {
                value: quoted(&self.version),
                bytes: self.version.len(),
            });
        }
        check_kind("reconciled kind", &self.reconciles)?;
        for (i, k) in self.owns.iter().enumerate() {
            check_kind(&format!("owned kind {i}"), k)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> PluginMetadata {
        PluginMetadata {
            name: "image-pinner".into(),
            version: "0.1.0+build.7".into(),
            reconciles: KindRef::new("apps/v1", "Deployment"),
            owns: vec![
                KindRef::new("v1", "ConfigMap"),
                KindRef::new("example.com/v1alpha1", "Widget"),
            ],
            wants_previous: false,
        }
    }

    #[test]
    fn well_formed_metadata_passes() {
        assert_eq!(meta().validate(), Ok(()));
    }

    #[test]
    fn too_many_owned_kinds_are_refused_on_the_count_before_any_kind_is_looked_at() {
        let mut m = meta();
        // Every kind is malformed: were they looked at, the error would be about a kind.
        m.owns = vec![KindRef::new("", "\n"); 100_000];
        let err = m.validate().unwrap_err().to_string();
        assert_eq!(
            err,
            "declares 100000 owned kinds, more than the limit of 16"
        );
        m.owns.truncate(MAX_OWNED_KINDS);
        assert!(
            m.validate()
                .unwrap_err()
                .to_string()
                .starts_with("owned kind 0: ")
        );
        assert!(matches!(
            m.validate(),
            Err(MetadataError::ApiVersion { role, bytes: 0, .. }) if role == "owned kind 0"
        ));
    }

    #[test]
    fn huge_names_and_versions_are_refused_without_being_repeated() {
        let mut m = meta();
        m.name = "a".repeat(10 << 20);
        let err = m.validate().unwrap_err().to_string();
        assert!(err.len() < 400, "{} bytes", err.len());
        assert!(err.contains("(10485760 bytes)"), "{err}");
        let mut m = meta();
        m.version = "1".repeat(40 << 20);
        let err = m.validate().unwrap_err().to_string();
        assert!(err.len() < 400 && err.contains("41943040 bytes"), "{err}");
        m.version = "1".repeat(MAX_VERSION_BYTES);
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn names_are_dns_labels_and_versions_printable() {
        for bad in ["", "-x", "x-", "Upper", "a_b", "a.b", &"a".repeat(64)] {
            let mut m = meta();
            m.name = bad.into();
            assert!(m.validate().is_err(), "{bad:?}");
        }
        for bad in ["", "1.0 beta", "1.0\n2026 ERROR forged", "\u{1b}[31m"] {
            let mut m = meta();
            m.version = bad.into();
            let err = m.validate().unwrap_err().to_string();
            assert!(!err.contains('\n') && !err.contains('\u{1b}'), "{err}");
        }
    }

    #[test]
    fn kinds_are_checked_for_shape_and_length() {
        for (api_version, kind) in [
            ("", "Pod"),
            ("v1", ""),
            ("Apps/v1", "Deployment"),
            ("apps/", "Deployment"),
            ("apps/v1/x", "Deployment"),
            ("v1", "Pod\u{1b}[2J"),
            ("v1", "9Pod"),
            ("v1", &"P".repeat(64)),
            (&format!("{}/v1", "a".repeat(300)), "Pod"),
        ] {
            let mut m = meta();
            m.reconciles = KindRef::new(api_version, kind);
            let err = m.validate().unwrap_err().to_string();
            assert!(err.starts_with("reconciled kind: "), "{err}");
            assert!(!err.contains('\u{1b}'), "{err}");
        }
    }
}
