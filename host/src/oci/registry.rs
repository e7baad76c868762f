//! Registries as they are: plain HTTP only for hosts listed as insecure, extra CA
//! certificates, credentials from a docker config (`~/.docker/config.json` or a
//! `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`). One set of flags for every
//! command that talks to a registry.

use super::error_chain::chain_text;
use super::reference::OciRef;
use base64::Engine;
use clap::Args;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest docker config or CA file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The registry flags every command shares (`run`, `eval`, `push`, `pull`, `mirror`).
#[derive(Debug, Clone, Default, Args)]
pub struct RegistryArgs {
    /// A registry (HOST:PORT, as in the reference) spoken to over plain HTTP; repeat for
    /// several. Every other registry is HTTPS only.
    #[arg(
        long = "insecure-registry",
        value_name = "HOST:PORT",
        env = "KUBEPLUG_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registry: Vec<String>,
    /// A PEM file of CA certificates trusted for registries besides the system's; repeat
    /// for several.
    #[arg(long = "registry-ca", value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    /// Registry credentials: a docker config.json (the `auths` of `docker login`, or a
    /// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`).
    #[arg(
        long = "registry-config",
        value_name = "FILE",
        env = "KUBEPLUG_REGISTRY_CONFIG"
    )]
    pub registry_config: Option<PathBuf>,
    /// The largest module pulled or pushed, in MiB: a pull stops as soon as a blob passes it.
    #[arg(long = "max-module-mib", value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_module_mib: u64,
    /// Where pulled modules are cached by digest (default: $KUBEPLUG_CACHE_DIR/oci, else
    /// ~/.cache/kubeplug/oci, else a folder under the system's temporary one).
    #[arg(long = "module-cache", value_name = "DIR")]
    pub module_cache: Option<PathBuf>,
    /// Signatures every module pulled must carry: a verification config (Kubewarden's
    /// verification.yml shape, `pubKey` rules; see `oci::verification`).
    #[arg(
        long = "verification-config",
        value_name = "FILE",
        env = "KUBEPLUG_VERIFICATION_CONFIG"
    )]
    pub verification_config: Option<PathBuf>,
}

/// Why the registry flags cannot be used: a file they name is unreadable or not what it
/// should be, a host is not one, or the client cannot be built from them.
#[derive(Debug, thiserror::Error)]
pub enum RegistryConfigError {
    /// A file (a docker config, a CA bundle) could not be read.
    #[error("reading {}: {fault}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The file system's error.
        fault: std::io::Error,
    },
    /// A file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{} is larger than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// The `--registry-config` file is not a docker config.
    #[error("registry config {}: {fault}", path.display())]
    Credentials {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        fault: CredentialsError,
    },
    /// A `--registry-ca` file holds no PEM certificate.
    #[error("--registry-ca {}: no PEM certificate in it", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A `--registry-ca` file's certificates do not parse.
    #[error("--registry-ca {}: {}", path.display(), chain_text(fault))]
    Certificate {
        /// The file.
        path: PathBuf,
        /// reqwest's error.
        fault: reqwest::Error,
    },
    /// An `--insecure-registry` value is not `HOST[:PORT]`.
    #[error("--insecure-registry {host:?}: expected HOST or HOST:PORT as in the oci:// reference")]
    InsecureHost {
        /// The value given.
        host: String,
    },
    /// oci-client's client (pushes) could not be built from the flags.
    #[error(
        "building the registry client from --registry-ca: {}",
        chain_text(fault)
    )]
    PushClient {
        /// oci-client's error.
        fault: oci_client::errors::OciDistributionError,
    },
    /// The HTTP client of pulls could not be built from the flags.
    #[error(
        "building the registry client from --registry-ca: {}",
        chain_text(fault)
    )]
    PullClient {
        /// reqwest's error.
        fault: reqwest::Error,
    },
}

