//! An instance: a plugin configured to run under a name. One `.wasm` may run as several
//! instances, each with its own name (its queue, metrics label, policy and field manager) and
//! configuration. The name is always the operator's choice (the reloader takes it from the
//! file name), never the name the plugin declares about itself, and it is parsed once, where
//! it enters ([`InstanceName::parse`]).

use crate::contract::names::{self, LabelFault};
use crate::contract::text::shown_max;
use crate::plugin::Plugin;
use crate::policy::Policy;
use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// The longest instance name: a DNS-1123 label, as it becomes part of field managers,
/// metrics labels and policy file names.
pub const MAX_INSTANCE_NAME: usize = names::MAX_LABEL;

/// The longest `<namespace>/<name>` of an instance backed by a `Plugin` object: 128 bytes
/// of field manager less the `kubeplug/` prefix.
pub const MAX_OBJECT_INSTANCE_NAME: usize = 128 - "kubeplug/".len();

/// An instance's name, checked: a DNS-1123 label (1 to 63 characters of `a-z`, `0-9` and
/// `-`, starting and ending with a letter or digit). Upper case is refused rather than
/// folded, so two spellings can never stand for one instance. Cloning shares the text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceName(Arc<str>);

/// A name that cannot name an instance, with the rule it breaks (the name shown escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidName(String);

/// What a shadow instance's name ends with.
pub const SHADOW_SUFFIX: &str = "@shadow";

/// The live instance `name` stands for (itself, or the one a shadow instance shadows), and
/// whether `name` is a shadow's.
pub fn live_of(name: &str) -> (&str, bool) {
    match name.strip_suffix(SHADOW_SUFFIX) {
        Some(live) => (live, true),
        None => (name, false),
    }
}

impl InstanceName {
    /// Checks `name` and keeps it.
    pub fn parse(name: &str) -> Result<Self, InvalidName> {
        let rule = "an instance name must be a DNS-1123 label: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit";
        let shown = shown_max(name, 2 * MAX_INSTANCE_NAME);
        let why = match names::label_fault(name) {
            None => return Ok(InstanceName(name.into())),
            Some(LabelFault::Length) => format!("{shown:?} is {} bytes long; {rule}", name.len()),
            Some(LabelFault::Char(bad)) => {
                let mut buf = [0; 4];
                let bad = shown_max(bad.encode_utf8(&mut buf), 4);
                format!("{shown:?} contains {bad:?}; {rule}")
            }
            Some(LabelFault::Edge) => format!("{shown:?} starts or ends with '-'; {rule}"),
        };
        Err(InvalidName(why))
    }

    /// The instance of the `Plugin` object `namespace/name`: both DNS-1123 labels, and at
    /// most [`MAX_OBJECT_INSTANCE_NAME`] bytes together (with the `kubeplug/` prefix it is a
    /// field manager, which the API server caps at 128 bytes). The `/` keeps it apart from
    /// every file-backed instance, whose names never contain one.
    pub fn object(namespace: &str, name: &str) -> Result<Self, InvalidName> {
        for (what, part) in [("namespace", namespace), ("name", name)] {
            if names::label_fault(part).is_some() {
                let shown = shown_max(part, 2 * MAX_INSTANCE_NAME);
                return Err(InvalidName(format!(
                    "the Plugin's {what} {shown:?} is not a DNS-1123 label (1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit)"
                )));
            }
        }
        let full = format!("{namespace}/{name}");
        if full.len() > MAX_OBJECT_INSTANCE_NAME {
            return Err(InvalidName(format!(
                "{full:?} is {} bytes long; a Plugin's namespace and name together may be at most {MAX_OBJECT_INSTANCE_NAME} bytes (its field manager is kubeplug/<namespace>/<name>, at most 128)",
                full.len()
            )));
        }
        Ok(InstanceName(full.into()))
    }

    /// The instance that runs this one's candidate revision in shadow (dry-run, beside it,
    /// on the same keys): `<name>@shadow`. No other instance name contains `@`.
    pub fn shadow(&self) -> InstanceName {
        InstanceName(format!("{}{SHADOW_SUFFIX}", self.0).into())
    }

