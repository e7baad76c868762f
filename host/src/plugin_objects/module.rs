//! Where a `Plugin`'s component comes from: a ConfigMap in its own namespace (`binaryData`,
//! as `kubectl create configmap NAME --from-file=plugin.wasm=FILE` writes it), checked for
//! size and digest pin before anything compiles it.

use super::refusal::{Reason, Refusal};
use super::spec::ModuleSpec;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sha2::{Digest, Sha256};

/// The default largest module accepted (64 MiB, `--max-module-mib`, one limit for every
/// source): beyond it a module is refused before it compiles. A ConfigMap holds at most
/// 1 MiB; OCI modules (Python, TypeScript: 12–18 MB) are larger.
pub const DEFAULT_MAX_MODULE_BYTES: usize = 64 << 20;

/// Where a Plugin's module is, checked: what the spec names, without fetching anything.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModuleRef {
    /// A ConfigMap's `binaryData` key in the Plugin's namespace.
    ConfigMap(ConfigMapModule),
    /// An image in an OCI registry.
    Image(ImageModule),
}

/// A module in a ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigMapModule {
    /// The Plugin's namespace.
    pub namespace: String,
    /// The ConfigMap.
    pub config_map: String,
    /// Its `binaryData` key.
    pub key: String,
}

/// A module in an OCI registry, and the Secret with its credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageModule {
    /// The Plugin's namespace (where the pull secret is).
    pub namespace: String,
    /// The reference as written (a tag is followed; a digest never changes).
    pub reference: crate::oci::OciRef,
    /// A `kubernetes.io/dockerconfigjson` Secret in the namespace.
    pub pull_secret: Option<String>,
    /// The verification configs its signatures must satisfy, each as (who requires it,
    /// its JSON): the host's and the applying PluginPolicies'.
    pub verify: Vec<(String, String)>,
    /// The Plugin's generation: a new spec resolves its tag (and retries a failed pull)
    /// at once, whatever the backoff of the previous one.
    pub generation: i64,
}

impl ModuleRef {
    /// The module reference of a Plugin in `namespace`, or why the spec names none this
    /// host can fetch.
    pub fn of(namespace: &str, spec: &ModuleSpec) -> Result<ModuleRef, Refusal> {
        match (&spec.config_map, &spec.image) {
            (Some(_), Some(_)) => Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.module: set exactly one of configMap and image, not both",
            )),
            (None, None) => Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.module: set one of configMap and image",
            )),
            (None, Some(image)) => {
                let reference = crate::oci::OciRef::parse(image).map_err(|e| {
                    Refusal::new(Reason::InvalidSpec, format!("spec.module.image: {e}"))
                })?;
                if let Some(secret) = &spec.pull_secret
                    && !crate::contract::names::is_dns_subdomain(secret)
                {
                    return Err(Refusal::new(
                        Reason::InvalidSpec,
                        format!(
                            "spec.module.pullSecret {:?} is not a valid Secret name",
                            crate::contract::text::shown_max(secret, 256)
                        ),
                    ));
                }
                Ok(ModuleRef::Image(ImageModule {
                    namespace: namespace.into(),
                    reference,
                    pull_secret: spec.pull_secret.clone(),
                    verify: Vec::new(),
                    generation: 0,
                }))
            }
            (Some(cm), None) => {
                if spec.pull_secret.is_some() {
                    return Err(Refusal::new(
                        Reason::InvalidSpec,
                        "spec.module.pullSecret is for an image, not a configMap",
                    ));
                }
                for (field, value) in [("name", &cm.name), ("key", &cm.key)] {
                    if !valid_config_map_part(field, value) {
                        return Err(Refusal::new(
                            Reason::InvalidSpec,
                            format!(
                                "spec.module.configMap.{field} {:?} is not a valid ConfigMap {field}",
                                crate::contract::text::shown_max(value, 256)
                            ),
                        ));
                    }
                }
                Ok(ModuleRef::ConfigMap(ConfigMapModule {
                    namespace: namespace.into(),
                    config_map: cm.name.clone(),
                    key: cm.key.clone(),
                }))
            }
        }
    }
}

/// ConfigMap names are DNS subdomains; keys are at most 253 characters of `[-._a-zA-Z0-9]`
/// (never `.` or `..`), as the API server checks them.
fn valid_config_map_part(field: &str, value: &str) -> bool {
    match field {
        "name" => crate::contract::names::is_dns_subdomain(value),
        _ => {
            !value.is_empty()
                && value.len() <= 253
                && value != "."
                && value != ".."
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        }
    }
}

