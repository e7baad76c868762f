//! Kubernetes' rules for the strings a plugin puts where the host builds a URL or a request
//! from them: namespaces, names, generateName prefixes, subresources, apiVersions and kinds.
//! Each check returns why a value is refused, with the value shown capped and escaped.
//!
//! This is the host's one DNS-name module (the predicates come from `kubeplug_vocab::names`,
//! which the embedded API server shares): plugin and instance names, Lease names and
//! namespaces are checked with [`is_dns_label`], [`label_fault`] and [`is_dns_subdomain`]
//! too. A DNS-1123 label (a namespace, an instance name) is at most [`MAX_LABEL`] = 63
//! bytes; a subdomain (an object name, an API group) at most [`MAX_SUBDOMAIN`] = 253.

use super::text::shown;
pub use kubeplug_vocab::names::{
    LabelFault, MAX_LABEL, MAX_SUBDOMAIN, is_dns_label, is_dns_subdomain, label_fault, lower_alnum,
};

/// The most bytes of a kind name.
pub const MAX_KIND: usize = 63;
/// Characters the API server appends to a `generateName` prefix.
const GENERATED_SUFFIX: usize = 5;
/// The subresources a plugin may patch: `status` (the `patch-status` verb) and `scale`
/// (checked as a `patch` of the kind's `/spec/replicas`).
pub const SUBRESOURCES: &[&str] = &["status", "scale"];
/// Kinds whose names may also be path-segment names (`system:controller:foo`), as the
/// API server allows for them.
const PATH_SEGMENT_NAMED: &[(&str, &str)] = &[
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
];

/// Why a name was refused: the rule it broke, with the value as shown (capped and escaped,
/// quoted), never the value itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a DNS-1123 label.
    #[error(
        "{what} {value} is not a DNS-1123 label (lowercase letters, digits and '-', at most {MAX_LABEL})"
    )]
    DnsLabel {
        /// What the value is (`namespace`, `spec.namespaces.names`).
        what: String,
        /// The value as shown.
        value: String,
    },
    /// Not a DNS-1123 subdomain.
    #[error(
        "{what} {value} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most {MAX_SUBDOMAIN})"
    )]
    DnsSubdomain {
        /// What the value is.
        what: String,
        /// The value as shown.
        value: String,
    },
    /// Not an object name of its kind.
    #[error(
        "name {value} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most {MAX_SUBDOMAIN}){}",
        if *path_segment { " nor a path-segment name" } else { "" }
    )]
    ObjectName {
        /// The value as shown.
        value: String,
        /// Whether the kind also takes path-segment names (the RBAC kinds).
        path_segment: bool,
    },
    /// Not a `generateName` prefix.
    #[error(
        "generateName {value} is not a DNS-1123 subdomain prefix (lowercase letters, digits, '-' and '.', at most {})",
        MAX_SUBDOMAIN - GENERATED_SUFFIX
    )]
    GenerateName {
        /// The value as shown.
        value: String,
    },
    /// Not a subresource a plugin may patch.
    #[error("subresource {value} is not one of {SUBRESOURCES:?}")]
    Subresource {
        /// The value as shown.
        value: String,
    },
    /// Not `version` or `group/version`.
    #[error("apiVersion {value} is not `version` or `group/version`")]
    ApiVersion {
        /// The value as shown.
        value: String,
    },
    /// Not a kind name.
    #[error("kind {value} is not a kind name (ASCII letters and digits, at most {MAX_KIND})")]
    Kind {
        /// The value as shown.
        value: String,
    },
}

/// The checks' callers that report in text take the message.
impl From<NameError> for String {
    fn from(err: NameError) -> String {
        err.to_string()
    }
}

