//! Plugin modules from OCI registries. Each image is pulled in the background, so a slow or
//! down registry never holds a pass; a tag is resolved again every poll interval (a moved
//! tag is a new revision, which rolls out like any other); a failed pull is retried with
//! capped backoff while the revision already running keeps running.
//!
//! Tenants name the registries, so: only registries a PluginPolicy lists are asked (checked
//! before this module is reached); credentials come only from the Plugin's own pull Secret,
//! and only its entry for the image's registry is sent; and every pull asks the registry for
//! the manifest with those credentials, even when the module is already cached, so one
//! tenant's pull never hands a private module to another tenant that names its digest.

use super::module::ImageModule;
use super::refusal::{Reason, Refusal};
use crate::oci::fetch::FetchError;
use crate::oci::{OciRef, Registries};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use oci_client::secrets::RegistryAuth;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The first retry after a failed pull; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The first retry after a pull that found the wrong thing (not a module, not signed).
const FIRST_PERMANENT_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between two pulls of a failing image.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The default interval at which a tag is resolved again.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);
/// The most pulls at once, host-wide: each may hold a module of up to `--max-module-mib` in
/// memory while it downloads, so tenants with many Plugins cannot multiply that.
pub const MAX_CONCURRENT_PULLS: usize = 4;
/// The longest one pull (credentials, manifest, signatures, module) may take.
pub const PULL_DEADLINE: Duration = Duration::from_secs(300);
/// The most images followed at once (more Plugins than that are refused by the cap on
/// Plugins first; this bounds the map whatever they name).
const MAX_IMAGES: usize = 4096;

/// A pulled image: what runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// The reference pinned to the manifest's digest (what status shows).
    pub pinned: OciRef,
    /// The module's SHA-256 (hex): the key of the compile and of the module cache.
    pub module_digest: String,
}

#[derive(Debug)]
struct Entry {
    /// The last good pull, kept while later ones fail.
    good: Option<PulledImage>,
    /// The last pull's failure, if it failed.
    error: Option<Refusal>,
    in_flight: bool,
    failures: u32,
    /// When the next pull is due (a retry, or a tag's next resolution).
    next: Instant,
}

/// The images Plugin objects name, pulled and followed.
pub struct ImagePulls {
    registries: Registries,
    client: kube::Client,
    poll: Duration,
    entries: Mutex<HashMap<ImageModule, Entry>>,
    wake: Arc<Notify>,
    pulls: Arc<tokio::sync::Semaphore>,
    deadline: Duration,
}

