//! Plugin modules from OCI registries. Each image is pulled in the background, so a slow or
//! down registry never holds a pass; a tag is resolved again every poll interval (a moved
//! tag is a new revision, which rolls out like any other); a failed pull is retried with
//! capped backoff while the revision already running keeps running.
//!
//! Tenants name the registries, so: only registries a PluginPolicy lists are asked (checked
//! before this module is reached), and so are the token realms and redirects they point to
//! (the registry itself or a host the applying policies list, see `oci::access`);
//! credentials come only from the Plugin's own pull Secret, and each of its entries is sent
//! only to its own host; every pull asks the registry for the manifest with those
//! credentials, even when the module is already cached, so one tenant's pull never hands a
//! private module to another tenant that names its digest; and nothing a registry answers
//! reaches a status or an Event beyond a status code and a spec error code.
//!
//! Pulls share [`MAX_CONCURRENT_PULLS`] slots fairly between namespaces ([`FairSlots`] with
//! preemption): a namespace whose registry hangs keeps at most its share once another
//! waits. An image no Plugin names any more has its pull aborted at once, freeing its slot.

use super::module::ImageModule;
use super::refusal::{Reason, Refusal};
use crate::oci::access::{Access, Reach};
use crate::oci::fetch::{Body, FetchError};
use crate::oci::{OciRef, PullError, Registries, ResolveError, VerifyError};
use crate::queue::FairSlots;
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
/// memory while it downloads, so tenants with many Plugins cannot multiply that. Shared
/// fairly between namespaces.
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
    /// The pull in flight, aborted when no Plugin names the image any more.
    task: Option<tokio::task::AbortHandle>,
    /// Which pull of this entry is the latest (a finished, aborted one is ignored).
    attempt: u64,
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
    pulls: FairSlots,
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
            pulls: FairSlots::new(MAX_CONCURRENT_PULLS).with_preemption(),
            deadline: PULL_DEADLINE,
        })
    }

    /// What `image` runs now, or why nothing yet; starts a pull when one is due. `hosts` are
    /// the registry hosts the PluginPolicies applying to the image's namespace list
    /// ([`crate::oci::access::registry_hosts`]): the only ones, besides the image's registry,
    /// its token realm and redirects may point to.
    pub fn get(
        self: &Arc<Self>,
        image: &ImageModule,
        hosts: Vec<String>,
    ) -> Result<PulledImage, Refusal> {
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
            task: None,
            attempt: 0,
            failures: 0,
            next: now,
        });
        if !entry.in_flight && now >= entry.next {
            entry.in_flight = true;
            entry.attempt += 1;
            let attempt = entry.attempt;
            let me = self.clone();
            let image = image.clone();
            let task = tokio::spawn(async move {
                let outcome = me.pull(&image, hosts).await;
                me.finish(&image, attempt, outcome);
            });
            entry.task = Some(task.abort_handle());
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

    /// Forgets the images no Plugin names any more, aborting their pulls at once (their
    /// slots go to the next waiting pull).
    pub fn retain(&self, used: &HashSet<ImageModule>) {
        self.lock().retain(|image, entry| {
            let keep = used.contains(image);
            if !keep && let Some(task) = entry.task.take() {
                tracing::info!(image = %image.reference, namespace = %image.namespace, "no Plugin names the image any more; its pull is stopped");
                task.abort();
            }
            keep
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ImageModule, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn finish(&self, image: &ImageModule, attempt: u64, outcome: Result<PulledImage, Refusal>) {
        let now = Instant::now();
        let pinned = image.reference.digest.is_some();
        {
            let mut entries = self.lock();
            let Some(entry) = entries.get_mut(image).filter(|e| e.attempt == attempt) else {
                return; // no Plugin names it any more
            };
            entry.in_flight = false;
            entry.task = None;
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

    /// One pull, in a slot of the image's namespace: the credentials from the pull Secret,
    /// then the manifest (always asked, see the module's doc) and the module (from the cache
    /// when held). A slot asked back for another namespace's fair share is given back and
    /// the pull queues again from the start.
    async fn pull(&self, image: &ImageModule, hosts: Vec<String>) -> Result<PulledImage, Refusal> {
        loop {
            let mut slot = self.pulls.acquire(&image.namespace).await;
            // A registry that answers a byte at a time would otherwise hold a slot for hours.
            let attempt = tokio::time::timeout(self.deadline, self.pull_now(image, &hosts));
            tokio::select! {
                outcome = attempt => {
                    return outcome.unwrap_or_else(|_| {
                        Err(Refusal::new(
                            Reason::PullFailed,
                            format!(
                                "pulling {} took longer than {} s; stopped",
                                image.reference,
                                self.deadline.as_secs()
                            ),
                        ))
                    });
                }
                () = slot.preempted() => {
                    tracing::info!(image = %image.reference, namespace = %image.namespace, "pull paused: its slot went to a namespace below its fair share; queued again");
                }
            }
        }
    }

    async fn pull_now(
        &self,
        image: &ImageModule,
        hosts: &[String],
    ) -> Result<PulledImage, Refusal> {
        let credentials = match &image.pull_secret {
            Some(name) => self.credentials(image, name).await?,
            None => crate::oci::registry::Credentials::default(),
        };
        let access = Access {
            credentials,
            reach: Reach::Listed(hosts.to_vec()),
        };
        let reg = &self.registries;
        let mut reference = image.reference.clone();
        // Whether the registry has already let these credentials read the repository.
        let mut authorized = false;
        if !image.verify.is_empty() {
            // Verified first, by digest, and only that digest pulled: an unsigned or wrongly
            // signed module is never downloaded, let alone compiled.
            reference = crate::oci::verification::resolve(reg, &reference, &access)
                .await
                .map_err(|e| resolve_refusal(&e))?;
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
            crate::oci::verification::verify_all(reg, &reference, &configs, &access)
                .await
                .map_err(|e| {
                    let who: Vec<&str> = configs.iter().map(|(who, _)| *who).collect();
                    verify_refusal(&e, &who)
                })?;
            // The signatures were read from the module's repository with these credentials.
            authorized = true;
        }
        let pulled = if authorized {
            crate::oci::transfer::pull_with(reg, &reference, &access).await
        } else {
            crate::oci::transfer::pull_checked(reg, &reference, &access).await
        }
        .map_err(|e| pull_refusal(&e))?;
        Ok(PulledImage {
            pinned: pulled.pinned,
            module_digest: pulled.module_digest,
        })
    }

    /// The pull Secret's credentials (it must have an entry for the image's registry; each
    /// entry goes only to its own host).
    async fn credentials(
        &self,
        image: &ImageModule,
        name: &str,
    ) -> Result<crate::oci::registry::Credentials, Refusal> {
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
            _ => Ok(credentials),
        }
    }
}

/// A failed pull's refusal: the registry unreachable or erring is retried soon
/// (`PullFailed`); what the registry holds being wrong waits longer (`ImageInvalid`,
/// `ModuleTooLarge`). The error's variant decides, never its words.
fn pull_refusal(err: &PullError) -> Refusal {
    let reason = match err {
        PullError::TooLarge { .. } => Reason::ModuleTooLarge,
        PullError::Cache { .. } => Reason::PullFailed,
        PullError::Layout { .. } => Reason::ImageInvalid,
        PullError::Fetch { fault, .. } => fetch_reason(fault),
    };
    Refusal::new(reason, err.to_string())
}

/// A tag that could not be resolved (before verification): by the manifest read's failure.
fn resolve_refusal(err: &ResolveError) -> Refusal {
    Refusal::new(fetch_reason(&err.fault), err.to_string())
}

/// A failed verification's refusal: signatures that could not be read are retried like a
/// registry error (`PullFailed`), a module not signed as required waits
/// (`VerificationFailed`). The message names the configs that required signatures
/// (`configs`) unless the failure already names its own.
fn verify_refusal(err: &VerifyError, configs: &[&str]) -> Refusal {
    let reason = if err.is_transient() {
        Reason::PullFailed
    } else {
        Reason::VerificationFailed
    };
    let message = if err.names_config() {
        err.to_string()
    } else {
        format!("{err} (required by {})", configs.join(", "))
    };
    Refusal::new(reason, message)
}

/// What a failed registry read means for the Plugin, by the failure's variant.
fn fetch_reason(fault: &FetchError) -> Reason {
    match fault {
        f if f.is_transient() => Reason::PullFailed,
        // Not pushed yet, most often: retried with the same backoff as a registry error.
        FetchError::Status { status: 404, .. } => Reason::PullFailed,
        FetchError::Auth { .. } => Reason::PullFailed,
        FetchError::Refused { .. } => Reason::ImageNotAllowed,
        FetchError::TooLarge {
            what: Body::Blob, ..
        } => Reason::ModuleTooLarge,
        FetchError::Transport { .. }
        | FetchError::Status { .. }
        | FetchError::TooLarge { .. }
        | FetchError::Mismatch { .. } => Reason::ImageInvalid,
    }
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

/// The hostile registry the integration tests use too.
#[cfg(test)]
#[path = "../../../tests/it/registry_hostile/trickling.rs"]
mod trickling;

#[cfg(test)]
mod tests {
    use super::trickling::{Trickling, trickling_registry};
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
            let waiting = pulls.get(&image, Vec::new()).unwrap_err();
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
        assert_eq!(
            pulls.get(&image, Vec::new()).unwrap_err().reason,
            Reason::Pulling
        );
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .expect("the pull ends at its deadline");
        let err = pulls.get(&image, Vec::new()).unwrap_err();
        assert_eq!(err.reason, Reason::PullFailed);
        assert!(err.message.contains("took longer than"), "{}", err.message);
    }

    /// A registry holding one module under any repository and tag; its count of manifest
    /// requests.
    async fn healthy_registry() -> (String, tokio::sync::watch::Receiver<usize>) {
        use sha2::{Digest, Sha256};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let module = b"\0asm\x0d\0\x01\0 healthy".to_vec();
        let hex = |b: &[u8]| hex::encode(Sha256::digest(b));
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": crate::oci::transfer::OCI_MANIFEST,
            "config": {"mediaType": crate::oci::transfer::CNCF_CONFIG, "digest": format!("sha256:{}", hex(b"{}")), "size": 2},
            "layers": [{"mediaType": crate::oci::transfer::CNCF_LAYER, "digest": format!("sha256:{}", hex(&module)), "size": module.len()}],
        }))
        .unwrap();
        let (asked_tx, asked) = tokio::sync::watch::channel(0usize);
        let asked_tx = Arc::new(asked_tx);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (manifest, module, asked_tx) =
                    (manifest.clone(), module.clone(), asked_tx.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = request.split(' ').nth(1).unwrap_or("").to_string();
                    let body = if path.contains("/manifests/") {
                        asked_tx.send_modify(|n| *n += 1);
                        manifest
                    } else {
                        module
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                });
            }
        });
        (addr, asked)
    }

    fn pulls_of(insecure: Vec<String>, cache: &std::path::Path) -> (Arc<ImagePulls>, Arc<Notify>) {
        let registries = Registries::new(&crate::oci::RegistryArgs {
            insecure_registry: insecure,
            module_cache: Some(cache.to_path_buf()),
            max_module_mib: 64,
            ..Default::default()
        })
        .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let wake = Arc::new(Notify::new());
        let pulls = ImagePulls::new(registries, client, DEFAULT_POLL, wake.clone());
        (pulls, wake)
    }

    fn image(namespace: &str, reference: &str) -> ImageModule {
        ImageModule {
            namespace: namespace.into(),
            reference: OciRef::parse(reference).unwrap(),
            pull_secret: None,
            verify: Vec::new(),
            generation: 1,
        }
    }

    /// Waits (bounded by `within`, a failure timeout only) until `watch` reaches `n`.
    async fn reaches(watch: &mut tokio::sync::watch::Receiver<usize>, n: usize, within: Duration) {
        let reached = tokio::time::timeout(within, watch.wait_for(|v| *v >= n))
            .await
            .map(|r| r.is_ok());
        assert!(
            matches!(reached, Ok(true)),
            "{} of {n} within {within:?}",
            *watch.borrow()
        );
    }

    /// Finding 4: five Plugins of team-a on a registry that trickles a byte a second held every pull
    /// slot, and team-b's Plugin on a healthy registry stayed Pulling (its registry never
    /// asked) until their deadline. Now team-b's pull takes a slot team-a holds beyond its
    /// share, at once; the wait is bounded here by a failure timeout well under the
    /// deadline of team-a's pulls.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_whose_registry_hangs_cannot_hold_another_tenants_pull() {
        let Trickling {
            addr: slow,
            mut accepted,
            ..
        } = trickling_registry(Duration::from_secs(1)).await;
        let (good, mut asked) = healthy_registry().await;
        let cache = tempfile::tempdir().unwrap();
        let (pulls, wake) = pulls_of(vec![slow.clone(), good.clone()], cache.path());
        for i in 0..5 {
            let a = image("team-a", &format!("oci://{slow}/team-a/m{i}:v1"));
            assert_eq!(
                pulls.get(&a, vec![slow.clone()]).unwrap_err().reason,
                Reason::Pulling
            );
        }
        reaches(&mut accepted, MAX_CONCURRENT_PULLS, Duration::from_secs(60)).await;
        let started = Instant::now();
        let b = image("team-b", &format!("oci://{good}/team-b/m:v1"));
        assert_eq!(
            pulls.get(&b, vec![good.clone()]).unwrap_err().reason,
            Reason::Pulling
        );
        // The failure timeout is far under PULL_DEADLINE: team-a's pulls still hang then.
        let pulled = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let notified = wake.notified();
                if let Ok(p) = pulls.get(&b, vec![good.clone()]) {
                    return p;
                }
                notified.await;
            }
        })
        .await
        .expect("team-b's pull completes while team-a's hang");
        eprintln!(
            "team-b's pull waited {:?} behind team-a's hanging pulls (registry asked {} time(s))",
            started.elapsed(),
            *asked.borrow_and_update()
        );
        assert!(pulled.module_digest.len() == 64);
        // team-a keeps its share (4 slots, 2 namespaces) of hanging pulls.
        assert!(pulls.pulls.held_by("team-a") >= MAX_CONCURRENT_PULLS / 2);
    }

    /// Finding 4, second half: the hanging pulls of images no Plugin names any more held
    /// their slots to the deadline. Now `retain` aborts them at once: a new image of the
    /// same namespace is asked for (its registry sees the request) while the deadline of
    /// the abandoned pulls is still far off, and their connections are closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn images_no_plugin_names_free_their_slots_at_once() {
        let Trickling {
            addr: slow,
            mut accepted,
            mut closed,
        } = trickling_registry(Duration::from_secs(1)).await;
        let (good, mut asked) = healthy_registry().await;
        let cache = tempfile::tempdir().unwrap();
        let (pulls, _wake) = pulls_of(vec![slow.clone(), good.clone()], cache.path());
        for i in 0..5 {
            let a = image("team-a", &format!("oci://{slow}/team-a/m{i}:v1"));
            let _ = pulls.get(&a, vec![slow.clone()]);
        }
        reaches(&mut accepted, MAX_CONCURRENT_PULLS, Duration::from_secs(60)).await;
        // The tenant deletes those Plugins and applies one naming another image.
        let fresh = image("team-a", &format!("oci://{good}/team-a/fresh:v1"));
        pulls.retain(&HashSet::from([fresh.clone()]));
        let _ = pulls.get(&fresh, vec![good.clone()]);
        reaches(&mut asked, 1, Duration::from_secs(60)).await;
        reaches(&mut closed, MAX_CONCURRENT_PULLS, Duration::from_secs(60)).await;
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

    fn fetched(fault: FetchError) -> PullError {
        PullError::Fetch {
            what: "pulling the manifest of oci://r/x:v1".into(),
            fault,
        }
    }

    fn status(status: u16, code: Option<&'static str>) -> FetchError {
        FetchError::Status {
            url: "u".into(),
            status,
            code,
        }
    }

    #[test]
    fn reasons_of_failed_pulls() {
        let down = pull_refusal(&fetched(status(503, None)));
        assert_eq!(down.reason, Reason::PullFailed);
        assert_eq!(
            down.message,
            "pulling the manifest of oci://r/x:v1: u: HTTP 503"
        );
        let missing = fetched(status(404, Some("MANIFEST_UNKNOWN")));
        assert_eq!(pull_refusal(&missing).reason, Reason::PullFailed);
        let forbidden = fetched(status(403, None));
        assert_eq!(pull_refusal(&forbidden).reason, Reason::ImageInvalid);
        let auth = fetched(FetchError::Auth {
            url: "u".into(),
            why: "the registry refused the credentials".into(),
        });
        assert_eq!(pull_refusal(&auth).reason, Reason::PullFailed);
        let refused = fetched(FetchError::Refused {
            url: "u".into(),
            what: "a redirect",
            why: crate::oci::access::HopRefused::NotHttp,
        });
        assert_eq!(pull_refusal(&refused).reason, Reason::ImageNotAllowed);
        let blob = fetched(FetchError::TooLarge {
            url: "u".into(),
            what: Body::Blob,
            limit: 1,
        });
        assert_eq!(pull_refusal(&blob).reason, Reason::ModuleTooLarge);
        let manifest = fetched(FetchError::TooLarge {
            url: "u".into(),
            what: Body::Manifest,
            limit: 1,
        });
        assert_eq!(pull_refusal(&manifest).reason, Reason::ImageInvalid);
        let mismatch = fetched(FetchError::Mismatch {
            url: "u".into(),
            why: "the blob's digest is sha256:00".into(),
        });
        assert_eq!(pull_refusal(&mismatch).reason, Reason::ImageInvalid);
        let big = PullError::TooLarge {
            image: "oci://r/x@sha256:00".into(),
            size: 9,
            limit_mib: 1,
        };
        assert_eq!(pull_refusal(&big).reason, Reason::ModuleTooLarge);
        let image = PullError::Layout {
            image: "oci://r/x@sha256:00".into(),
            fault: crate::oci::transfer::wasm_layer(br#"{"layers": []}"#).unwrap_err(),
        };
        assert_eq!(pull_refusal(&image).reason, Reason::ImageInvalid);
        let cache = PullError::Cache {
            what: "writing to",
            fault: std::io::Error::other("the module cache --max-module-mib"),
        };
        // The words do not decide: a cache failure naming the size flag is not a size.
        assert_eq!(pull_refusal(&cache).reason, Reason::PullFailed);
    }

    #[test]
    fn reasons_of_failed_resolutions_and_verifications() {
        let resolve = |fault| ResolveError {
            reference: "oci://r/x:v1".into(),
            fault,
        };
        let down = resolve_refusal(&resolve(status(502, None)));
        assert_eq!(down.reason, Reason::PullFailed);
        assert!(
            down.message.starts_with("resolving oci://r/x:v1: "),
            "{}",
            down.message
        );
        assert_eq!(
            resolve_refusal(&resolve(status(403, None))).reason,
            Reason::ImageInvalid
        );
        let unreadable = VerifyError::Registry {
            reference: "oci://r/x@sha256:00".into(),
            fault: Box::new(crate::oci::SignatureError::Fetch {
                what: "the signature manifest".into(),
                fault: status(503, None),
            }),
        };
        let refusal = verify_refusal(&unreadable, &["PluginPolicy p"]);
        assert_eq!(refusal.reason, Reason::PullFailed);
        assert!(
            refusal.message.ends_with(" (required by PluginPolicy p)"),
            "{}",
            refusal.message
        );
        // A rule of a named config names it: not named twice.
        let rule = VerifyError::Rule {
            config: "PluginPolicy p: ".into(),
            rule: "allOf[0] (key sha256:ab12)".into(),
            why: "no signature by this key".into(),
        };
        let refusal = verify_refusal(&rule, &["PluginPolicy p"]);
        assert_eq!(refusal.reason, Reason::VerificationFailed);
        assert_eq!(
            refusal.message,
            "PluginPolicy p: allOf[0] (key sha256:ab12): no signature by this key"
        );
        // A message that merely starts with a config's name is still completed.
        let unsigned = VerifyError::Unsigned {
            reference: "PluginPolicy p".into(),
            tag: "sha256-00.sig".into(),
        };
        let refusal = verify_refusal(&unsigned, &["PluginPolicy p"]);
        assert_eq!(refusal.reason, Reason::VerificationFailed);
        assert!(
            refusal.message.ends_with(" (required by PluginPolicy p)"),
            "{}",
            refusal.message
        );
    }
}