/// `value` as an error shows it: capped, escaped, quoted.
fn quoted(value: &str) -> String {
    format!("{:?}", shown(value))
}

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or
/// digit, at most 63 bytes.
pub fn dns_label(what: &str, value: &str) -> Result<(), NameError> {
    if is_dns_label(value) {
        Ok(())
    } else {
        Err(NameError::DnsLabel {
            what: what.to_string(),
            value: quoted(value),
        })
    }
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 bytes.
pub fn dns_subdomain(what: &str, value: &str) -> Result<(), NameError> {
    if is_dns_subdomain(value) {
        Ok(())
    } else {
        Err(NameError::DnsSubdomain {
            what: what.to_string(),
            value: quoted(value),
        })
    }
}

/// A path-segment name as RBAC kinds allow: ASCII letters, digits, `-`, `.`, `_`, `:` and
/// `@`, at most 253 bytes, never `.` or `..`. Nothing a URL treats specially.
fn is_path_segment_name(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_SUBDOMAIN
        && value != "."
        && value != ".."
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '@'))
}

/// An object name of `group`/`kind`: a DNS-1123 subdomain, or for the RBAC kinds a
/// path-segment name.
pub fn object_name(group: &str, kind: &str, value: &str) -> Result<(), NameError> {
    if is_dns_subdomain(value) {
        return Ok(());
    }
    let relaxed = PATH_SEGMENT_NAMED.contains(&(group, kind));
    if relaxed && is_path_segment_name(value) {
        return Ok(());
    }
    Err(NameError::ObjectName {
        value: quoted(value),
        path_segment: relaxed,
    })
}

/// A `generateName` prefix: what the API server appends 5 characters to must stay a
/// DNS-1123 subdomain, so lowercase letters, digits, `-` and `.`, starting with a letter or
/// digit, at most 248 bytes.
pub fn generate_name(value: &str) -> Result<(), NameError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_SUBDOMAIN - GENERATED_SUFFIX
        && value.starts_with(lower_alnum)
        && value
            .chars()
            .all(|c| lower_alnum(c) || c == '-' || c == '.')
        && !value.contains("..");
    if ok {
        Ok(())
    } else {
        Err(NameError::GenerateName {
            value: quoted(value),
        })
    }
}

/// A subresource from [`SUBRESOURCES`].
pub fn subresource(value: &str) -> Result<(), NameError> {
    if SUBRESOURCES.contains(&value) {
        Ok(())
    } else {
        Err(NameError::Subresource {
            value: quoted(value),
        })
    }
}

/// A version: a DNS-1035 label (lowercase letters, digits and `-`, starting with a letter),
/// at most 63 bytes: `v1`, `v1beta1`.
fn is_version(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LABEL
        && value.starts_with(|c: char| c.is_ascii_lowercase())
        && value.ends_with(lower_alnum)
        && value.chars().all(|c| lower_alnum(c) || c == '-')
}

/// An apiVersion: `version` (the core group) or `group/version`, the group a DNS-1123
/// subdomain. It names a discovery URL, so nothing else is accepted.
pub fn api_version(value: &str) -> Result<(), NameError> {
    let ok = match value.split_once('/') {
        None => is_version(value),
        Some((group, version)) => is_dns_subdomain(group) && is_version(version),
    };
    if ok {
        Ok(())
    } else {
        Err(NameError::ApiVersion {
            value: quoted(value),
        })
    }
}

