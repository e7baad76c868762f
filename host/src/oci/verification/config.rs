//! Verification configs: Kubewarden's `verification.yml` shape (`apiVersion`, `allOf`,
//! `anyOf: {minimumMatches, signatures}`, rules of `kind: pubKey` with a PEM `key` and
//! optional `annotations`), so an operator's file reads the same. Keyless rules
//! (`genericIssuer`, `urlIssuer`, `githubAction`: Fulcio certificates and Rekor entries)
//! parse, so the types are ready for them, and are refused: they need the internet, which a
//! host here does not have. Parsed and checked here; matched against signatures in the parent.

use crate::oci::keys::{KeyError, PublicKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// `minimumMatches`' default.
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

/// Why a verification config is not usable: which config, when several are checked at once,
/// and what is wrong in it.
#[derive(Debug, thiserror::Error)]
#[error("verification config: {}{fault}", named(config.as_deref()))]
pub struct ConfigError {
    /// The config's name (`PluginPolicy platform`) when it is checked beside others.
    pub config: Option<String>,
    /// What is wrong.
    pub fault: ConfigFault,
}

/// `name: `, or nothing for a config checked alone.
fn named(config: Option<&str>) -> String {
    config.map(|c| format!("{c}: ")).unwrap_or_default()
}

impl From<ConfigFault> for ConfigError {
    fn from(fault: ConfigFault) -> Self {
        ConfigError {
            config: None,
            fault,
        }
    }
}

/// What is wrong in a verification config, naming the field (`allOf[1].key`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFault {
    /// Not YAML or JSON of the config's shape (an unknown field or kind, a wrong type).
    #[error("{0}")]
    Syntax(String),
    /// An `apiVersion` other than [`API_VERSION`].
    #[error("apiVersion {found:?}: expected {API_VERSION:?}")]
    ApiVersion {
        /// The version given, cut to 40 bytes.
        found: String,
    },
    /// `anyOf` without a rule.
    #[error("anyOf.signatures is empty")]
    EmptyAnyOf,
    /// No rule at all: the config would accept unsigned modules.
    #[error(
        "no rule: allOf or anyOf must name at least one signature (a config that requires none would accept unsigned modules)"
    )]
    NoRule,
    /// More than [`MAX_RULES`] rules.
    #[error("{count} rules, more than the {MAX_RULES} accepted")]
    TooManyRules {
        /// How many were given.
        count: usize,
    },
    /// `anyOf.minimumMatches` outside 1..=rules.
    #[error(
        "anyOf.minimumMatches is {minimum}: it must be between 1 and the {rules} signature rule(s) listed"
    )]
    MinimumMatches {
        /// The value given.
        minimum: u32,
        /// How many `anyOf` rules there are.
        rules: usize,
    },
    /// A keyless rule: [`KEYLESS_UNSUPPORTED`].
    #[error("{at}: kind {kind}: {KEYLESS_UNSUPPORTED}")]
    Keyless {
        /// The rule: `allOf[0]`.
        at: String,
        /// Its kind: `genericIssuer`, `urlIssuer`, `githubAction`.
        kind: &'static str,
    },
    /// A rule's key is not a P-256 public key in PEM.
    #[error("{at}.key: {fault}")]
    Key {
        /// The rule.
        at: String,
        /// Why the key does not parse.
        fault: KeyError,
    },
    /// A rule requires more than [`MAX_ANNOTATIONS`] annotations.
    #[error("{at}.annotations: {count} of them, more than {MAX_ANNOTATIONS}")]
    TooManyAnnotations {
        /// The rule.
        at: String,
        /// How many it requires.
        count: usize,
    },
    /// An annotation key or value longer than [`MAX_ANNOTATION_BYTES`].
    #[error("{at}.annotations: {text:?} is longer than {MAX_ANNOTATION_BYTES} bytes")]
    AnnotationTooLong {
        /// The rule.
        at: String,
        /// The key or value.
        text: String,
    },
    /// A rule's `owner` longer than [`MAX_ANNOTATION_BYTES`].
    #[error("{at}.owner is longer than {MAX_ANNOTATION_BYTES} bytes")]
    OwnerTooLong {
        /// The rule.
        at: String,
    },
    /// Verification was asked against no config at all (never a pass).
    #[error("no verification config to check against")]
    NoConfig,
}

/// Why a `--verification-config` file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("reading --verification-config {}: {fault}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The file system's error.
        fault: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("--verification-config {}: larger than {MAX_CONFIG_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a usable config.
    #[error("--verification-config {}: {fault}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        fault: ConfigError,
    },
}