impl ImagePulls {
    /// Pulls through `registries`, reads pull Secrets with `client`, and notifies `wake`
    /// when a pull ends.
    pub fn new(
        registries: Registries,
        client: kube::Client,
        poll: Duration,
        wake: Arc<Notify>,
    ) -> Arc<ImagePulls> {
        Arc::new(ImagePulls {
            registries,
            client,
            poll,
            entries: Mutex::new(HashMap::new()),
            wake,
            pulls: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_PULLS)),
            deadline: PULL_DEADLINE,
        })
    }

    /// What `image` runs now, or why nothing yet; starts a pull when one is due.
    pub fn get(self: &Arc<Self>, image: &ImageModule) -> Result<PulledImage, Refusal> {
        let now = Instant::now();
        let mut entries = self.lock();
        if !entries.contains_key(image) && entries.len() >= MAX_IMAGES {
            return Err(Refusal::new(
                Reason::PullFailed,
                format!("this host follows {MAX_IMAGES} images already"),
            ));
        }
        let entry = entries.entry(image.clone()).or_insert_with(|| Entry {
            good: None,
            error: None,
            in_flight: false,
            failures: 0,
            next: now,
        });
        if !entry.in_flight && now >= entry.next {
            entry.in_flight = true;
            let me = self.clone();
            let image = image.clone();
            tokio::spawn(async move {
                let outcome = me.pull(&image).await;
                me.finish(&image, outcome);
            });
        }
        match (&entry.good, &entry.error) {
            (Some(good), _) => Ok(good.clone()),
            (None, Some(error)) => Err(error.clone()),
            (None, None) => Err(Refusal::new(
                Reason::Pulling,
                format!("pulling {}", image.reference),
            )),
        }
    }

    /// The bytes of a pulled module, from the module cache (checked against its digest).
    pub fn module(&self, digest: &str) -> Option<Vec<u8>> {
        self.registries.cache.module(digest)
    }

    /// The module digests of the images pulled (their compiled modules are kept).
    pub fn digests(&self) -> Vec<String> {
        self.lock()
            .values()
            .filter_map(|e| e.good.as_ref().map(|g| g.module_digest.clone()))
            .collect()
    }

    /// Forgets the images no Plugin names any more.
    pub fn retain(&self, used: &HashSet<ImageModule>) {
        self.lock().retain(|image, _| used.contains(image));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ImageModule, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn finish(&self, image: &ImageModule, outcome: Result<PulledImage, Refusal>) {
        let now = Instant::now();
        let pinned = image.reference.digest.is_some();
        {
            let mut entries = self.lock();
            let Some(entry) = entries.get_mut(image) else {
                return; // no Plugin names it any more
            };
            entry.in_flight = false;
            match outcome {
                Ok(pulled) => {
                    if entry.good.as_ref() != Some(&pulled) {
                        tracing::info!(
                            image = %image.reference,
                            pinned = %pulled.pinned,
                            module = %pulled.module_digest,
                            "image pulled"
                        );
                    }
                    entry.good = Some(pulled);
                    entry.error = None;
                    entry.failures = 0;
                    // A digest never changes: asked again only when the host restarts.
                    entry.next = if pinned {
                        now + Duration::from_secs(365 * 24 * 3600)
                    } else {
                        now + self.poll
                    };
                }
                Err(refusal) => {
                    tracing::warn!(
                        image = %image.reference,
                        namespace = %image.namespace,
                        reason = %refusal.reason,
                        error = %refusal.message,
                        "pulling an image failed"
                    );
                    entry.failures = entry.failures.saturating_add(1);
                    entry.next = now + backoff(entry.failures, refusal.reason.is_transient());
                    entry.error = Some(refusal);
                }
            }
        }
        self.wake.notify_one();
    }

    /// One pull: the credentials from the pull Secret, then the manifest (always asked,
    /// see the module's doc) and the module (from the cache when held).
    async fn pull(&self, image: &ImageModule) -> Result<PulledImage, Refusal> {
        let _permit = self
            .pulls
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Refusal::new(Reason::PullFailed, "the host is shutting down"))?;
        // A registry that answers a byte at a time would otherwise hold a slot for hours.
        tokio::time::timeout(self.deadline, self.pull_now(image))
            .await
            .unwrap_or_else(|_| {
                Err(Refusal::new(
                    Reason::PullFailed,
                    format!(
                        "pulling {} took longer than {} s; stopped",
                        image.reference,
                        self.deadline.as_secs()
                    ),
                ))
            })
    }

    async fn pull_now(&self, image: &ImageModule) -> Result<PulledImage, Refusal> {
        let auth = match &image.pull_secret {
            Some(name) => self.credentials(image, name).await?,
            None => RegistryAuth::Anonymous,
        };
        let reg = &self.registries;
        let mut reference = image.reference.clone();
        // Whether the registry has already let these credentials read the repository.
        let mut authorized = false;
        if !image.verify.is_empty() {
            // Verified first, by digest, and only that digest pulled: an unsigned or wrongly
            // signed module is never downloaded, let alone compiled.
            reference = crate::oci::verification::resolve(reg, &reference, &auth)
                .await
                .map_err(|e| refusal_of(&e))?;
            let mut configs = Vec::new();
            for (who, json) in &image.verify {
                let config: crate::oci::verification::VerificationConfig =
                    serde_json::from_str(json).map_err(|e| {
                        Refusal::new(Reason::VerificationFailed, format!("{who}: {e}"))
                    })?;
                configs.push((who.as_str(), config));
            }
            let configs: Vec<(&str, &crate::oci::verification::VerificationConfig)> =
                configs.iter().map(|(who, c)| (*who, c)).collect();
            // One read of the signatures for every config that applies.
            crate::oci::verification::verify_all(reg, &reference, &configs, &auth)
                .await
                .map_err(|e| {
                    let reason = if e.is_transient() {
                        Reason::PullFailed
                    } else {
                        Reason::VerificationFailed
                    };
                    let text = e.to_string();
                    let named = configs.iter().any(|(who, _)| text.starts_with(who));
                    let message = if named {
                        text
                    } else {
                        let who: Vec<&str> = configs.iter().map(|(who, _)| *who).collect();
                        format!("{} (required by {})", text, who.join(", "))
                    };
                    Refusal::new(reason, message)
                })?;
            // The signatures were read from the module's repository with these credentials.
            authorized = true;
        }
        let pulled = if authorized {
            crate::oci::transfer::pull_with(reg, &reference, &auth).await
        } else {
            crate::oci::transfer::pull_checked(reg, &reference, &auth).await
        }
        .map_err(|e| refusal_of(&e))?;
        Ok(PulledImage {
            pinned: pulled.pinned,
            module_digest: pulled.module_digest,
        })
    }

    /// The pull Secret's credentials for the image's registry.
    async fn credentials(&self, image: &ImageModule, name: &str) -> Result<RegistryAuth, Refusal> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &image.namespace);
        let what = format!("pull Secret {}/{name}", image.namespace);
        let secret = match api.get_opt(name).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Refusal::new(
                    Reason::PullFailed,
                    format!("{what} does not exist"),
                ));
            }
            Err(e) => {
                return Err(Refusal::new(
                    Reason::PullFailed,
                    format!("cannot read {what}: {e}"),
                ));
            }
        };
        if secret.type_.as_deref() != Some("kubernetes.io/dockerconfigjson") {
            return Err(Refusal::new(
                Reason::ImageInvalid,
                format!(
                    "{what} is of type {:?}, not kubernetes.io/dockerconfigjson",
                    crate::contract::text::shown_max(secret.type_.as_deref().unwrap_or(""), 100)
                ),
            ));
        }
        let Some(config) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
        else {
            return Err(Refusal::new(
                Reason::ImageInvalid,
                format!("{what} has no .dockerconfigjson"),
            ));
        };
        let credentials = crate::oci::registry::Credentials::from_docker_config(&config.0)
            .map_err(|e| Refusal::new(Reason::ImageInvalid, format!("{what}: {e:#}")))?;
        match credentials.auth_for(&image.reference.registry) {
            RegistryAuth::Anonymous => Err(Refusal::new(
                Reason::ImageInvalid,
                format!("{what} has no credentials for {}", image.reference.registry),
            )),
            auth => Ok(auth),
        }
    }
}