/// A kind: an ASCII letter, then letters and digits (`Deployment`, `ClusterRole`), at most
/// 63 bytes.
pub fn kind(value: &str) -> Result<(), NameError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_KIND
        && value.starts_with(|c: char| c.is_ascii_alphabetic())
        && value.chars().all(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(NameError::Kind {
            value: quoted(value),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names that must never reach a URL, whatever the kind.
    const HOSTILE: &[&str] = &[
        "",
        ".",
        "..",
        "x/../../../demo/deployments/web",
        "x?fieldManager=kube-controller-manager&a=",
        "x#frag",
        "x%2F",
        "a b",
        "a\nb",
        "a\u{0}b",
        "a\tb",
        "Web",
        "-web",
        "web-",
        "web..x",
    ];

    #[test]
    fn hostile_names_are_refused_for_every_kind() {
        for name in HOSTILE {
            assert!(object_name("apps", "Deployment", name).is_err(), "{name:?}");
            assert!(dns_label("namespace", name).is_err(), "{name:?}");
            assert!(subresource(name).is_err(), "{name:?}");
            if *name != "web-" {
                // A prefix may end in `-`: the API server appends the rest.
                assert!(generate_name(name).is_err(), "{name:?}");
            }
        }
        for name in &HOSTILE[..11] {
            assert!(
                object_name("rbac.authorization.k8s.io", "ClusterRole", name).is_err(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn kubernetes_names_are_accepted() {
        for name in ["web", "web-1", "a.b.c", "0", &"a".repeat(253)] {
            assert_eq!(object_name("apps", "Deployment", name), Ok(()), "{name}");
        }
        assert!(object_name("apps", "Deployment", &"a".repeat(254)).is_err());
        assert!(object_name("apps", "Deployment", "system:admin").is_err());
        for name in ["system:controller:foo", "Admin_Role", "a@b"] {
            assert_eq!(
                object_name("rbac.authorization.k8s.io", "ClusterRole", name),
                Ok(()),
                "{name}"
            );
        }
        assert_eq!(dns_label("namespace", "team-a"), Ok(()));
        assert_eq!(dns_label("namespace", &"a".repeat(63)), Ok(()));
        assert!(dns_label("namespace", &"a".repeat(64)).is_err());
        assert!(dns_label("namespace", "team.a").is_err());
        assert_eq!(generate_name("web-"), Ok(()));
        assert_eq!(generate_name("web."), Ok(()));
        assert!(generate_name(&"a".repeat(249)).is_err());
    }

    #[test]
    fn labels_and_subdomains_at_their_caps() {
        assert!(is_dns_label(&"a".repeat(MAX_LABEL)));
        assert_eq!(
            label_fault(&"a".repeat(MAX_LABEL + 1)),
            Some(LabelFault::Length)
        );
        assert_eq!(label_fault(""), Some(LabelFault::Length));
        assert_eq!(label_fault("a.b"), Some(LabelFault::Char('.')));
        assert_eq!(label_fault("A"), Some(LabelFault::Char('A')));
        assert_eq!(label_fault("-a"), Some(LabelFault::Edge));
        assert_eq!(label_fault("a-"), Some(LabelFault::Edge));
        let err = dns_label("namespace", &"a".repeat(MAX_LABEL + 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 63"), "{err}");
        let at_cap = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(at_cap.len(), MAX_SUBDOMAIN);
        assert!(is_dns_subdomain(&at_cap));
        assert!(!is_dns_subdomain(&format!("{at_cap}c")));
        let err = dns_subdomain("group", &format!("{at_cap}c"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 253"), "{err}");
        for bad in ["", ".", "a..b", "a.-b", "a-.b", "A.b", "a_b"] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn subresources_are_a_known_set() {
        assert_eq!(subresource("status"), Ok(()));
        assert_eq!(subresource("scale"), Ok(()));
        for s in ["exec", "proxy", "status/x", "Status", "eviction"] {
            assert!(subresource(s).is_err(), "{s}");
        }
    }

    #[test]
    fn api_versions_and_kinds() {
        for v in [
            "v1",
            "apps/v1",
            "coordination.k8s.io/v1",
            "example.com/v1beta1",
        ] {
            assert_eq!(api_version(v), Ok(()), "{v}");
        }
        for v in [
            "",
            "/v1",
            "apps/",
            "apps/v1/x",
            "../v1",
            "apps/../v1",
            "1",
            "V1",
            "apps/v1?x=y",
            "apps v1",
        ] {
            assert!(api_version(v).is_err(), "{v:?}");
        }
        assert!(api_version(&format!("{}/v1", "a".repeat(254))).is_err());
        for k in ["Deployment", "ClusterRole", "V1Thing"] {
            assert_eq!(kind(k), Ok(()), "{k}");
        }
        for k in ["", "1Pod", "Pod/x", "Pod ", "Pod?", &"P".repeat(64)] {
            assert!(kind(k).is_err(), "{k:?}");
        }
    }

    #[test]
    fn errors_show_a_capped_escaped_value() {
        let huge = format!("x\n{}", "y".repeat(10 << 20));
        let err = object_name("apps", "Deployment", &huge)
            .unwrap_err()
            .to_string();
        assert!(err.len() < 4096, "{}", err.len());
        assert!(err.contains("x\\ny") && !err.contains('\n'), "{err}");
    }
}