/// Compiles a namespace may start at once.
pub const COMPILE_BURST: f64 = 3.0;
/// Then one per this many seconds.
pub const COMPILE_EVERY_SECS: f64 = 20.0;

/// A token bucket of compiles per namespace: a tenant whose modules change all the time
/// cannot keep the host's cores compiling.
#[derive(Debug, Default)]
pub struct CompileBudget {
    buckets: std::collections::HashMap<String, (f64, std::time::Instant)>,
}

impl CompileBudget {
    /// Takes a compile for `namespace` at `now`, or says how long until one is free.
    pub fn take(
        &mut self,
        namespace: &str,
        now: std::time::Instant,
    ) -> Result<(), std::time::Duration> {
        if self.buckets.len() > 10_000 {
            // Only full buckets are dropped: nobody gains a compile from the pruning.
            self.buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() / COMPILE_EVERY_SECS < COMPILE_BURST
            });
        }
        let (tokens, at) = self
            .buckets
            .entry(namespace.to_string())
            .or_insert((COMPILE_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() / COMPILE_EVERY_SECS)
            .min(COMPILE_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(std::time::Duration::from_secs_f64(
                (1.0 - *tokens) * COMPILE_EVERY_SECS,
            ))
        }
    }
}

/// A module's bytes and what they are.
#[derive(Debug, Clone)]
pub struct Module {
    /// The component.
    pub bytes: Vec<u8>,
    /// Its SHA-256, lower-case hex.
    pub digest: String,
}

/// Fetches the module `at` names and checks its size and the pin.
pub async fn fetch(
    client: &kube::Client,
    at: &ConfigMapModule,
    sha256: Option<&str>,
    max_bytes: usize,
) -> Result<Module, Refusal> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    let cm = match api.get_opt(&at.config_map).await {
        Ok(Some(cm)) => cm,
        Ok(None) => {
            return Err(Refusal::new(
                Reason::ModuleNotFound,
                format!(
                    "ConfigMap {}/{} does not exist",
                    at.namespace, at.config_map
                ),
            ));
        }
        Err(err) => {
            return Err(Refusal::new(
                Reason::ModuleUnavailable,
                format!(
                    "cannot read ConfigMap {}/{}: {err}",
                    at.namespace, at.config_map
                ),
            ));
        }
    };
    let bytes = extract(&cm, at)?;
    check(bytes, sha256, max_bytes, at)
}

fn extract(cm: &ConfigMap, at: &ConfigMapModule) -> Result<Vec<u8>, Refusal> {
    if let Some(b) = cm.binary_data.as_ref().and_then(|d| d.get(&at.key)) {
        return Ok(b.0.clone());
    }
    let why = if cm.data.as_ref().is_some_and(|d| d.contains_key(&at.key)) {
        "is in data (text), not binaryData: create it from the .wasm file with kubectl create configmap --from-file"
    } else {
        "is not in its binaryData"
    };
    Err(Refusal::new(
        Reason::ModuleNotFound,
        format!(
            "key {:?} of ConfigMap {}/{} {why}",
            at.key, at.namespace, at.config_map
        ),
    ))
}

/// Size first (nothing larger is hashed or compiled), then the pin.
fn check(
    bytes: Vec<u8>,
    sha256: Option<&str>,
    max_bytes: usize,
    at: &ConfigMapModule,
) -> Result<Module, Refusal> {
    if bytes.len() > max_bytes {
        return Err(Refusal::new(
            Reason::ModuleTooLarge,
            format!(
                "{}/{} key {:?} is {} bytes; this host accepts modules of at most {max_bytes} bytes (--max-module-mib)",
                at.namespace,
                at.config_map,
                at.key,
                bytes.len()
            ),
        ));
    }
    let digest = hex::encode(Sha256::digest(&bytes));
    if let Some(pin) = sha256 {
        let pin = pin.to_ascii_lowercase();
        if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "spec.module.sha256 {:?} is not 64 hex digits",
                    crate::contract::text::shown_max(&pin, 80)
                ),
            ));
        }
        if pin != digest {
            return Err(Refusal::new(
                Reason::DigestMismatch,
                format!("the module's SHA-256 is {digest}; spec.module.sha256 pins {pin}"),
            ));
        }
    }
    Ok(Module { bytes, digest })
}

#[cfg(test)]
mod tests {
    use super::super::spec::ConfigMapRef;
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn at() -> ConfigMapModule {
        ConfigMapModule {
            namespace: "team-a".into(),
            config_map: "pinner".into(),
            key: "plugin.wasm".into(),
        }
    }