/// Why a docker config's `auths` cannot be used; names the entry (bounded), never its
/// secret: the config comes from a Secret whose readers may be fewer than the readers of
/// the Plugin status this message ends in, so neither serde's message (which quotes the
/// value it rejects) nor the base64 decoder's (which quotes the byte) is kept.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Not JSON of the docker config's shape.
    #[error("not a docker config (JSON with auths): {kind} error at line {line} column {column}")]
    NotDockerConfig {
        /// What went wrong: `syntax`, `data` (a value of the wrong type) or `eof`.
        kind: &'static str,
        /// Where.
        line: usize,
        /// Where on the line.
        column: usize,
    },
    /// An entry's `auth` is not base64.
    #[error("auths.{key}.auth is not base64")]
    NotBase64 {
        /// The entry's key (`HOST[:PORT]` or a URL), at most 253 characters shown.
        key: String,
    },
    /// An entry's `auth` decodes to bytes that are not UTF-8.
    #[error("auths.{key}.auth is not UTF-8")]
    NotUtf8 {
        /// The entry's key.
        key: String,
    },
    /// An entry's `auth` decodes to text without `user:password`'s colon.
    #[error("auths.{key}.auth is not base64 of user:password")]
    NoColon {
        /// The entry's key.
        key: String,
    },
}

/// Credentials by registry host (`HOST[:PORT]`).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    by_registry: HashMap<String, (String, String)>,
}

impl Credentials {
    /// Reads a docker config file (bounded to 1 MiB).
    pub fn from_file(path: &Path) -> Result<Credentials, RegistryConfigError> {
        let text = read_bounded(path)?;
        Credentials::from_docker_config(&text).map_err(|fault| RegistryConfigError::Credentials {
            path: path.to_path_buf(),
            fault,
        })
    }

    /// Parses the `auths` of a docker config: `auth` (base64 of `user:password`) or
    /// `username` and `password`, keyed by `HOST[:PORT]` or a URL of it.
    pub fn from_docker_config(text: &[u8]) -> Result<Credentials, CredentialsError> {
        #[derive(serde::Deserialize)]
        struct File {
            #[serde(default)]
            auths: HashMap<String, Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            auth: Option<String>,
            username: Option<String>,
            password: Option<String>,
        }
        let file: File = serde_json::from_slice(text).map_err(|fault| {
            let kind = match fault.classify() {
                serde_json::error::Category::Io => "read",
                serde_json::error::Category::Syntax => "syntax",
                serde_json::error::Category::Data => "data",
                serde_json::error::Category::Eof => "eof",
            };
            CredentialsError::NotDockerConfig {
                kind,
                line: fault.line(),
                column: fault.column(),
            }
        })?;
        let mut by_registry = HashMap::new();
        for (key, entry) in file.auths {
            let pair = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| CredentialsError::NotBase64 {
                            key: shown_key(&key),
                        })?;
                    let Ok(raw) = String::from_utf8(raw) else {
                        return Err(CredentialsError::NotUtf8 {
                            key: shown_key(&key),
                        });
                    };
                    let Some((u, p)) = raw.split_once(':') else {
                        return Err(CredentialsError::NoColon {
                            key: shown_key(&key),
                        });
                    };
                    (u.to_string(), p.to_string())
                }
                (None, Some(u), Some(p)) => (u, p),
                _ => continue,
            };
            by_registry.insert(registry_key(&key), pair);
        }
        Ok(Credentials { by_registry })
    }

    /// The credentials for `registry` (`HOST[:PORT]`), anonymous when none are known.
    pub fn auth_for(&self, registry: &str) -> RegistryAuth {
        match self.by_registry.get(registry) {
            Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Whether any credentials are known.
    pub fn is_empty(&self) -> bool {
        self.by_registry.is_empty()
    }

    /// Who these credentials are, as a SHA-256 of every entry (hex; `anonymous` when there
    /// is none): a key for what they earned, without keeping the secrets as keys.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        if self.by_registry.is_empty() {
            return "anonymous".into();
        }
        let mut entries: Vec<_> = self.by_registry.iter().collect();
        entries.sort();
        let mut hasher = Sha256::new();
        for (registry, (user, password)) in entries {
            for part in [registry, user, password] {
                hasher.update(part.as_bytes());
                hasher.update([0]);
            }
        }
        hex::encode(hasher.finalize())
    }
}