    /// Whether this is a shadow instance.
    pub fn is_shadow(&self) -> bool {
        self.0.ends_with(SHADOW_SUFFIX)
    }

    /// The `Plugin` object this instance runs, as (namespace, name); `None` for a
    /// file-backed instance.
    pub fn object_ref(&self) -> Option<(&str, &str)> {
        self.0.split_once('/')
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for InstanceName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for InstanceName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An instance as the controller runs it.
#[derive(Debug, Clone)]
pub struct PluginInstance {
    /// Unique within the host; names the queue, the metrics label and the field manager.
    /// A name given as text that does not parse is kept as its error, which the controller
    /// reports when asked to run the instance.
    name: Result<InstanceName, InvalidName>,
    /// The compiled plugin it runs.
    pub plugin: Arc<Plugin>,
    /// The operator's configuration, handed to every call as JSON text.
    pub config: Option<Arc<str>>,
    /// What the operator granted it; the default (no policy document) runs it in dry-run.
    pub policy: Arc<Policy>,
}

impl PluginInstance {
    /// `plugin` running as instance `name` with a configuration.
    pub fn new(plugin: Arc<Plugin>, name: InstanceName, config: Option<&str>) -> Self {
        PluginInstance {
            name: Ok(name),
            plugin,
            config: config.map(Into::into),
            policy: Arc::default(),
        }
    }

    /// `plugin` running as instance `name`, given as text: parsed here; a name that does not
    /// parse is refused when the controller is asked to run the instance.
    pub fn named(plugin: Arc<Plugin>, name: &str, config: Option<&str>) -> Self {
        PluginInstance {
            name: InstanceName::parse(name),
            plugin,
            config: config.map(Into::into),
            policy: Arc::default(),
        }
    }

    /// The instance's name, or why the text it was given cannot name an instance.
    pub fn name(&self) -> Result<&InstanceName, &InvalidName> {
        self.name.as_ref()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadows_name_leads_back_to_its_live_instance() {
        let live = InstanceName::object("team-a", "pinner").unwrap();
        let shadow = live.shadow();
        assert!(shadow.is_shadow() && !live.is_shadow());
        assert_eq!(live_of(shadow.as_str()), ("team-a/pinner", true));
        assert_eq!(live_of(live.as_str()), ("team-a/pinner", false));
    }

    #[test]
    fn instance_names_are_dns_labels() {
        for ok in ["a", "image-pinner", "p2", "0x", &"a".repeat(63)] {
            assert_eq!(InstanceName::parse(ok).as_deref(), Ok(ok), "{ok}");
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
            let err = InstanceName::parse(bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("DNS-1123"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn object_instances_are_namespace_slash_name_within_a_field_manager() {
        let n = InstanceName::object("team-a", "pinner").unwrap();
        assert_eq!(n.as_str(), "team-a/pinner");
        assert_eq!(n.object_ref(), Some(("team-a", "pinner")));
        assert_eq!(InstanceName::parse("pinner").unwrap().object_ref(), None);
        assert_eq!(n.shadow().as_str(), "team-a/pinner@shadow");
        assert!(n.shadow().is_shadow() && !n.is_shadow());
        assert!(InstanceName::parse("p@shadow").is_err());
        let long = "a".repeat(60);
        let err = InstanceName::object(&long, &long).unwrap_err().to_string();
        assert!(err.contains("121 bytes") && err.contains("128"), "{err}");
        assert!(InstanceName::object(&long, "b".repeat(58).as_str()).is_ok());
        for (ns, name) in [("Team", "p"), ("team", "p/q"), ("", "p"), ("t", "p.q")] {
            let err = InstanceName::object(ns, name).unwrap_err().to_string();
            assert!(err.contains("DNS-1123"), "{ns}/{name}: {err}");
        }
        // A file-backed name can never be an object-backed one.
        assert!(InstanceName::parse("team-a/pinner").is_err());
    }

    #[test]
    fn a_huge_name_is_not_repeated_whole() {
        let err = InstanceName::parse(&"x".repeat(1 << 20)).unwrap_err();
        assert!(err.to_string().len() < 1024, "{} bytes", err.0.len());
    }
}
