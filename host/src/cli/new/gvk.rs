//! A kind named on the command line (`--reconciles`, `--owns`): `GROUP/VERSION/KIND`, or
//! `VERSION/KIND` (or `core/VERSION/KIND`) for the core group, checked as the API server
//! would name it.

use crate::cli::eval::CLUSTER_SCOPED;
use anyhow::bail;

/// A kind named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gvk {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, in CamelCase.
    pub kind: String,
}

impl Gvk {
    /// Parses `GROUP/VERSION/KIND` or `VERSION/KIND` (core group); `flag` names the option in
    /// errors.
    pub fn parse(text: &str, flag: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let (group, version, kind) = match parts[..] {
            [version, kind] => ("", version, kind),
            [group, version, kind] => (group, version, kind),
            _ => bail!(
                "{flag} {text:?} is not GROUP/VERSION/KIND (for example apps/v1/Deployment, or v1/ConfigMap for the core group)"
            ),
        };
        let group = if group == "core" { "" } else { group };
        if !group.is_empty() && !crate::contract::names::is_dns_subdomain(group) {
            bail!("{flag} {text:?}: the group {group:?} is not a DNS subdomain");
        }
        let version_ok = version.starts_with('v')
            && version.len() <= 63
            && version
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !version_ok {
            bail!("{flag} {text:?}: the version {version:?} is not like v1, v1beta1, v2alpha1");
        }
        let kind_ok = kind.len() <= 63
            && kind.starts_with(|c: char| c.is_ascii_uppercase())
            && kind.bytes().all(|b| b.is_ascii_alphanumeric());
        if !kind_ok {
            bail!(
                "{flag} {text:?}: the kind {kind:?} is not a CamelCase name of ASCII letters and digits"
            );
        }
        let api_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Ok(Gvk {
            api_version,
            kind: kind.to_string(),
        })
    }

    /// Whether it is one of the built-in cluster-scoped kinds.
    pub(super) fn cluster_scoped(&self) -> bool {
        CLUSTER_SCOPED.contains(&self.kind.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_with_and_without_a_group() {
        let g = Gvk::parse("apps/v1/Deployment", "--reconciles").unwrap();
        assert_eq!(
            (g.api_version.as_str(), g.kind.as_str()),
            ("apps/v1", "Deployment")
        );
        assert_eq!(Gvk::parse("v1/ConfigMap", "x").unwrap().api_version, "v1");
        assert_eq!(
            Gvk::parse("core/v1/ConfigMap", "x").unwrap().api_version,
            "v1"
        );
        for (bad, why) in [
            ("Deployment", "is not GROUP/VERSION/KIND"),
            ("a/b/c/d", "is not GROUP/VERSION/KIND"),
            ("apps/v1/deployment", "is not a CamelCase name"),
            ("apps/1/Deployment", "is not like v1"),
            ("Apps_x/v1/Foo", "is not a DNS subdomain"),
        ] {
            let err = Gvk::parse(bad, "--owns").unwrap_err().to_string();
            assert!(err.starts_with(&format!("--owns {bad:?}")), "{err}");
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
