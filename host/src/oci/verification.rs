//! Verification policy: which signatures a module needs before it may compile. The shape is
//! Kubewarden's `verification.yml` (`apiVersion`, `allOf`, `anyOf: {minimumMatches,
//! signatures}`, rules of `kind: pubKey` with a PEM `key` and optional `annotations`), so an
//! operator's file reads the same. Keyless rules (`genericIssuer`, `urlIssuer`,
//! `githubAction`: Fulcio certificates and Rekor entries) parse, so the types are ready for
//! them, and are refused: they need the internet, which a host here does not have.
//!
//! The same [`VerificationConfig`] is the host-wide `--verification-config FILE` and a
//! PluginPolicy's `spec.verification`.

use super::access::Access;
use super::reference::OciRef;
use super::registry::{Registries, RegistryArgs};
use super::signature::{self, SignatureEntry};
use super::transfer::{self, Pulled};
use crate::oci::keys::PublicKey;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// The only `apiVersion` known.
pub const API_VERSION: &str = "v1";
/// The largest verification config file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The most rules (`allOf` and `anyOf.signatures` together) in one config.
pub const MAX_RULES: usize = 64;
/// The most annotations one rule may require.
pub const MAX_ANNOTATIONS: usize = 32;
/// The longest annotation key or value a rule may require.
pub const MAX_ANNOTATION_BYTES: usize = 256;
/// The refusal of every keyless rule, today.
pub const KEYLESS_UNSUPPORTED: &str =
    "keyless (Fulcio/Rekor) needs the internet: not supported yet";

/// A verification policy (Kubewarden's `verification.yml` shape).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerificationConfig {
    /// `v1`.
    pub api_version: String,
    /// Rules that must all be met.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub all_of: Vec<SignatureRule>,
    /// Rules of which at least `minimumMatches` must be met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_of: Option<AnyOf>,
}

/// `anyOf`: at least `minimumMatches` of `signatures` must be met.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnyOf {
    /// How many rules must be met (default 1, at most the number of rules).
    #[serde(default = "one")]
    pub minimum_matches: u32,
    /// The rules.
    pub signatures: Vec<SignatureRule>,
}

fn one() -> u32 {
    1
}

/// One rule: a signature that must exist, by `kind`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum SignatureRule {
    /// Signed with the private half of a public key (cosign's key-based signing).
    PubKey(PubKeyRule),
    /// Keyless: a Fulcio certificate from `issuer` for a subject. Not supported yet.
    GenericIssuer(IssuerRule),
    /// Keyless: like `genericIssuer`, the issuer given as a URL. Not supported yet.
    UrlIssuer(UrlIssuerRule),
    /// Keyless: signed by a GitHub Actions workflow of `owner` (and `repo`). Not supported
    /// yet.
    GithubAction(GithubActionRule),
}

/// `kind: pubKey`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PubKeyRule {
    /// Who holds the key (shown in messages only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The public key, PEM (`-----BEGIN PUBLIC KEY-----`, ECDSA P-256).
    pub key: String,
    /// Annotations the signature's payload must carry (`kubeplug sign -a KEY=VALUE`,
    /// `cosign sign -a`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `kind: genericIssuer` (keyless).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerRule {
    /// The OIDC issuer.
    pub issuer: String,
    /// The certificate's subject, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_equal: Option<String>,
    /// The certificate's subject, a URL prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_url_prefix: Option<String>,
    /// Annotations the payload must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `kind: urlIssuer` (keyless).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlIssuerRule {
    /// The OIDC issuer's URL.
    pub url: String,
    /// The certificate's subject, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_equal: Option<String>,
    /// The certificate's subject, a URL prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_url_prefix: Option<String>,
    /// Annotations the payload must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `kind: githubAction` (keyless).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GithubActionRule {
    /// The GitHub owner (user or organisation).
    pub owner: String,
    /// The repository, if only one of the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Annotations the payload must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Why a verification config is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("verification config: {0}")]