/// A failed pull's reason: the registry unreachable or erring is retried soon
/// (`PullFailed`); what the registry holds being wrong waits longer (`ImageInvalid`,
/// `ModuleTooLarge`).
fn refusal_of(err: &anyhow::Error) -> Refusal {
    let message = format!("{err:#}");
    let fetch = err.chain().find_map(|e| e.downcast_ref::<FetchError>());
    let reason = match fetch {
        Some(f) if f.is_transient() => Reason::PullFailed,
        // Not pushed yet, most often: retried with the same backoff as a registry error.
        Some(FetchError::Status { status: 404, .. }) => Reason::PullFailed,
        Some(FetchError::Auth { .. }) => Reason::PullFailed,
        Some(FetchError::TooLarge {
            what: "the blob", ..
        }) => Reason::ModuleTooLarge,
        Some(_) => Reason::ImageInvalid,
        None if message.contains("--max-module-mib") => Reason::ModuleTooLarge,
        None if message.contains("module cache") => Reason::PullFailed,
        None => Reason::ImageInvalid,
    };
    Refusal::new(reason, message)
}

/// 1 s, 2 s, 4 s … up to five minutes for a registry that fails; from 30 s for one whose
/// content is wrong (a person fixes that; a new Plugin spec retries at once).
fn backoff(failures: u32, transient: bool) -> Duration {
    let first = if transient {
        FIRST_BACKOFF
    } else {
        FIRST_PERMANENT_BACKOFF
    };
    first
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten Plugins naming ten images of a registry that never answers: at most
    /// MAX_CONCURRENT_PULLS connections are open at once, and each image waits its turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pulls_are_bounded_host_wide() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let open = Arc::new(AtomicUsize::new(0));
        let seen = open.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                held.push(stream); // never answered
            }
        });
        let cache = tempfile::tempdir().unwrap();
        let registries = Registries::new(&crate::oci::RegistryArgs {
            insecure_registry: vec![addr.clone()],
            module_cache: Some(cache.path().to_path_buf()),
            max_module_mib: 64,
            ..Default::default()
        })
        .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let pulls = ImagePulls::new(registries, client, DEFAULT_POLL, Arc::new(Notify::new()));
        for i in 0..10 {
            let image = ImageModule {
                namespace: "team-a".into(),
                reference: OciRef::parse(&format!("oci://{addr}/team-a/m{i}:v1")).unwrap(),
                pull_secret: None,
                verify: Vec::new(),
                generation: 1,
            };
            let waiting = pulls.get(&image).unwrap_err();
            assert_eq!(waiting.reason, Reason::Pulling);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(open.load(Ordering::SeqCst), MAX_CONCURRENT_PULLS);
    }

    /// A registry that never answers gives up its slot at the deadline, with a reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pull_that_never_ends_is_stopped_at_its_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let cache = tempfile::tempdir().unwrap();
        let registries = Registries::new(&crate::oci::RegistryArgs {
            insecure_registry: vec![addr.clone()],
            module_cache: Some(cache.path().to_path_buf()),
            max_module_mib: 64,
            ..Default::default()
        })
        .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let wake = Arc::new(Notify::new());
        let mut pulls = ImagePulls::new(registries, client, DEFAULT_POLL, wake.clone());
        Arc::get_mut(&mut pulls).unwrap().deadline = Duration::from_millis(300);
        let image = ImageModule {
            namespace: "team-a".into(),
            reference: OciRef::parse(&format!("oci://{addr}/team-a/slow:v1")).unwrap(),
            pull_secret: None,
            verify: Vec::new(),
            generation: 1,
        };
        assert_eq!(pulls.get(&image).unwrap_err().reason, Reason::Pulling);
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .expect("the pull ends at its deadline");
        let err = pulls.get(&image).unwrap_err();
        assert_eq!(err.reason, Reason::PullFailed);
        assert!(err.message.contains("took longer than"), "{}", err.message);
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let waits: Vec<u64> = (1..=11).map(|f| backoff(f, true).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX, true), MAX_BACKOFF);
        assert_eq!(backoff(1, false), Duration::from_secs(30));
        assert_eq!(backoff(2, false), Duration::from_secs(60));
        assert_eq!(backoff(5, false), MAX_BACKOFF);
    }

    #[test]
    fn reasons_of_failed_pulls() {
        let down = anyhow::Error::new(FetchError::Status {
            url: "u".into(),
            status: 503,
            body: String::new(),
        })
        .context("pulling the manifest of oci://r/x:v1");
        assert_eq!(refusal_of(&down).reason, Reason::PullFailed);
        assert!(
            refusal_of(&down)
                .message
                .starts_with("pulling the manifest")
        );
        let missing = anyhow::Error::new(FetchError::Status {
            url: "u".into(),
            status: 404,
            body: "MANIFEST_UNKNOWN".into(),
        });
        assert_eq!(refusal_of(&missing).reason, Reason::PullFailed);
        let forbidden = anyhow::Error::new(FetchError::Status {
            url: "u".into(),
            status: 403,
            body: String::new(),
        });
        assert_eq!(refusal_of(&forbidden).reason, Reason::ImageInvalid);
        let big = anyhow::anyhow!(
            "the wasm layer is 9 bytes, more than the 1 MiB limit (--max-module-mib)"
        );
        assert_eq!(refusal_of(&big).reason, Reason::ModuleTooLarge);
        let image = anyhow::anyhow!("no wasm layer: a container image, not a wasm module");
        assert_eq!(refusal_of(&image).reason, Reason::ImageInvalid);
    }
}