    fn spec(cm: Option<(&str, &str)>, image: Option<&str>) -> ModuleSpec {
        ModuleSpec {
            config_map: cm.map(|(n, k)| ConfigMapRef {
                name: n.into(),
                key: k.into(),
            }),
            image: image.map(Into::into),
            pull_secret: None,
            sha256: None,
        }
    }

    #[test]
    fn exactly_one_source_with_valid_names() {
        assert_eq!(
            ModuleRef::of("team-a", &spec(Some(("pinner", "plugin.wasm")), None)),
            Ok(ModuleRef::ConfigMap(at()))
        );
        let image = ModuleRef::of("team-a", &spec(None, Some("oci://r.example/x:v1"))).unwrap();
        assert!(
            matches!(&image, ModuleRef::Image(i) if i.reference.tag.as_deref() == Some("v1")),
            "{image:?}"
        );
        let mut with_secret = spec(Some(("a", "k")), None);
        with_secret.pull_secret = Some("creds".into());
        assert!(
            ModuleRef::of("team-a", &with_secret)
                .unwrap_err()
                .message
                .contains("pullSecret is for an image")
        );
        let mut bad_secret = spec(None, Some("oci://r.example/x"));
        bad_secret.pull_secret = Some("../x".into());
        assert!(
            ModuleRef::of("team-a", &bad_secret)
                .unwrap_err()
                .message
                .contains("not a valid Secret name")
        );
        for (s, reason, says) in [
            (spec(None, None), Reason::InvalidSpec, "set one of"),
            (
                spec(Some(("a", "k")), Some("oci://r/x")),
                Reason::InvalidSpec,
                "not both",
            ),
            (
                spec(None, Some("r.example/x")),
                Reason::InvalidSpec,
                "spec.module.image",
            ),
            (
                spec(Some(("../x", "k")), None),
                Reason::InvalidSpec,
                "configMap.name",
            ),
            (
                spec(Some(("a", "a/b")), None),
                Reason::InvalidSpec,
                "configMap.key",
            ),
            (
                spec(Some(("a", "..")), None),
                Reason::InvalidSpec,
                "configMap.key",
            ),
        ] {
            let err = ModuleRef::of("team-a", &s).unwrap_err();
            assert_eq!(err.reason, reason, "{s:?}");
            assert!(err.message.contains(says), "{}", err.message);
        }
    }

    #[test]
    fn the_module_must_be_binary_data_under_its_key() {
        let mut cm = ConfigMap::default();
        let err = extract(&cm, &at()).unwrap_err();
        assert_eq!(err.reason, Reason::ModuleNotFound);
        cm.data = Some(BTreeMap::from([("plugin.wasm".into(), "text".into())]));
        assert!(
            extract(&cm, &at())
                .unwrap_err()
                .message
                .contains("not binaryData")
        );
        cm.binary_data = Some(BTreeMap::from([(
            "plugin.wasm".into(),
            ByteString(vec![0, 97]),
        )]));
        assert_eq!(extract(&cm, &at()).unwrap(), vec![0, 97]);
    }

    #[test]
    fn compiles_per_namespace_are_a_burst_then_one_per_interval() {
        let mut b = CompileBudget::default();
        let t0 = std::time::Instant::now();
        for _ in 0..3 {
            assert!(b.take("team-a", t0).is_ok());
        }
        let wait = b.take("team-a", t0).unwrap_err();
        assert_eq!(wait.as_secs(), 20);
        assert!(
            b.take("team-b", t0).is_ok(),
            "namespaces do not share a budget"
        );
        let later = t0 + std::time::Duration::from_secs(21);
        assert!(b.take("team-a", later).is_ok());
        assert!(b.take("team-a", later).is_err());
    }

    #[test]
    fn size_then_pin() {
        let err = check(vec![0; 11], None, 10, &at()).unwrap_err();
        assert_eq!(err.reason, Reason::ModuleTooLarge);
        assert!(err.message.contains("11 bytes") && err.message.contains("at most 10"));
        let digest = hex::encode(Sha256::digest(b"abc"));
        assert_eq!(
            check(b"abc".to_vec(), Some(&digest.to_uppercase()), 10, &at())
                .unwrap()
                .digest,
            digest
        );
        let other = "0".repeat(64);
        assert_eq!(
            check(b"abc".to_vec(), Some(&other), 10, &at())
                .unwrap_err()
                .reason,
            Reason::DigestMismatch
        );
        assert_eq!(
            check(b"abc".to_vec(), Some("zz"), 10, &at())
                .unwrap_err()
                .reason,
            Reason::InvalidSpec
        );
    }
}