pub struct ConfigError(pub String);

/// A rule ready to check: where it stands in the config, its key and required annotations.
#[derive(Debug, Clone)]
struct KeyRule {
    label: String,
    key: PublicKey,
    annotations: BTreeMap<String, String>,
}

/// The checked rules of a config.
#[derive(Debug)]
struct Rules {
    all_of: Vec<KeyRule>,
    any_of: Vec<KeyRule>,
    minimum_matches: usize,
}

impl VerificationConfig {
    /// Reads and checks a config file (YAML or JSON, at most 1 MiB).
    pub fn from_file(path: &Path) -> anyhow::Result<VerificationConfig> {
        use std::io::Read;
        let file = std::fs::File::open(path)
            .with_context(|| format!("reading --verification-config {}", path.display()))?;
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading --verification-config {}", path.display()))?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            anyhow::bail!(
                "--verification-config {}: larger than {MAX_CONFIG_BYTES} bytes",
                path.display()
            );
        }
        VerificationConfig::parse(&text)
            .with_context(|| format!("--verification-config {}", path.display()))
    }

    /// Parses and checks a config (YAML or JSON).
    pub fn parse(text: &str) -> Result<VerificationConfig, ConfigError> {
        let config: VerificationConfig =
            serde_saphyr::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// A config of one rule: signed with `key` (what `kubeplug verify --key` checks).
    pub fn single_key(key: &PublicKey, annotations: BTreeMap<String, String>) -> Self {
        VerificationConfig {
            api_version: API_VERSION.into(),
            all_of: vec![SignatureRule::PubKey(PubKeyRule {
                owner: None,
                key: key.to_pem(),
                annotations,
            })],
            any_of: None,
        }
    }

    /// Checks everything that does not need the module: the version, that some signature
    /// is required, `minimumMatches` within 1..=rules, every key a P-256 public key, no
    /// keyless rule, the bounds. A PluginPolicy's `spec.verification` is checked with it too.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.rules().map(|_| ())
    }

    fn rules(&self) -> Result<Rules, ConfigError> {
        if self.api_version != API_VERSION {
            return Err(ConfigError(format!(
                "apiVersion {:?}: expected {API_VERSION:?}",
                crate::contract::text::prefix(&self.api_version, 40)
            )));
        }
        let any = self.any_of.as_ref();
        if any.is_some_and(|a| a.signatures.is_empty()) {
            return Err(ConfigError("anyOf.signatures is empty".into()));
        }
        let total = self.all_of.len() + any.map_or(0, |a| a.signatures.len());
        if total == 0 {
            return Err(ConfigError(
                "no rule: allOf or anyOf must name at least one signature (a config that requires none would accept unsigned modules)".into(),
            ));
        }
        if total > MAX_RULES {
            return Err(ConfigError(format!(
                "{total} rules, more than the {MAX_RULES} accepted"
            )));
        }
        let all_of = self
            .all_of
            .iter()
            .enumerate()
            .map(|(i, r)| key_rule(&format!("allOf[{i}]"), r))
            .collect::<Result<Vec<_>, _>>()?;
        let (any_of, minimum_matches) = match any {
            None => (Vec::new(), 0),
            Some(a) => {
                let n = a.signatures.len();
                if a.minimum_matches == 0 || a.minimum_matches as usize > n {
                    return Err(ConfigError(format!(
                        "anyOf.minimumMatches is {}: it must be between 1 and the {n} signature rule(s) listed",
                        a.minimum_matches
                    )));
                }
                let rules = a
                    .signatures
                    .iter()
                    .enumerate()
                    .map(|(i, r)| key_rule(&format!("anyOf.signatures[{i}]"), r))
                    .collect::<Result<Vec<_>, _>>()?;
                (rules, a.minimum_matches as usize)
            }
        };
        Ok(Rules {
            all_of,
            any_of,
            minimum_matches,
        })
    }
}

