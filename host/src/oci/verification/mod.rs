//! Verification policy: which signatures a module needs before it may compile, checked
//! against the cosign signatures a registry holds for its digest. The config's shape and
//! checks are in `config`; pulls that verify first are in `pull`.
//!
//! The same [`VerificationConfig`] is the host-wide `--verification-config FILE` and a
//! PluginPolicy's `spec.verification`.

mod config;
mod pull;

pub use config::{
    API_VERSION, AnyOf, ConfigError, ConfigFault, ConfigFileError, GithubActionRule, IssuerRule,
    KEYLESS_UNSUPPORTED, MAX_ANNOTATION_BYTES, MAX_ANNOTATIONS, MAX_CONFIG_BYTES, MAX_RULES,
    PubKeyRule, SignatureRule, UrlIssuerRule, VerificationConfig,
};
pub use pull::{ResolveError, VerifiedPullError, config_of, pull_verified, pull_with, resolve};

use super::access::Access;
use super::reference::OciRef;
use super::registry::Registries;
use super::signature::{self, SignatureEntry};
use super::signature_error::SignatureError;
use config::{KeyRule, Rules};
use std::fmt;

/// A rule met, and by which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedRule {
    /// The rule, as errors name it: `allOf[0] (key sha256:ab12…)`.
    pub rule: String,
    /// The key's id (`sha256:` and 12 hex digits of its PKIX DER's SHA-256).
    pub key: String,
}

/// A module that passed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The manifest digest verified (64 hex digits).
    pub digest: String,
    /// The rules met, in config order (`allOf` first).
    pub matched: Vec<MatchedRule>,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.matched.iter().map(|m| m.rule.as_str()).collect();
        write!(f, "sha256:{} verified: {}", self.digest, keys.join(", "))
    }
}

/// Why a module did not pass verification.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The config is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Verification needs the digest (resolve the tag first).
    #[error("{0}: verification needs a pinned reference (@sha256:…)")]
    NotPinned(String),
    /// The signatures could not be read (registry down, refused, a bound passed): may pass
    /// on a later try.
    #[error("reading the signatures of {reference}: {fault}")]
    Registry {
        /// The module.
        reference: String,
        /// What went wrong (boxed: it may carry a registry client's large error).
        fault: Box<SignatureError>,
    },
    /// No signature at all.
    #[error("{reference} is not signed: no signature manifest (tag {tag})")]
    Unsigned {
        /// The module.
        reference: String,
        /// The tag cosign's signatures would be under.
        tag: String,
    },
    /// An `allOf` rule is not met.
    #[error("{config}{rule}: {why}")]
    Rule {
        /// The config's name and `: `, or nothing (see [`verify_all`]).
        config: String,
        /// The rule: `allOf[1] (key sha256:ab12…)`.
        rule: String,
        /// Why: `no signature by this key`, …
        why: String,
    },
    /// Too few `anyOf` rules met.
    #[error("{config}anyOf: {matched} of {required} required signatures matched ({})", .failures.join("; "))]
    AnyOf {
        /// The config's name and `: `, or nothing (see [`verify_all`]).
        config: String,
        /// How many rules were met.
        matched: usize,
        /// `minimumMatches`.
        required: usize,
        /// The rules not met, each with why.
        failures: Vec<String>,
    },
}

impl VerifyError {
    /// Whether trying again later may pass (the registry was unreachable or refused), as
    /// opposed to a module that is not signed as required.
    pub fn is_transient(&self) -> bool {
        matches!(self, VerifyError::Registry { .. })
    }

    /// Whether the message starts with the name of the config whose rule failed (given to
    /// [`verify_all`]): a caller that names the configs checked need not name them again.
    pub fn names_config(&self) -> bool {
        match self {
            VerifyError::Rule { config, .. } | VerifyError::AnyOf { config, .. } => {
                !config.is_empty()
            }
            VerifyError::Config(_)
            | VerifyError::NotPinned(_)
            | VerifyError::Registry { .. }
            | VerifyError::Unsigned { .. } => false,
        }
    }
}

/// Checks the signatures of the module `pinned` names (a `@sha256:` reference) against
/// `config`. Reads the cosign signature manifest (`sha256-<hex>.sig`) and its payloads, every
/// read bounded; a signature counts for a rule when it verifies with the rule's key, its
/// payload names this very digest, and it carries the rule's annotations.
pub async fn verify(
    reg: &Registries,
    pinned: &OciRef,
    config: &VerificationConfig,
) -> Result<Verified, VerifyError> {
    verify_with(reg, pinned, config, &reg.access()).await
}

