//! A configured plugin: one `.wasm` may run as several instances, each with its own name
//! (its queue, metrics label, policy and field manager) and configuration. The name is
//! always the operator's choice (the reloader takes it from the file name), never the name
//! the plugin declares about itself.

use crate::contract::names::{self, LabelFault};
use crate::contract::text::shown_max;
use crate::plugin::Plugin;
use crate::policy::Policy;
use std::sync::Arc;

/// The longest instance name: a DNS-1123 label, as it becomes part of field managers,
/// metrics labels and policy file names.
pub const MAX_INSTANCE_NAME: usize = names::MAX_LABEL;

/// A plugin as the controller runs it.
#[derive(Debug, Clone)]
pub struct PluginInstance {
    /// Unique within the host; names the queue, the metrics label and the field manager.
    pub name: String,
    /// The compiled plugin it runs.
    pub plugin: Arc<Plugin>,
    /// The operator's configuration, handed to every call as JSON text.
    pub config: Option<Arc<str>>,
    /// What the operator granted it; the default (no policy document) runs it in dry-run.
    pub policy: Arc<Policy>,
}

impl PluginInstance {
    /// `plugin` running as instance `name` with a configuration. The name is checked when
    /// the controller starts the instance ([`validate_instance_name`]).
    pub fn named(plugin: Arc<Plugin>, name: &str, config: Option<&str>) -> Self {
        PluginInstance {
            name: name.to_string(),
            plugin,
            config: config.map(Into::into),
            policy: Arc::default(),
        }
    }

    /// The same instance under `policy`; the policy's configuration, if it has one,
    /// replaces the instance's.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        if policy.config.is_some() {
            self.config = policy.config.clone();
        }
        self.policy = Arc::new(policy);
        self
    }
}

/// Checks that `name` can name an instance: a DNS-1123 label (1 to 63 characters of `a-z`,
/// `0-9` and `-`, starting and ending with a letter or digit). Upper case is refused rather
/// than folded, so two spellings can never stand for one instance.
pub fn validate_instance_name(name: &str) -> Result<(), String> {
    let rule = "an instance name must be a DNS-1123 label: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit";
    let shown = shown_max(name, 2 * MAX_INSTANCE_NAME);
    match names::label_fault(name) {
        None => Ok(()),
        Some(LabelFault::Length) => Err(format!("{shown:?} is {} bytes long; {rule}", name.len())),
        Some(LabelFault::Char(bad)) => {
            let mut buf = [0; 4];
            let bad = shown_max(bad.encode_utf8(&mut buf), 4);
            Err(format!("{shown:?} contains {bad:?}; {rule}"))
        }
        Some(LabelFault::Edge) => Err(format!("{shown:?} starts or ends with '-'; {rule}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_are_dns_labels() {
        for ok in ["a", "image-pinner", "p2", "0x", &"a".repeat(63)] {
            assert_eq!(validate_instance_name(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "0 bytes"),
            (&"a".repeat(64) as &str, "64 bytes"),
            ("Image-Pinner", "contains \"I\""),
            ("image_pinner", "contains \"_\""),
            ("image.pinner", "contains \".\""),
            ("іmage-pinner", "contains \"і\""),
            ("pinner\n", "contains \"\\n\""),
            ("-pinner", "starts or ends"),
            ("pinner-", "starts or ends"),
        ] {
            let err = validate_instance_name(bad).unwrap_err();
            assert!(
                err.contains(why) && err.contains("DNS-1123"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn a_huge_name_is_not_repeated_whole() {
        let err = validate_instance_name(&"x".repeat(1 << 20)).unwrap_err();
        assert!(err.len() < 1024, "{} bytes", err.len());
    }
}