fn key_rule(at: &str, rule: &SignatureRule) -> Result<KeyRule, ConfigError> {
    let r = match rule {
        SignatureRule::PubKey(r) => r,
        SignatureRule::GenericIssuer(_) => {
            return Err(ConfigError(format!(
                "{at}: kind genericIssuer: {KEYLESS_UNSUPPORTED}"
            )));
        }
        SignatureRule::UrlIssuer(_) => {
            return Err(ConfigError(format!(
                "{at}: kind urlIssuer: {KEYLESS_UNSUPPORTED}"
            )));
        }
        SignatureRule::GithubAction(_) => {
            return Err(ConfigError(format!(
                "{at}: kind githubAction: {KEYLESS_UNSUPPORTED}"
            )));
        }
    };
    let key = PublicKey::from_pem(&r.key).map_err(|e| ConfigError(format!("{at}.key: {e}")))?;
    if r.annotations.len() > MAX_ANNOTATIONS {
        return Err(ConfigError(format!(
            "{at}.annotations: {} of them, more than {MAX_ANNOTATIONS}",
            r.annotations.len()
        )));
    }
    if let Some((k, v)) = r
        .annotations
        .iter()
        .find(|(k, v)| k.len() > MAX_ANNOTATION_BYTES || v.len() > MAX_ANNOTATION_BYTES)
    {
        return Err(ConfigError(format!(
            "{at}.annotations: {:?} is longer than {MAX_ANNOTATION_BYTES} bytes",
            if k.len() > MAX_ANNOTATION_BYTES { k } else { v }
        )));
    }
    if r.owner
        .as_ref()
        .is_some_and(|o| o.len() > MAX_ANNOTATION_BYTES)
    {
        return Err(ConfigError(format!(
            "{at}.owner is longer than {MAX_ANNOTATION_BYTES} bytes"
        )));
    }
    let label = match &r.owner {
        Some(owner) => format!("{at} (key {key}, owner {owner})"),
        None => format!("{at} (key {key})"),
    };
    Ok(KeyRule {
        label,
        key,
        annotations: r.annotations.clone(),
    })
}

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The config is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Verification needs the digest (resolve the tag first).
    #[error("{0}: verification needs a pinned reference (@sha256:…)")]
    NotPinned(String),
    /// The signatures could not be read (registry down, refused, a bound passed): may pass
    /// on a later try.
    #[error("reading the signatures of {reference}: {why}")]
    Registry {
        /// The module.
        reference: String,
        /// What went wrong.
        why: String,
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
    #[error("{rule}: {why}")]
    Rule {
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
        return Err(ConfigError("no verification config to check against".into()).into());
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
        let rules = config
            .rules()
            .map_err(|e| ConfigError(format!("{}{}", prefix(name), e.0)))?;
        checked.push((prefix(name), rules));
    }
    let Some(digest) = pinned.digest.clone() else {
        return Err(VerifyError::NotPinned(pinned.to_string()));
    };
    let read = signature::read(reg, pinned, access)
        .await
        .map_err(|e| VerifyError::Registry {
            reference: pinned.to_string(),
            why: format!("{e:#}"),
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
                    rule: format!("{prefix}{}", rule.label),
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

/// The verification config the registry flags name (`--verification-config`), checked; none
/// when not given.
pub fn config_of(args: &RegistryArgs) -> anyhow::Result<Option<VerificationConfig>> {
    args.verification_config
        .as_deref()
        .map(VerificationConfig::from_file)
        .transpose()
}

/// Pulls the module `r` names, verified first when `args` name a verification config
/// (`--verification-config`): what `kubeplug pull` and `kubeplug eval --plugin oci://` call.
/// Without a config it is [`transfer::pull`].
pub async fn pull_verified(
    reg: &Registries,
    r: &OciRef,
    args: &RegistryArgs,
) -> anyhow::Result<Pulled> {
    match config_of(args)? {
        None => Ok(transfer::pull(reg, r).await?),
        Some(config) => Ok(pull_with(reg, r, &config, &reg.access()).await?.0),
    }
}

/// Pulls the module `r` names after checking its signatures against `config`, with `auth`
/// (a Plugin's pull secret, or the registry flags'): the tag resolved once (a bounded
/// manifest read), the signatures of that digest verified, and only then the module pulled
/// by that digest, so what is returned is what was verified. An unsigned or wrongly signed
/// module is never downloaded. The error's chain holds a [`VerifyError`] when verification
/// failed (its `is_transient` tells a registry failure from a module not signed as
/// required).
pub async fn pull_with(
    reg: &Registries,
    r: &OciRef,
    config: &VerificationConfig,
    access: &Access,
) -> anyhow::Result<(Pulled, Verified)> {
    let pinned = resolve(reg, r, access).await?;
    let verified = verify_with(reg, &pinned, config, access).await?;
    tracing::info!(module = %pinned, "{verified}");
    let pulled = transfer::pull_with(reg, &pinned, access).await?;
    anyhow::ensure!(
        pulled.manifest_digest == verified.digest,
        "{pinned}: pulled manifest sha256:{} is not the verified one",
        pulled.manifest_digest
    );
    Ok((pulled, verified))
}

/// `r` pinned to its manifest's digest: itself when pinned, else the tag's manifest read
/// (bounded) and its digest taken.
pub async fn resolve(reg: &Registries, r: &OciRef, access: &Access) -> anyhow::Result<OciRef> {
    if r.digest.is_some() {
        return Ok(r.clone());
    }
    let manifest = reg
        .fetch
        .manifest(
            r,
            r.tag_or_default(),
            signature::MODULE_MANIFEST_TYPES,
            access,
        )
        .await
        .with_context(|| format!("resolving {r}"))?;
    Ok(r.pinned(&manifest.digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::keys::SigningKey;

    fn pem() -> String {
        SigningKey::generate().public().to_pem()
    }

    fn indent(pem: &str) -> String {
        pem.lines()
            .map(|l| format!("      {l}\n"))
            .collect::<String>()
    }

    #[test]
    fn kubewarden_shape_parses() {
        let (a, b) = (pem(), pem());
        let text = format!(
            "apiVersion: v1\nallOf:\n  - kind: pubKey\n    owner: platform\n    key: |\n{}    annotations:\n      env: prod\nanyOf:\n  minimumMatches: 1\n  signatures:\n  - kind: pubKey\n    key: |\n{}",
            indent(&a),
            indent(&b)
        );
        let c = VerificationConfig::parse(&text).unwrap();
        assert_eq!(c.all_of.len(), 1);
        let SignatureRule::PubKey(r) = &c.all_of[0] else {
            panic!()
        };
        assert_eq!(r.owner.as_deref(), Some("platform"));
        assert_eq!(r.annotations.get("env").map(String::as_str), Some("prod"));
        assert_eq!(c.any_of.as_ref().unwrap().minimum_matches, 1);
        // Serialized and read back (a PluginPolicy carries it as JSON).
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(VerificationConfig::parse(&json).unwrap(), c);
        let rules = c.rules().unwrap();
        assert!(rules.all_of[0].label.starts_with("allOf[0] (key sha256:"));
        assert!(rules.all_of[0].label.ends_with(", owner platform)"));
        assert!(
            rules.any_of[0]
                .label
                .starts_with("anyOf.signatures[0] (key ")
        );
    }

    #[test]
    fn unknown_fields_and_kinds_refused() {
        let k = indent(&pem());
        let err = VerificationConfig::parse(&format!(
            "apiVersion: v1\nallOf:\n  - kind: pubKey\n    keyy: x\n    key: |\n{k}"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("keyy"), "{err}");
        let err = VerificationConfig::parse("apiVersion: v1\nallof: []\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("allof"), "{err}");
        let err = VerificationConfig::parse(&format!(
            "apiVersion: v1\nanyOf:\n  minimum: 1\n  signatures:\n  - kind: pubKey\n    key: |\n{k}"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("minimum"), "{err}");
        let err = VerificationConfig::parse("apiVersion: v1\nallOf:\n  - kind: x509\n    key: y\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("x509"), "{err}");
        let err = VerificationConfig::parse(&format!(
            "apiVersion: v2\nallOf:\n  - kind: pubKey\n    key: |\n{k}"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("apiVersion \"v2\""), "{err}");
    }

    #[test]
    fn keyless_rules_parse_and_are_refused() {
        for rule in [
            "kind: genericIssuer\n    issuer: https://token.actions.githubusercontent.com\n    subjectEqual: x",
            "kind: urlIssuer\n    url: https://issuer.example\n    subjectUrlPrefix: https://github.com/org/",
            "kind: githubAction\n    owner: kubewarden\n    repo: policies",
        ] {
            let err = VerificationConfig::parse(&format!("apiVersion: v1\nallOf:\n  - {rule}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("allOf[0]: kind ") && err.ends_with(KEYLESS_UNSUPPORTED),
                "{err}"
            );
        }
    }

    #[test]
    fn minimum_matches_bounds_and_empty_configs() {
        let k = indent(&pem());
        let any = |n: &str| {
            format!(
                "apiVersion: v1\nanyOf:\n  minimumMatches: {n}\n  signatures:\n  - kind: pubKey\n    key: |\n{k}  - kind: pubKey\n    key: |\n{k}"
            )
        };
        assert!(VerificationConfig::parse(&any("2")).is_ok());
        for n in ["0", "3"] {
            let err = VerificationConfig::parse(&any(n)).unwrap_err().to_string();
            assert!(
                err.contains(&format!(
                    "anyOf.minimumMatches is {n}: it must be between 1 and the 2"
                )),
                "{err}"
            );
        }
        let err = VerificationConfig::parse(&any("-1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("minimumMatches") || err.contains("-1"),
            "{err}"
        );
        // Default 1.
        let text =
            format!("apiVersion: v1\nanyOf:\n  signatures:\n  - kind: pubKey\n    key: |\n{k}");
        assert_eq!(
            VerificationConfig::parse(&text)
                .unwrap()
                .any_of
                .unwrap()
                .minimum_matches,
            1
        );
        let err = VerificationConfig::parse("apiVersion: v1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no rule"), "{err}");
        let err = VerificationConfig::parse("apiVersion: v1\nanyOf:\n  signatures: []\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("anyOf.signatures is empty"), "{err}");
    }

    #[test]
    fn keys_and_bounds_checked() {
        let err = VerificationConfig::parse(
            "apiVersion: v1\nallOf:\n  - kind: pubKey\n    key: not a key\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("allOf[0].key: no PEM block"), "{err}");
        let k = indent(&pem());
        let mut many = String::from("apiVersion: v1\nallOf:\n");
        for _ in 0..=MAX_RULES {
            many.push_str(&format!("  - kind: pubKey\n    key: |\n{k}"));
        }
        let err = VerificationConfig::parse(&many).unwrap_err().to_string();
        assert!(err.contains("65 rules, more than the 64"), "{err}");
        let long = "v".repeat(MAX_ANNOTATION_BYTES + 1);
        let err = VerificationConfig::parse(&format!(
            "apiVersion: v1\nallOf:\n  - kind: pubKey\n    annotations: {{a: {long}}}\n    key: |\n{k}"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("allOf[0].annotations"), "{err}");
    }

    #[test]
    fn file_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.yml");
        std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let err = format!("{:#}", VerificationConfig::from_file(&path).unwrap_err());
        assert!(err.contains("larger than 1048576 bytes"), "{err}");
    }

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
}