/// [`verify`] with `auth` (a Plugin's pull secret) instead of the registry flags' credentials.
pub async fn verify_with(
    reg: &Registries,
    pinned: &OciRef,
    config: &VerificationConfig,
    access: &Access,
) -> Result<Verified, VerifyError> {
    verify_all(reg, pinned, &[("", config)], access).await
}

/// [`verify_with`] against several configs at once, each of which must pass (the host-wide
/// `--verification-config` and the `spec.verification` of every PluginPolicy that applies):
/// the signatures are read once. Each config comes with a name that prefixes its rules in
/// errors and in [`Verified`] (`PluginPolicy platform: allOf[0] (key sha256:…)`); an empty
/// name adds nothing. No config at all is an error, never a pass.
pub async fn verify_all(
    reg: &Registries,
    pinned: &OciRef,
    configs: &[(&str, &VerificationConfig)],
    access: &Access,
) -> Result<Verified, VerifyError> {
    if configs.is_empty() {
        return Err(ConfigError::from(ConfigFault::NoConfig).into());
    }
    let prefix = |name: &str| {
        if name.is_empty() {
            String::new()
        } else {
            format!("{name}: ")
        }
    };
    let mut checked = Vec::new();
    for (name, config) in configs {
        let rules = config.rules().map_err(|fault| ConfigError {
            config: Some(name.to_string()).filter(|n| !n.is_empty()),
            fault,
        })?;
        checked.push((prefix(name), rules));
    }
    let Some(digest) = pinned.digest.clone() else {
        return Err(VerifyError::NotPinned(pinned.to_string()));
    };
    let read = signature::read(reg, pinned, access)
        .await
        .map_err(|fault| VerifyError::Registry {
            reference: pinned.to_string(),
            fault: Box::new(fault),
        })?;
    let Some(read) = read else {
        return Err(VerifyError::Unsigned {
            reference: pinned.to_string(),
            tag: signature::signature_tag(&digest),
        });
    };
    let mut matched = Vec::new();
    for (prefix, rules) in &checked {
        check_rules(prefix, rules, &read, &digest, &mut matched)?;
    }
    tracing::info!(module = %pinned, rules = matched.len(), "signatures verified");
    Ok(Verified { digest, matched })
}

/// One config's rules against the signatures read: every `allOf` rule, then at least
/// `minimumMatches` of `anyOf`; the rules met are added to `matched`.
fn check_rules(
    prefix: &str,
    rules: &Rules,
    read: &signature::Signatures,
    digest: &str,
    matched: &mut Vec<MatchedRule>,
) -> Result<(), VerifyError> {
    let named = |mut m: MatchedRule| {
        m.rule = format!("{prefix}{}", m.rule);
        m
    };
    for rule in &rules.all_of {
        match check(rule, &read.entries, digest, read.skipped) {
            Ok(m) => matched.push(named(m)),
            Err(why) => {
                return Err(VerifyError::Rule {
                    config: prefix.to_string(),
                    rule: rule.label.clone(),
                    why,
                });
            }
        }
    }
    if rules.any_of.is_empty() {
        return Ok(());
    }
    let mut failures = Vec::new();
    let mut met = Vec::new();
    for rule in &rules.any_of {
        match check(rule, &read.entries, digest, read.skipped) {
            Ok(m) => met.push(named(m)),
            Err(why) => failures.push(format!("{}: {why}", rule.label)),
        }
    }
    if met.len() < rules.minimum_matches {
        return Err(VerifyError::AnyOf {
            config: prefix.to_string(),
            matched: met.len(),
            required: rules.minimum_matches,
            failures,
        });
    }
    matched.extend(met);
    Ok(())
}

