//! DNS-1123 labels and subdomains, the Kubernetes API's rules for names: checked the same way
//! by the host (plugin names, object names, Lease identities) and the embedded API server.

/// The longest DNS-1123 label (a namespace, a plugin name).
pub const MAX_LABEL: usize = 63;
/// The longest DNS-1123 subdomain (most object names).
pub const MAX_SUBDOMAIN: usize = 253;

/// Whether `c` is a lowercase ASCII letter or a digit.
pub fn lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// What keeps a value from being a DNS-1123 label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelFault {
    /// It is empty or longer than [`MAX_LABEL`] bytes.
    Length,
    /// It holds this character, which is not `a-z`, `0-9` or `-`.
    Char(char),
    /// It starts or ends with `-`.
    Edge,
}

/// The first thing (length, then characters, then its ends) that keeps `value` from being a
/// DNS-1123 label, or `None` when it is one.
pub fn label_fault(value: &str) -> Option<LabelFault> {
    if value.is_empty() || value.len() > MAX_LABEL {
        return Some(LabelFault::Length);
    }
    if let Some(bad) = value.chars().find(|&c| !(lower_alnum(c) || c == '-')) {
        return Some(LabelFault::Char(bad));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Some(LabelFault::Edge);
    }
    None
}

/// Whether `value` is a DNS-1123 label: lowercase letters, digits and `-`, starting and ending
/// with a letter or digit, at most 63 bytes.
pub fn is_dns_label(value: &str) -> bool {
    label_fault(value).is_none()
}

/// Whether `value` is a DNS-1123 subdomain: dot-separated parts of lowercase letters, digits
/// and `-`, each starting and ending with a letter or digit, at most 253 bytes in all (the
/// API server's rule, which bounds the whole, not each part).
pub fn is_dns_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_SUBDOMAIN
        && value.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| lower_alnum(c) || c == '-')
                && part.starts_with(lower_alnum)
                && part.ends_with(lower_alnum)
        })
}

/// Whether `value` is a host name: dot-separated labels of ASCII letters (either case, as DNS
/// compares them), digits and `-`, each 1 to 63 bytes and not starting or ending with `-`, at
/// most 253 bytes in all (a registry's host, an allowed dashboard origin).
pub fn is_hostname(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_SUBDOMAIN
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= MAX_LABEL
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_take_either_case_and_bound_each_label() {
        assert!(is_hostname("Registry.example.com") && is_hostname("10.0.0.5"));
        assert!(!is_hostname("a..b") && !is_hostname("-a.b") && !is_hostname("a_b"));
        assert!(is_hostname(&"a".repeat(63)) && !is_hostname(&"a".repeat(64)));
        assert!(!is_hostname(&format!("{0}.{0}.{0}.{0}", "a".repeat(63))));
    }

    #[test]
    fn labels_and_subdomains_follow_the_api_servers_rules() {
        assert!(is_dns_label(&"a".repeat(63)) && !is_dns_label(&"a".repeat(64)));
        assert_eq!(label_fault("-a"), Some(LabelFault::Edge));
        assert_eq!(label_fault("a_b"), Some(LabelFault::Char('_')));
        assert_eq!(label_fault(""), Some(LabelFault::Length));
        let long = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert!(is_dns_subdomain(&long) && !is_dns_subdomain(&format!("{long}c")));
        for bad in ["a..b", ".a", "a.", "A", "a/b", "-a.b"] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