/// `https://host:port/v1/` → `host:port`; Docker Hub's legacy key → `docker.io`.
fn registry_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key.split('/').next().unwrap_or(key);
    match key {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        k => k.into(),
    }
}

/// A docker config or CA file, at most [`MAX_CONFIG_BYTES`].
fn read_bounded(path: &Path) -> Result<Vec<u8>, RegistryConfigError> {
    use std::io::Read;
    let read = |fault| RegistryConfigError::Read {
        path: path.to_path_buf(),
        fault,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut out = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(read)?;
    if out.len() as u64 > MAX_CONFIG_BYTES {
        return Err(RegistryConfigError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(out)
}

/// A client for the registries the flags describe, with the credentials they name.
#[derive(Clone)]
pub struct Registries {
    /// The oci-client client.
    pub client: oci_client::Client,
    /// Credentials by registry.
    pub credentials: Credentials,
    /// Hosts spoken to over plain HTTP.
    pub insecure: Vec<String>,
    /// The largest module, in bytes.
    pub max_module_bytes: u64,
    /// The content-addressed cache of pulled modules.
    pub cache: super::cache::ModuleCache,
    /// Bounded reads for pulls (oci-client reads bodies whole; see `fetch`).
    pub fetch: std::sync::Arc<super::fetch::Fetcher>,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("insecure", &self.insecure)
            .field("max_module_bytes", &self.max_module_bytes)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl Registries {
    /// The client the flags describe.
    pub fn new(args: &RegistryArgs) -> Result<Registries, RegistryConfigError> {
        // reqwest is built without a crypto provider of its own: rustls' ring provider, as
        // kube's. Installing it twice is harmless (the second call reports the first).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut extra_root_certificates = Vec::new();
        let mut extra_roots = Vec::new();
        for path in &args.registry_ca {
            let data = read_bounded(path)?;
            if !data
                .windows(27)
                .any(|w| w == b"-----BEGIN CERTIFICATE-----")
            {
                return Err(RegistryConfigError::NoCertificate { path: path.clone() });
            }
            extra_roots.extend(
                reqwest::Certificate::from_pem_bundle(&data).map_err(|fault| {
                    RegistryConfigError::Certificate {
                        path: path.clone(),
                        fault,
                    }
                })?,
            );
            extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        for host in &args.insecure_registry {
            if host.is_empty() || host.contains('/') || host.contains("://") {
                return Err(RegistryConfigError::InsecureHost { host: host.clone() });
            }
        }
        let credentials = match &args.registry_config {
            Some(path) => Credentials::from_file(path)?,
            None => Credentials::default(),
        };
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(args.insecure_registry.clone()),
            extra_root_certificates,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            ..ClientConfig::default()
        };
        let cache_dir = match &args.module_cache {
            Some(dir) => dir.clone(),
            // No home and no KUBEPLUG_CACHE_DIR (a bare container): a folder under the
            // system's temporary one, still content-addressed and verified.
            None => crate::plugin::default_cache_dir()
                .unwrap_or_else(|| std::env::temp_dir().join("kubeplug"))
                .join("oci"),
        };
        // try_from, not new: new falls back to a default client on a bad certificate.
        let client = oci_client::Client::try_from(config)
            .map_err(|fault| RegistryConfigError::PushClient { fault })?;
        let fetch = super::fetch::Fetcher::new(args.insecure_registry.clone(), extra_roots)
            .map_err(|fault| RegistryConfigError::PullClient { fault })?;
        Ok(Registries {
            client,
            fetch: std::sync::Arc::new(fetch),
            credentials,
            insecure: args.insecure_registry.clone(),
            max_module_bytes: args.max_module_mib << 20,
            cache: super::cache::ModuleCache::new(cache_dir),
        })
    }

    /// The credentials for the registry of `r`.
    pub fn auth(&self, r: &OciRef) -> RegistryAuth {
        self.credentials.auth_for(&r.registry)
    }

    /// What the operator's own pulls may send and reach: the `--registry-config`
    /// credentials (each entry to its own host only) and any host (see [`Reach::Any`]).
    ///
    /// [`Reach::Any`]: super::access::Reach::Any
    pub fn access(&self) -> super::access::Access {
        super::access::Access {
            credentials: self.credentials.clone(),
            reach: super::access::Reach::Any,
        }
    }
}

/// An `auths` key as an error shows it: one line, at most 253 characters.
fn shown_key(key: &str) -> String {
    crate::contract::text::shown_max(key, 253).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_forms() {
        let cfg = br#"{"auths":{
            "https://reg.example:5000/v1/": {"auth": "dXNlcjpwYXNz"},
            "other.example": {"username": "u", "password": "p:w"},
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "tokenonly.example": {"identitytoken": "x"}
        }}"#;
        let c = Credentials::from_docker_config(cfg).unwrap();
        assert!(
            matches!(c.auth_for("reg.example:5000"), RegistryAuth::Basic(u, p) if u == "user" && p == "pass")
        );
        assert!(
            matches!(c.auth_for("other.example"), RegistryAuth::Basic(u, p) if u == "u" && p == "p:w")
        );
        assert!(matches!(c.auth_for("docker.io"), RegistryAuth::Basic(u, _) if u == "hub"));
        assert!(matches!(
            c.auth_for("tokenonly.example"),
            RegistryAuth::Anonymous
        ));
        assert!(matches!(c.auth_for("reg.example"), RegistryAuth::Anonymous));
        let err = Credentials::from_docker_config(br#"{"auths":{"h":{"auth":"!!"}}}"#).unwrap_err();
        assert!(
            format!("{err:#}").contains("auths.h.auth is not base64"),
            "{err:#}"
        );
        let err =
            Credentials::from_docker_config(br#"{"auths":{"h":{"auth":"dXNlcg=="}}}"#).unwrap_err();
        assert!(format!("{err:#}").contains("user:password"), "{err:#}");
        assert!(Credentials::from_docker_config(b"not json").is_err());
    }

    /// A pull Secret's values never reach the message (it ends in a Plugin's status, which
    /// more may read than the Secret): not a mistyped value, not a bad base64 byte, and an
    /// entry's key only bounded and on one line.
    #[test]
    fn a_bad_docker_config_is_reported_without_its_secrets() {
        for (config, secret) in [
            (
                r#"{"auths":{"h":{"password":17,"username":"hunter2-user"}}}"#,
                "17",
            ),
            (r#"{"auths":{"h":{"auth":["hunter2"]}}}"#, "hunter2"),
            (r#"{"auths":{"h":{"auth":"hunter2*"}}}"#, "hunter2"),
            (r#"{"auths":{"h":{"auth":"aHVudGVyMg*"}}}"#, "42"),
            (r#"{"auths": "hunter2"}"#, "hunter2"),
        ] {
            let err = Credentials::from_docker_config(config.as_bytes()).unwrap_err();
            let shown = format!("{err:#}");
            assert!(!shown.contains(secret), "{config}: {shown}");
        }
        let long = format!(
            r#"{{"auths":{{"{}\n":{{"auth":"!!"}}}}}}"#,
            "k".repeat(5000)
        );
        let shown = Credentials::from_docker_config(long.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(shown.len() < 400 && !shown.contains('\n'), "{shown}");
    }
}