/// Whether one rule is met by one of `entries`; otherwise the most telling reason.
fn check(
    rule: &KeyRule,
    entries: &[SignatureEntry],
    digest: &str,
    skipped: usize,
) -> Result<MatchedRule, String> {
    let mut why: Option<String> = None;
    for entry in entries {
        if !rule.key.verifies(&entry.payload, &entry.signature) {
            continue;
        }
        let payload = match signature::Payload::parse(&entry.payload) {
            Ok(p) => p,
            Err(e) => {
                why.get_or_insert(format!(
                    "a signature by this key over a payload that is {e}"
                ));
                continue;
            }
        };
        if payload.digest != digest {
            why = Some(format!(
                "signed by this key for another digest (sha256:{}), not this one",
                crate::contract::text::prefix(&payload.digest, 64)
            ));
            continue;
        }
        if let Some((k, v)) = rule
            .annotations
            .iter()
            .find(|(k, v)| payload.annotations.get(*k) != Some(*v))
        {
            why = Some(format!(
                "signed by this key, but without the annotation {k}={v} the rule requires"
            ));
            continue;
        }
        return Ok(MatchedRule {
            rule: rule.label.clone(),
            key: rule.key.id().to_string(),
        });
    }
    Err(why.unwrap_or_else(|| {
        let mut text = format!(
            "no signature by this key ({} signature(s) found, none by it",
            entries.len()
        );
        if skipped > 0 {
            text.push_str(&format!(
                "; {skipped} layer(s) not read: not cosign signatures, too large or past the first {}",
                signature::MAX_SIGNATURES
            ));
        }
        text.push(')');
        text
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::keys::SigningKey;
    use std::collections::BTreeMap;

    fn entry(key: &SigningKey, payload: &[u8]) -> SignatureEntry {
        SignatureEntry {
            payload: payload.to_vec(),
            signature: key.sign(payload),
        }
    }

    #[test]
    fn rule_checks_name_what_failed() {
        let key = SigningKey::generate();
        let other = SigningKey::generate();
        let digest = "a".repeat(64);
        let r = OciRef::parse(&format!("oci://reg.example/x@sha256:{digest}")).unwrap();
        let mut want = BTreeMap::new();
        want.insert("env".to_string(), "prod".to_string());
        let rule = KeyRule {
            label: "allOf[0]".into(),
            key: key.public(),
            annotations: BTreeMap::new(),
        };
        let good = signature::payload(&r, &digest, &want);
        assert!(check(&rule, &[entry(&key, &good)], &digest, 0).is_ok());
        let why = check(&rule, &[entry(&other, &good)], &digest, 0).unwrap_err();
        assert!(
            why.starts_with("no signature by this key (1 signature(s) found"),
            "{why}"
        );
        let elsewhere = signature::payload(&r, &"b".repeat(64), &want);
        let why = check(&rule, &[entry(&key, &elsewhere)], &digest, 0).unwrap_err();
        assert!(why.contains("another digest (sha256:bbbb"), "{why}");
        let strict = KeyRule {
            annotations: [("env".to_string(), "dev".to_string())].into(),
            ..rule.clone()
        };
        let why = check(&strict, &[entry(&key, &good)], &digest, 0).unwrap_err();
        assert!(why.contains("annotation env=dev"), "{why}");
        // A signature over bytes that are no payload.
        let why = check(&rule, &[entry(&key, b"{}")], &digest, 0).unwrap_err();
        assert!(why.contains("payload that is"), "{why}");
        // A tampered payload does not verify.
        let mut tampered = entry(&key, &good);
        tampered.payload = elsewhere;
        let why = check(&rule, &[tampered], &digest, 0).unwrap_err();
        assert!(why.starts_with("no signature by this key"), "{why}");
    }

    #[test]
    fn only_rule_failures_name_their_config() {
        let rule = |config: &str| VerifyError::Rule {
            config: config.into(),
            rule: "allOf[0] (key sha256:ab12)".into(),
            why: "no signature by this key".into(),
        };
        let any_of = |config: &str| VerifyError::AnyOf {
            config: config.into(),
            matched: 0,
            required: 1,
            failures: Vec::new(),
        };
        let named = rule("PluginPolicy p: ");
        assert!(named.names_config());
        assert!(
            named.to_string().starts_with("PluginPolicy p: allOf[0]"),
            "{named}"
        );
        assert!(any_of("PluginPolicy p: ").names_config());
        assert!(!rule("").names_config());
        assert!(!any_of("").names_config());
        // Texts that happen to start with a config's name do not count: the variant decides.
        let unsigned = VerifyError::Unsigned {
            reference: "PluginPolicy p: oci://r/x@sha256:00".into(),
            tag: "sha256-00.sig".into(),
        };
        assert!(!unsigned.names_config());
        let config = VerifyError::Config(ConfigError {
            config: Some("PluginPolicy p".into()),
            fault: ConfigFault::NoRule,
        });
        assert!(
            config
                .to_string()
                .starts_with("verification config: PluginPolicy p: no rule"),
            "{config}"
        );
        assert!(!config.names_config());
        assert!(!config.is_transient());
        let registry = VerifyError::Registry {
            reference: "oci://r/x@sha256:00".into(),
            fault: Box::new(SignatureError::NotPinned {
                reference: "oci://r/x".into(),
            }),
        };
        assert!(registry.is_transient() && !registry.names_config());
    }
}