/// A rule ready to check: where it stands in the config, its key and required annotations.
#[derive(Debug, Clone)]
pub(super) struct KeyRule {
    /// The rule as errors name it: `allOf[0] (key sha256:ab12…, owner …)`.
    pub(super) label: String,
    /// The key a signature must verify with.
    pub(super) key: PublicKey,
    /// The annotations its payload must carry.
    pub(super) annotations: BTreeMap<String, String>,
}

/// The checked rules of a config.
#[derive(Debug)]
pub(super) struct Rules {
    /// Every one must be met.
    pub(super) all_of: Vec<KeyRule>,
    /// At least `minimum_matches` must be met.
    pub(super) any_of: Vec<KeyRule>,
    /// How many of `any_of` (0 when there are none).
    pub(super) minimum_matches: usize,
}

impl VerificationConfig {
    /// Reads and checks a config file (YAML or JSON, at most 1 MiB).
    pub fn from_file(path: &Path) -> Result<VerificationConfig, ConfigFileError> {
        use std::io::Read;
        let read = |fault| ConfigFileError::Read {
            path: path.to_path_buf(),
            fault,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        VerificationConfig::parse(&text).map_err(|fault| ConfigFileError::Invalid {
            path: path.to_path_buf(),
            fault,
        })
    }

    /// Parses and checks a config (YAML or JSON).
    pub fn parse(text: &str) -> Result<VerificationConfig, ConfigError> {
        let config: VerificationConfig =
            serde_saphyr::from_str(text).map_err(|e| ConfigFault::Syntax(e.to_string()))?;
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
        self.rules().map(|_| ()).map_err(ConfigError::from)
    }

    /// The config's rules, checked and ready to match signatures against.
    pub(super) fn rules(&self) -> Result<Rules, ConfigFault> {
        if self.api_version != API_VERSION {
            return Err(ConfigFault::ApiVersion {
                found: crate::contract::text::prefix(&self.api_version, 40).to_string(),
            });
        }
        let any = self.any_of.as_ref();
        if any.is_some_and(|a| a.signatures.is_empty()) {
            return Err(ConfigFault::EmptyAnyOf);
        }
        let total = self.all_of.len() + any.map_or(0, |a| a.signatures.len());
        if total == 0 {
            return Err(ConfigFault::NoRule);
        }
        if total > MAX_RULES {
            return Err(ConfigFault::TooManyRules { count: total });
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
                    return Err(ConfigFault::MinimumMatches {
                        minimum: a.minimum_matches,
                        rules: n,
                    });
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

/// The rule at `at` (`allOf[0]`), checked: a pubKey rule of a P-256 key within the bounds.
fn key_rule(at: &str, rule: &SignatureRule) -> Result<KeyRule, ConfigFault> {
    let keyless = |kind| ConfigFault::Keyless {
        at: at.to_string(),
        kind,
    };
    let r = match rule {
        SignatureRule::PubKey(r) => r,
        SignatureRule::GenericIssuer(_) => return Err(keyless("genericIssuer")),
        SignatureRule::UrlIssuer(_) => return Err(keyless("urlIssuer")),
        SignatureRule::GithubAction(_) => return Err(keyless("githubAction")),
    };
    let key = PublicKey::from_pem(&r.key).map_err(|fault| ConfigFault::Key {
        at: at.to_string(),
        fault,
    })?;
    if r.annotations.len() > MAX_ANNOTATIONS {
        return Err(ConfigFault::TooManyAnnotations {
            at: at.to_string(),
            count: r.annotations.len(),
        });
    }
    if let Some((k, v)) = r
        .annotations
        .iter()
        .find(|(k, v)| k.len() > MAX_ANNOTATION_BYTES || v.len() > MAX_ANNOTATION_BYTES)
    {
        return Err(ConfigFault::AnnotationTooLong {
            at: at.to_string(),
            text: if k.len() > MAX_ANNOTATION_BYTES { k } else { v }.clone(),
        });
    }
    if r.owner
        .as_ref()
        .is_some_and(|o| o.len() > MAX_ANNOTATION_BYTES)
    {
        return Err(ConfigFault::OwnerTooLong { at: at.to_string() });
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
        let err = VerificationConfig::parse("apiVersion: v1\n").unwrap_err();
        assert!(matches!(err.fault, ConfigFault::NoRule), "{err}");
        let err = err.to_string();
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

    #[test]
    fn file_errors_say_which_file_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yml");
        let err = VerificationConfig::from_file(&missing).unwrap_err();
        assert!(matches!(err, ConfigFileError::Read { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("reading --verification-config "),
            "{err}"
        );
        let broken = dir.path().join("broken.yml");
        std::fs::write(&broken, "apiVersion: v1\n").unwrap();
        let err = VerificationConfig::from_file(&broken).unwrap_err();
        assert!(
            matches!(&err, ConfigFileError::Invalid { path, .. } if *path == broken),
            "{err}"
        );
        assert!(err.to_string().contains("no rule"), "{err}");
    }
}
