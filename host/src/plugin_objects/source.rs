//! The API source of plugin instances: follows `Plugin` and `PluginPolicy` objects (and the
//! ConfigMaps their modules are in) once the API server serves the CRDs, and keeps the
//! controller's object-backed instances in step with them through the same planner as the
//! plugins directory. Each pass: parse the policies (a bad one keeps its last good spec in
//! force), resolve each Plugin (module, digest pin, compile, effective grant), plan, apply,
//! then write each object's status (and Events) from the one replica that owns it.

use super::compiles::{Compiles, MAX_CONCURRENT_COMPILES, Progress};
use super::events::{EventType, Regarding, record};
use super::forgery::Marks;
use super::grant::effective;
use super::image::ImagePulls;
use super::module::{COMPILE_BURST, CompileBudget, ConfigMapModule, ImageModule, ModuleRef, fetch};
use super::records::{Lookup, PluginRef, Record, RecordStore};
use super::refusal::{Reason, Refusal};
use super::service_account;
use super::shadow::{Comparison, Verdict};
use super::slots::{Slots, default_per_namespace, holds_slot};
use super::spec::{ClusterPolicySpec, GROUP, PluginObjectSpec, VERSION, parse_spec};
use super::status::{
    Observation, RunningRevision, differs_beyond_counts, plugin_status, policy_status,
};
use super::statuses::PluginStatuses;
use super::truth::{note_forgery, write_status};
use crate::cluster::{AccessReviewer, KindRegistry, KubeAccessReviewer, ObjKey};
use crate::controller::{Applied, Controller, InstanceName};
use crate::coordination::{Gate, Pass, Scope, WhileHeld, Withheld, count_withheld};
use crate::plugin::{CallError, LoadError, Plugin, PluginRuntime};
use crate::policy::{AuditRecord, AuditSink, Decision, Mode, Policy};
use crate::reload::applier::{Applier, Desired, Version};
use crate::reload::state::{PolicyContent, Target};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The default most Plugin objects one host runs.
pub const DEFAULT_MAX_PLUGINS: usize = 256;

/// How the API source behaves.
#[derive(Debug, Clone)]
pub struct PluginObjectsConfig {
    /// The largest module accepted, in bytes.
    pub max_module_bytes: usize,
    /// A pass at least this often (namespace labels, counts in status).
    pub resync: Duration,
    /// How often to look whether the CRDs are served, until they are.
    pub crd_poll: Duration,
    /// This replica's name, shown as the runner in status.
    pub identity: String,
    /// Counts alone are written to status at most this often.
    pub counts_every: Duration,
    /// The most Plugin objects this host runs; the oldest run, newer ones are refused
    /// (`TooManyPlugins`), so tenants together cannot exhaust the host. Plugins that cannot
    /// load hold no slot.
    pub max_plugins: usize,
    /// The most Plugin objects of one namespace this host runs (`None`: a quarter of
    /// `max_plugins`, see [`default_per_namespace`](super::default_per_namespace)), so one
    /// tenant's flood is refused for itself while another tenant's Plugin loads.
    pub max_plugins_per_namespace: Option<usize>,
    /// The most modules compiled at once, host-wide (each namespace one at a time, the
    /// namespaces served in turn).
    pub max_compiles: usize,
    /// The registry client for `spec.module.image` (None: images are refused).
    pub registries: Option<crate::oci::Registries>,
    /// How often a tag is resolved again.
    pub image_poll: Duration,
    /// The signatures every image must carry (`--verification-config`).
    pub verification: Option<crate::oci::verification::VerificationConfig>,
    /// How long an answer about a ServiceAccount's rights is believed.
    pub access_ttl: Duration,
    /// The host's own namespace (`--host-namespace`), where it keeps each Plugin's status
    /// record; tenants must have no rights there.
    pub host_namespace: String,
}

impl Default for PluginObjectsConfig {
    fn default() -> Self {
        PluginObjectsConfig {
            max_module_bytes: super::module::DEFAULT_MAX_MODULE_BYTES,
            resync: Duration::from_secs(30),
            crd_poll: Duration::from_secs(10),
            identity: "kubeplug".into(),
            counts_every: Duration::from_secs(30),
            max_plugins: DEFAULT_MAX_PLUGINS,
            max_plugins_per_namespace: None,
            max_compiles: MAX_CONCURRENT_COMPILES,
            registries: None,
            image_poll: super::image::DEFAULT_POLL,
            verification: None,
            access_ttl: crate::cluster::access_review::DEFAULT_TTL,
            host_namespace: "default".into(),
        }
    }
}

/// The `Plugin` kind's API resource.
pub fn plugin_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, "Plugin"), "plugins")
}

/// The `PluginPolicy` kind's API resource.
pub fn policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "PluginPolicy"),
        "pluginpolicies",
    )
}

/// Where an object-backed instance comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectOrigin {
    /// The Plugin's uid: a Plugin deleted and created again under its name is a new one.
    uid: String,
}

/// What one Plugin resolved to in a pass: a revision to run, or why not.
struct Resolved {
    plugin: Arc<Plugin>,
    /// The image it came from, pinned to the manifest's digest.
    image: Option<String>,
    /// The request it was granted from, and the Plugin's generation then.
    spec: PluginObjectSpec,
    generation: i64,
    policy: Policy,
    grant_digest: String,
    grant_summary: String,
    policies: Vec<String>,
    origin: ObjectOrigin,
}

/// One Plugin in a pass: its instance name, what its current spec resolved to, and the
/// previous revision re-granted when the current spec cannot run.
struct Entry {
    obj: Arc<DynamicObject>,
    instance: Result<InstanceName, Refusal>,
    outcome: Result<Resolved, Refusal>,
    fallback: Option<Resolved>,
    /// Why the current spec's revision, which resolved, does not run live yet (a rollout
    /// in shadow, or held), and the rollout's report.
    held: Option<Refusal>,
    rollout: Option<Value>,
}

impl Entry {
    /// The revision to run live: the current spec's, or the previous one's.
    fn runs(&self) -> Option<&Resolved> {
        match self.held {
            Some(_) => self.fallback.as_ref(),
            None => self.outcome.as_ref().ok().or(self.fallback.as_ref()),
        }
    }
}

/// A candidate revision running in shadow beside a Plugin's live one.
struct ShadowRun {
    /// Module digest and grant digest of the candidate.
    candidate: (String, String),
    started: Instant,
}

/// The last revision that started, kept to re-grant it while a newer spec cannot run.
struct Good {
    origin: ObjectOrigin,
    spec: PluginObjectSpec,
    plugin: Arc<Plugin>,
    image: Option<String>,
    generation: i64,
}

/// The shadow instance of Plugin instance `name`: its candidate revision `new`, in dry-run
/// (its actions audited, never sent); starting it queues the live instance's keys again, so
/// both decide on the same keys.
fn shadow_of(
    name: &InstanceName,
    new: &Resolved,
    candidate: &(String, String),
) -> Desired<ObjectOrigin> {
    let mut policy = new.policy.clone();
    policy.mode = Mode::DryRun;
    Desired {
        name: name.shadow(),
        origin: new.origin.clone(),
        version: Some(Version {
            target: Target {
                plugin: candidate.0.clone(),
                policy: PolicyContent::Granted(candidate.1.clone()),
            },
            plugin: new.plugin.clone(),
            policy: Box::new(move || Ok(policy)),
            requeue_on_start: Some(name.clone()),
        }),
    }
}

/// The previous revision `good` under the policies that apply now (a policy that no longer
/// grants its request stops it), as its ServiceAccount (whose rights it must still have).
async fn regrant(
    inner: &Inner,
    good: &Good,
    ns: &str,
    instance: &InstanceName,
    applying: &[(&str, &ClusterPolicySpec)],
) -> Result<Resolved, Refusal> {
    let granted = effective(ns, instance.as_str(), &good.spec, applying)?;
    let source = format!("plugins.{GROUP}/{instance}");
    let policy = Policy::from_document(&granted.document, instance.as_str(), Path::new(&source))
        .map_err(|e| Refusal::new(Reason::InvalidSpec, format!("spec.permissions: {e}")))?;
    let (policy, grant_digest) = as_service_account(
        inner,
        ns,
        &good.spec,
        applying,
        &good.plugin,
        policy,
        &granted,
    )
    .await?;
    Ok(Resolved {
        plugin: good.plugin.clone(),
        image: good.image.clone(),
        spec: good.spec.clone(),
        generation: good.generation,
        policy,
        grant_digest,
        grant_summary: granted.summary,
        policies: granted.policies,
        origin: good.origin.clone(),
    })
}

/// `policy` bound to the Plugin's ServiceAccount: refused unless the account may read every
/// kind the plugin would be handed, in every namespace of the grant; its writes then go
/// out impersonating the account. The grant digest names the account, so a new account is
/// a new revision.
async fn as_service_account(
    inner: &Inner,
    ns: &str,
    spec: &PluginObjectSpec,
    applying: &[(&str, &ClusterPolicySpec)],
    plugin: &Plugin,
    mut policy: Policy,
    granted: &super::grant::Effective,
) -> Result<(Policy, String), Refusal> {
    let principal = service_account::principal_of(ns, spec, applying)?;
    let meta = plugin.metadata();
    let readable = policy.grants.readable(&meta.reconciles, &meta.owns);
    service_account::secrets_need_a_policy(&readable, applying)?;
    service_account::may_read(
        inner.reviewer.as_ref(),
        &inner.kinds,
        &principal,
        &readable,
        &granted.document.spec.namespaces.names,
    )
    .await?;
    let digest = format!("{}/{}", granted.digest, principal.name());
    policy.principal = Some(principal);
    Ok((policy, digest))
}

/// What the Plugins of a pass name: ConfigMaps (their changes wake a pass) and images
/// (followed while named).
#[derive(Default)]
struct Referenced {
    config_maps: HashSet<(String, String)>,
    images: HashSet<ImageModule>,
}

/// The compiled module of `digest`, or why it did not compile, or where its compile is.
fn compiled(state: &mut State, compiles: &Compiles, digest: &str) -> Result<Arc<Plugin>, Refusal> {
    if !state.compiled.contains_key(digest) {
        take_compiled(state, compiles);
    }
    if let Some(done) = state.compiled.get(digest) {
        return done.clone();
    }
    Err(match compiles.progress(digest) {
        Some(Progress::Compiling) => {
            Refusal::new(Reason::Compiling, "the module is being compiled")
        }
        Some(Progress::Queued { ahead }) => Refusal::new(
            Reason::Compiling,
            format!(
                "the module waits for its namespace's turn to compile ({ahead} of the namespace's modules before it); namespaces take turns"
            ),
        ),
        None => Refusal::new(Reason::CompileFailed, "the module was not compiled"),
    })
}

/// Moves the compiles finished in the background into `state`. A load that failed for a
/// transient OS reason (its retries spent) is not kept: the module compiles again later.
fn take_compiled(state: &mut State, compiles: &Compiles) {
    for (digest, loaded) in compiles.take_done() {
        if let Err(err) = &loaded
            && load_is_transient(err)
        {
            tracing::warn!(digest = %digest, "a Plugin module failed to load for a transient reason; it loads again at a later pass: {err}");
            continue;
        }
        state.compiled.insert(digest, loaded.map_err(load_refusal));
    }
}

/// Whether a load failed only because instantiating it kept failing for a transient OS
/// reason (the runtime retried it already).
fn load_is_transient(err: &LoadError) -> bool {
    matches!(
        err,
        LoadError::Metadata {
            source: CallError::Instantiate { .. },
            ..
        }
    )
}

/// A module as last fetched: its ConfigMap's resourceVersion then, and the digest (or why
/// it could not be used).
type Fetched = (Option<String>, Result<String, Refusal>);

#[derive(Default)]
struct State {
    /// What runs from the Plugin objects (live and shadow revisions), and which starts
    /// failed.
    applier: Applier<ObjectOrigin>,
    /// The generation and grant each running instance was started from.
    running_info: HashMap<String, RunningRevision>,
    last_good: HashMap<String, Good>,
    /// Candidates in shadow, by the live instance's name.
    shadows: HashMap<String, ShadowRun>,
    /// The last rollout's report per instance (promoted or held), kept for status.
    rollouts: HashMap<String, Value>,
    compiled: HashMap<String, Result<Arc<Plugin>, Refusal>>,
    fetched: HashMap<(ConfigMapModule, Option<String>), Fetched>,
    good_policies: HashMap<String, ClusterPolicySpec>,
    /// Events already recorded, by instance: (reason, generation).
    evented: HashSet<(String, String, i64)>,
    /// Compiles each namespace may start now.
    compiles: CompileBudget,
    /// When each Plugin's status was last written with new counts.
    counts_written: HashMap<String, Instant>,
    /// What each Plugin's status was when last written over, and forgeries noted.
    marks: Marks,
}

#[derive(Default)]
struct Denials {
    count: u64,
    /// First denial of each grant kind not yet reported as an Event.
    unreported: Vec<(String, String)>,
    reported: HashSet<String>,
}

struct Inner {
    client: kube::Client,
    /// Asks the API server what a Plugin's ServiceAccount may do (answers cached briefly).
    reviewer: Arc<dyn AccessReviewer>,
    /// Resolves the kinds a Plugin reads to the resources its account is asked about.
    kinds: KindRegistry,
    controller: Controller,
    gate: Gate,
    config: PluginObjectsConfig,
    wake: Arc<Notify>,
    /// The images Plugins name, pulled in the background.
    images: Option<Arc<ImagePulls>>,
    /// Modules compiled in the background, namespaces in turn.
    compiles: Arc<Compiles>,
    state: tokio::sync::Mutex<State>,
    stores: OnceLock<(Store<DynamicObject>, Store<DynamicObject>)>,
    /// ConfigMap resourceVersions as the watch saw them.
    config_maps: Mutex<HashMap<(String, String), String>>,
    /// ConfigMaps some Plugin's module is in: a change to one wakes a pass.
    referenced: Mutex<HashSet<(String, String)>>,
    denials: Mutex<HashMap<String, Denials>>,
    /// Where calls' decisions are announced (shadow comparisons listen).
    audit: AuditSink,
    /// The comparisons of candidates in shadow, by the live instance's name.
    comparisons: Mutex<HashMap<String, Comparison>>,
    /// The statuses computed in the last pass, for the dashboard.
    statuses: PluginStatuses,
    /// What the host recorded of each Plugin's status (in its own namespace).
    records: RecordStore,
}

/// The plugins of the cluster's Plugin objects (the API source of plugins, beside the
/// plugins directory; not to be confused with [`crate::contract::ObjectSource`], what a
/// plugin reads); clones share it.
#[derive(Clone)]
pub struct PluginObjects {
    inner: Arc<Inner>,
}

/// The source's background tasks; dropping it stops them.
pub struct PluginObjectsTask {
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Drop for PluginObjectsTask {
    fn drop(&mut self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PluginObjects {
    /// A source driving `controller`'s object-backed instances; `gate` says which objects'
    /// status this replica writes.
    pub fn new(
        client: kube::Client,
        runtime: Arc<PluginRuntime>,
        controller: Controller,
        gate: Gate,
        audit: AuditSink,
        config: PluginObjectsConfig,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        let records = RecordStore::new(client.clone(), &config.host_namespace);
        let images = config
            .registries
            .clone()
            .map(|r| ImagePulls::new(r, client.clone(), config.image_poll, wake.clone()));
        let compiles = Compiles::new(runtime.clone(), wake.clone(), config.max_compiles);
        PluginObjects {
            inner: Arc::new(Inner {
                reviewer: Arc::new(KubeAccessReviewer::new(client.clone(), config.access_ttl)),
                kinds: KindRegistry::new(client.clone()),
                client,
                compiles,
                controller,
                gate,
                config,
                wake,
                images,
                state: tokio::sync::Mutex::default(),
                stores: OnceLock::new(),
                config_maps: Mutex::default(),
                referenced: Mutex::default(),
                denials: Mutex::default(),
                audit,
                comparisons: Mutex::default(),
                statuses: PluginStatuses::default(),
                records,
            }),
        }
    }

    /// The statuses it computes (every replica computes them; one writes them).
    pub fn statuses(&self) -> PluginStatuses {
        self.inner.statuses.clone()
    }

    /// Starts following: waits until the CRDs are served, then watches and applies.
    pub fn start(&self) -> PluginObjectsTask {
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let me = self.clone();
        let inner_tasks = tasks.clone();
        let main = tokio::spawn(async move { me.run(inner_tasks).await });
        lock(&tasks).push(main);
        PluginObjectsTask { tasks }
    }

    async fn run(self, tasks: Arc<Mutex<Vec<JoinHandle<()>>>>) {
        let inner = &*self.inner;
        let mut said = false;
        while !served(&inner.client).await {
            if !said {
                tracing::debug!(
                    "Plugin and PluginPolicy are not served (no CRDs): looking again every {:?}",
                    inner.config.crd_poll
                );
                said = true;
            }
            tokio::time::sleep(inner.config.crd_poll).await;
        }
        tracing::info!("following Plugin and PluginPolicy objects");
        let plugins = self.reflect(plugin_resource(), &tasks);
        let policies = self.reflect(policy_resource(), &tasks);
        let _ = inner.stores.set((plugins.clone(), policies.clone()));
        lock(&tasks).extend(inner.records.start());
        lock(&tasks).push(tokio::spawn(self.clone().follow_config_maps()));
        lock(&tasks).push(tokio::spawn(self.clone().follow_audit()));
        lock(&tasks).push(tokio::spawn(self.clone().follow_calls()));
        if plugins.wait_until_ready().await.is_err() || policies.wait_until_ready().await.is_err() {
            return;
        }
        loop {
            self.pass().await;
            tokio::select! {
                _ = inner.wake.notified() => {}
                _ = tokio::time::sleep(inner.config.resync) => {}
            }
            // Let a burst of changes land before the next pass.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A reflector of `resource` cluster-wide that wakes a pass on every change.
    fn reflect(
        &self,
        resource: ApiResource,
        tasks: &Arc<Mutex<Vec<JoinHandle<()>>>>,
    ) -> Store<DynamicObject> {
        let api: Api<DynamicObject> = Api::all_with(self.inner.client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource);
        let store = writer.as_reader();
        let stream = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let me = self.clone();
        lock(tasks).push(tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Init | Event::InitApply(_)) => {}
                    Ok(_) => me.inner.wake.notify_one(),
                    Err(err) => tracing::warn!("watch of Plugin objects failed, retrying: {err}"),
                }
            }
        }));
        store
    }

    /// Follows ConfigMap versions (not their content): a change to one a Plugin uses wakes
    /// a pass, which fetches it again.
    async fn follow_config_maps(self) {
        let api: Api<ConfigMap> = Api::all(self.inner.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let key = |cm: &ConfigMap| (cm.namespace().unwrap_or_default(), cm.name_any());
            let changed = match event {
                Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                    let k = key(&cm);
                    let rv = cm.resource_version().unwrap_or_default();
                    lock(&self.inner.config_maps).insert(k.clone(), rv);
                    Some(k)
                }
                Ok(Event::Delete(cm)) => {
                    let k = key(&cm);
                    lock(&self.inner.config_maps).remove(&k);
                    Some(k)
                }
                Ok(Event::Init) => {
                    lock(&self.inner.config_maps).clear();
                    None
                }
                Ok(Event::InitDone) => {
                    self.inner.wake.notify_one();
                    None
                }
                Err(err) => {
                    tracing::warn!("watch of ConfigMaps failed, retrying: {err}");
                    None
                }
            };
            if changed.is_some_and(|k| lock(&self.inner.referenced).contains(&k)) {
                self.inner.wake.notify_one();
            }
        }
    }

    /// Counts denied actions of object-backed instances and keeps the first of each grant
    /// kind to report as an Event.
    async fn follow_audit(self) {
        let mut audit = self.inner.controller.audit();
        loop {
            let record: Arc<AuditRecord> = match audit.recv().await {
                Ok(r) => r,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => return,
            };
            if !record.plugin.name.contains('/') {
                continue;
            }
            if let Decision::Denied(denial) = &record.decision {
                let mut all = lock(&self.inner.denials);
                let d = all.entry(record.plugin.name.clone()).or_default();
                d.count += 1;
                let grant = denial.grant.as_str().to_string();
                if !d.reported.contains(&grant) && !d.unreported.iter().any(|(g, _)| *g == grant) {
                    let what = format!(
                        "{} {} denied ({grant}): {}",
                        record.action, record.target, denial.reason
                    );
                    d.unreported.push((grant, what));
                    self.inner.wake.notify_one();
                }
            }
        }
    }

    /// Feeds the shadow comparisons with what the live and candidate revisions decide.
    async fn follow_calls(self) {
        let mut calls = self.inner.audit.calls();
        loop {
            let call = match calls.recv().await {
                Ok(c) => c,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        missed = n,
                        "shadow comparison fell behind: {n} decisions not compared"
                    );
                    continue;
                }
                Err(_) => return,
            };
            let name = call.plugin.name.as_str();
            let mut all = lock(&self.inner.comparisons);
            let (live, is_shadow) = crate::worker::live_of(name);
            let Some(cmp) = all.get_mut(live) else {
                continue;
            };
            let before = cmp.compared();
            match is_shadow {
                true => cmp.shadow(&call.key, call.decided.clone()),
                false => cmp.live(&call.key, call.decided.clone()),
            }
            if cmp.compared() != before {
                self.inner.wake.notify_one();
            }
        }
    }

    /// Shadow rollouts: a Plugin whose live revision runs and whose new revision resolved
    /// differently, with `spec.rollout.shadow`, runs the new one in dry-run beside the live
    /// one until the comparison says promote (the planner then swaps) or hold. Returns the
    /// shadow instances wanted, for the applier to run.
    async fn roll_out(
        &self,
        state: &mut State,
        entries: &mut [Entry],
        in_force: &[(String, ClusterPolicySpec)],
        labels: &mut HashMap<String, BTreeMap<String, String>>,
    ) -> Vec<Desired<ObjectOrigin>> {
        let inner = &*self.inner;
        let mut wanted: HashSet<String> = HashSet::new();
        let mut shadows = Vec::new();
        for entry in entries.iter_mut() {
            let (Ok(name), Ok(new)) = (&entry.instance, &entry.outcome) else {
                continue;
            };
            let Some(rollout) = new.spec.rollout.clone().filter(|r| r.shadow.is_some()) else {
                continue;
            };
            let candidate = (new.plugin.digest().to_string(), new.grant_digest.clone());
            let live_target = state
                .applier
                .running()
                .get(name.as_str())
                .map(|r| r.target.clone());
            let Some(good) = state
                .last_good
                .get(name.as_str())
                .filter(|g| g.origin == new.origin)
            else {
                continue;
            };
            let Some(live_target) = live_target else {
                continue;
            };
            if live_target.plugin == candidate.0
                && live_target.policy == PolicyContent::Granted(candidate.1.clone())
            {
                continue;
            }
            let ns = entry.obj.namespace().unwrap_or_default();
            let applying = self.applying(&ns, in_force, labels).await;
            let live = match regrant(&self.inner, good, &ns, name, &applying).await {
                Ok(live) => live,
                // The live revision's grant no longer holds: nothing to compare with.
                Err(_) => continue,
            };
            let fresh = state
                .shadows
                .get(name.as_str())
                .is_none_or(|s| s.candidate != candidate);
            if fresh {
                lock(&inner.comparisons).insert(name.to_string(), Comparison::default());
                state.shadows.insert(
                    name.to_string(),
                    ShadowRun {
                        candidate: candidate.clone(),
                        started: Instant::now(),
                    },
                );
                tracing::info!(record = "reload", result = "shadowing", plugin = %name, candidate = %candidate.0, "a new revision runs in shadow beside the live one");
            }
            let started = state.shadows[name.as_str()].started;
            let cmp = lock(&inner.comparisons)
                .get(name.as_str())
                .cloned()
                .unwrap_or_default();
            let generation = entry.obj.metadata.generation.unwrap_or(0);
            match cmp.verdict(&rollout, started.elapsed()) {
                Verdict::Promote(why) => {
                    let report = cmp.report("Promoted", &candidate.0, generation, &why);
                    tracing::info!(record = "reload", result = "promoted", plugin = %name, compared = cmp.compared(), differing = cmp.differing(), "shadow revision promoted: {why}");
                    state.rollouts.insert(name.to_string(), report);
                    // Not wanted any more: its shadow stops below; the planner swaps.
                }
                Verdict::Continue => {
                    wanted.insert(name.to_string());
                    shadows.push(shadow_of(name, new, &candidate));
                    let message = format!(
                        "generation {generation} runs in shadow beside the live revision: {} keys compared, {} differing",
                        cmp.compared(),
                        cmp.differing()
                    );
                    entry.rollout =
                        Some(cmp.report("Shadowing", &candidate.0, generation, &message));
                    entry.held = Some(Refusal::new(Reason::Shadowing, message));
                    entry.fallback = Some(live);
                }
                Verdict::Hold(why) => {
                    wanted.insert(name.to_string());
                    shadows.push(shadow_of(name, new, &candidate));
                    let report = cmp.report("Held", &candidate.0, generation, &why);
                    if state
                        .rollouts
                        .get(name.as_str())
                        .is_none_or(|r| r["phase"] != "Held")
                    {
                        tracing::warn!(record = "reload", result = "held", plugin = %name, compared = cmp.compared(), differing = cmp.differing(), "shadow revision held: {why}");
                    }
                    state.rollouts.insert(name.to_string(), report.clone());
                    entry.rollout = Some(report);
                    entry.held = Some(Refusal::new(Reason::RolloutHeld, why));
                    entry.fallback = Some(live);
                }
            }
        }
        let stale: Vec<String> = state
            .shadows
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        // The applier stops their instances: they are not in the desired set.
        for name in stale {
            state.shadows.remove(&name);
            lock(&inner.comparisons).remove(&name);
        }
        for entry in entries.iter_mut() {
            if let (None, Ok(name)) = (&entry.rollout, &entry.instance) {
                entry.rollout = state.rollouts.get(name.as_str()).cloned();
            }
        }
        shadows
    }

    /// One pass over every Plugin and PluginPolicy.
    pub async fn pass(&self) {
        let inner = &*self.inner;
        let Some((plugins, policies)) = inner.stores.get() else {
            return;
        };
        let mut plugins = plugins.state();
        // Oldest first: when there are more than the host runs, the newest wait.
        plugins.sort_by(|a, b| {
            let at = |o: &DynamicObject| o.metadata.creation_timestamp.clone().map(|t| t.0);
            (at(a), a.namespace(), a.name_any()).cmp(&(at(b), b.namespace(), b.name_any()))
        });
        let policy_objects = policies.state();
        let mut state = inner.state.lock().await;

        // Policies: a spec that does not parse keeps the last good one in force.
        let mut policy_errors: BTreeMap<String, String> = BTreeMap::new();
        let mut in_force: Vec<(String, ClusterPolicySpec)> = Vec::new();
        for p in &policy_objects {
            let name = p.name_any();
            match parse_spec::<ClusterPolicySpec>(&p.data).and_then(|s| s.validate().map(|()| s)) {
                Ok(spec) => {
                    state.good_policies.insert(name.clone(), spec.clone());
                    in_force.push((name, spec));
                }
                Err(err) => {
                    if let Some(good) = state.good_policies.get(&name) {
                        in_force.push((name.clone(), good.clone()));
                    }
                    policy_errors.insert(name, err);
                }
            }
        }
        let names: HashSet<String> = policy_objects.iter().map(|p| p.name_any()).collect();
        state.good_policies.retain(|n, _| names.contains(n));
        let mut labels: HashMap<String, BTreeMap<String, String>> = HashMap::new();

        // Plugins: resolve each to a revision to run, or a refusal; a refused one whose
        // previous revision runs keeps it, re-granted under the policies as they are now.
        let mut entries: Vec<Entry> = Vec::new();
        let mut referenced = Referenced::default();
        take_compiled(&mut state, &inner.compiles);
        let max = inner.config.max_plugins;
        let per_namespace = inner
            .config
            .max_plugins_per_namespace
            .unwrap_or_else(|| default_per_namespace(max));
        let mut slots = Slots::new(max, per_namespace);
        for obj in plugins.iter() {
            let ns = obj.namespace().unwrap_or_default();
            let name = obj.name_any();
            let instance = InstanceName::object(&ns, &name)
                .map_err(|e| Refusal::new(Reason::InvalidName, e.to_string()))
                .and_then(|n| slots.admit(&ns, plugins.len()).map(|()| n));
            let (outcome, fallback) = match &instance {
                Ok(instance) => {
                    let applying = self.applying(&ns, &in_force, &mut labels).await;
                    let outcome = self
                        .resolve(&mut state, obj, instance, &applying, &mut referenced)
                        .await;
                    let uid = obj.metadata.uid.clone().unwrap_or_default();
                    let fallback = match (&outcome, state.last_good.get(instance.as_str())) {
                        (Err(_), Some(good)) if good.origin.uid == uid => {
                            regrant(inner, good, &ns, instance, &applying)
                                .await
                                .inspect_err(|r| tracing::warn!(plugin = %instance, "the running revision's grant no longer holds, stopping it: {}", r.message))
                                .ok()
                        }
                        _ => None,
                    };
                    (outcome, fallback)
                }
                Err(r) => (Err(r.clone()), None),
            };
            if instance.is_ok() {
                let reason = outcome.as_ref().err().map(|r| r.reason);
                slots.settle(&ns, holds_slot(reason, fallback.is_some()));
            }
            entries.push(Entry {
                obj: obj.clone(),
                instance,
                outcome,
                fallback,
                held: None,
                rollout: None,
            });
        }
        *lock(&inner.referenced) = referenced.config_maps;
        if let Some(images) = &inner.images {
            images.retain(&referenced.images);
        }
        let mut desired = self
            .roll_out(&mut state, &mut entries, &in_force, &mut labels)
            .await;

        // What runs live: each Plugin's revision to run (the current spec's, or the previous
        // one's while the current cannot run or is in shadow); the applier starts, swaps and
        // stops instances to match, as it does for the plugins directory.
        for e in &entries {
            let (Ok(name), Some(r)) = (&e.instance, e.runs()) else {
                continue;
            };
            let policy = r.policy.clone();
            desired.push(Desired {
                name: name.clone(),
                origin: r.origin.clone(),
                version: Some(Version {
                    target: Target {
                        plugin: r.plugin.digest().to_string(),
                        policy: PolicyContent::Granted(r.grant_digest.clone()),
                    },
                    plugin: r.plugin.clone(),
                    policy: Box::new(move || Ok(policy)),
                    requeue_on_start: None,
                }),
            });
        }
        let keep: HashSet<String> = desired.iter().map(|d| d.name.to_string()).collect();
        let changes = state.applier.apply(&inner.controller, desired, false).await;
        for (name, applied) in changes.started {
            let result = match applied {
                Applied::Started => "started",
                Applied::Updated => "updated",
                Applied::Restarted => "restarted",
            };
            let Some(r) = entries
                .iter()
                .find(|e| e.instance.as_ref().is_ok_and(|n| n.as_str() == name))
                .and_then(Entry::runs)
            else {
                tracing::info!(record = "reload", result, plugin = %name, "shadow revision runs");
                continue;
            };
            tracing::info!(record = "reload", result, plugin = %name, digest = %r.plugin.digest(), "Plugin object runs");
            let m = r.plugin.metadata();
            state.running_info.insert(
                name.clone(),
                RunningRevision {
                    digest: r.plugin.digest().to_string(),
                    image: r.image.clone(),
                    generation: r.generation,
                    declared: (
                        m.name.clone(),
                        m.version.clone(),
                        r.plugin.contract_version().to_string(),
                    ),
                    mode: r.policy.mode,
                    grant: r.grant_summary.clone(),
                    policies: r.policies.clone(),
                },
            );
            state.last_good.insert(
                name,
                Good {
                    origin: r.origin.clone(),
                    spec: r.spec.clone(),
                    plugin: r.plugin.clone(),
                    image: r.image.clone(),
                    generation: r.generation,
                },
            );
        }
        for (name, error) in changes.failed {
            tracing::warn!(record = "reload", result = "failed", plugin = %name, "Plugin object not started: {error}");
        }
        for name in changes.removed {
            state.running_info.remove(&name);
            state.last_good.remove(&name);
            state.rollouts.remove(&name);
            tracing::info!(record = "reload", result = "removed", plugin = %name, "Plugin object stopped");
        }
        lock(&inner.denials)
            .retain(|n, _| keep.contains(n) || state.applier.running().contains_key(n));
        self.prune(&mut state);

        // Status and Events, from the replica that owns each object.
        let mut computed = HashMap::new();
        for entry in &entries {
            let (key, status) = self.report(&mut state, entry).await;
            computed.insert(key, status);
        }
        inner.statuses.replace(computed);
        // What is remembered per Plugin stays bounded by the Plugins that exist now: Events
        // sent for their current generation only, count timestamps for existing ones.
        let current: HashMap<String, i64> = entries
            .iter()
            .map(|e| {
                let (ns, name) = (e.obj.namespace().unwrap_or_default(), e.obj.name_any());
                (
                    format!("{ns}/{name}"),
                    e.obj.metadata.generation.unwrap_or(0),
                )
            })
            .collect();
        state
            .evented
            .retain(|(key, _, generation)| current.get(key) == Some(generation));
        state
            .counts_written
            .retain(|key, _| current.contains_key(key));
        state
            .marks
            .retain(&current.keys().cloned().collect::<HashSet<_>>());
        // The records of Plugins that are gone, by the replica that answers for each.
        let existing: HashSet<String> = plugins
            .iter()
            .map(|o| {
                PluginRef {
                    namespace: o.namespace().unwrap_or_default(),
                    name: o.name_any(),
                    uid: o.metadata.uid.clone().unwrap_or_default(),
                }
                .record_name()
            })
            .collect();
        inner
            .records
            .collect(&existing, |owner| {
                inner.gate.enter(owner).is_some_and(|p| p.holds())
            })
            .await;
        for p in &policy_objects {
            let name = p.name_any();
            let applies = plugins
                .iter()
                .filter_map(|o| o.namespace())
                .collect::<HashSet<_>>();
            let applies = applies
                .iter()
                .filter(|ns| {
                    in_force
                        .iter()
                        .any(|(n, s)| *n == name && applies_to_names(s, ns, labels.get(*ns)))
                })
                .count();
            let status = policy_status(
                p.metadata.generation.unwrap_or(0),
                policy_errors.get(&name).map(String::as_str),
                applies,
                p.data.get("status"),
                &now(),
            );
            if differs_beyond_counts(&status, p.data.get("status")) {
                let resource = policy_resource();
                write_status(
                    &inner.client,
                    &resource,
                    None,
                    &name,
                    &status,
                    p.data.get("status"),
                )
                .await;
            }
        }
    }

    /// The policies in force that apply to `namespace`.
    async fn applying<'a>(
        &self,
        namespace: &str,
        in_force: &'a [(String, ClusterPolicySpec)],
        labels: &mut HashMap<String, BTreeMap<String, String>>,
    ) -> Vec<(&'a str, &'a ClusterPolicySpec)> {
        if in_force
            .iter()
            .any(|(_, p)| p.applies_to.selector.is_some())
            && !labels.contains_key(namespace)
        {
            let api: Api<Namespace> = Api::all(self.inner.client.clone());
            let found = match api.get_opt(namespace).await {
                Ok(ns) => ns.and_then(|n| n.metadata.labels).unwrap_or_default(),
                Err(err) => {
                    tracing::warn!(
                        namespace,
                        "cannot read the namespace's labels for PluginPolicy selectors: {err}"
                    );
                    BTreeMap::new()
                }
            };
            labels.insert(namespace.to_string(), found);
        }
        in_force
            .iter()
            .filter(|(_, p)| applies_to_names(p, namespace, labels.get(namespace)))
            .map(|(n, p)| (n.as_str(), p))
            .collect()
    }

    /// Resolves one Plugin: spec, module, compile, grant, policy.
    async fn resolve(
        &self,
        state: &mut State,
        obj: &DynamicObject,
        instance: &InstanceName,
        applying: &[(&str, &ClusterPolicySpec)],
        referenced: &mut Referenced,
    ) -> Result<Resolved, Refusal> {
        let inner = &*self.inner;
        let ns = obj.namespace().unwrap_or_default();
        let spec: PluginObjectSpec =
            parse_spec(&obj.data).map_err(|e| Refusal::new(Reason::InvalidSpec, e))?;
        if let Some(d) = spec
            .rollout
            .as_ref()
            .and_then(|r| r.shadow.as_ref())
            .and_then(|s| s.duration.as_deref())
        {
            super::spec::parse_duration(d).map_err(|e| {
                Refusal::new(
                    Reason::InvalidSpec,
                    format!("spec.rollout.shadow.duration: {e}"),
                )
            })?;
        }
        let pin = spec.module.sha256.clone();
        let (plugin, image) = match ModuleRef::of(&ns, &spec.module)? {
            ModuleRef::ConfigMap(at) => {
                referenced
                    .config_maps
                    .insert((at.namespace.clone(), at.config_map.clone()));
                let plugin = self.config_map_module(state, obj, &at, pin).await?;
                (plugin, None)
            }
            ModuleRef::Image(mut image) => {
                let allowed = applying.iter().any(|(_, p)| {
                    p.modules
                        .allows(&image.reference.registry, &image.reference.repository)
                });
                if !allowed {
                    return Err(Refusal::new(
                        Reason::ImageNotAllowed,
                        format!(
                            "no PluginPolicy applying to namespace {ns} lists {}/{} (or a registry or repository above it) in spec.modules.images",
                            image.reference.registry, image.reference.repository
                        ),
                    ));
                }
                let required = inner
                    .config
                    .verification
                    .iter()
                    .map(|v| ("--verification-config".to_string(), v))
                    .chain(applying.iter().filter_map(|(name, p)| {
                        p.modules
                            .verification
                            .as_ref()
                            .map(|v| (format!("PluginPolicy {name}"), v))
                    }));
                for (who, config) in required {
                    let json = serde_json::to_string(config).unwrap_or_default();
                    image.verify.push((who, json));
                }
                image.generation = obj.metadata.generation.unwrap_or(0);
                referenced.images.insert(image.clone());
                let Some(images) = &inner.images else {
                    return Err(Refusal::new(
                        Reason::ImageNotAllowed,
                        "this kubeplug was started without registry support for Plugin objects",
                    ));
                };
                let hosts = crate::oci::access::registry_hosts(
                    applying.iter().flat_map(|(_, p)| &p.modules.images),
                );
                let pulled = images.get(&image, hosts)?;
                if let Some(pin) = &pin
                    && !pin.eq_ignore_ascii_case(&pulled.module_digest)
                {
                    return Err(Refusal::new(
                        Reason::DigestMismatch,
                        format!(
                            "spec.module.sha256 pins {}; {} holds a module of sha256 {}",
                            crate::contract::text::prefix(pin, 64),
                            pulled.pinned,
                            pulled.module_digest
                        ),
                    ));
                }
                let digest = &pulled.module_digest;
                if !state.compiled.contains_key(digest) && !inner.compiles.knows(digest) {
                    self.take_compile(state, &ns)?;
                    let Some(bytes) = images.module(digest) else {
                        return Err(Refusal::new(
                            Reason::PullFailed,
                            format!("{} is not in the module cache any more", pulled.pinned),
                        ));
                    };
                    let origin =
                        format!("Plugin {ns}/{} (image {})", obj.name_any(), pulled.pinned);
                    inner.compiles.submit(&ns, digest, origin, bytes);
                }
                let plugin = compiled(state, &inner.compiles, digest)?;
                (plugin, Some(pulled.pinned.to_string()))
            }
        };
        let granted = effective(&ns, instance.as_str(), &spec, applying)?;
        let source = format!("plugins.{GROUP}/{ns}/{}", obj.name_any());
        let policy =
            Policy::from_document(&granted.document, instance.as_str(), Path::new(&source))
                .map_err(|e| Refusal::new(Reason::InvalidSpec, format!("spec.permissions: {e}")))?;
        let (policy, grant_digest) =
            as_service_account(inner, &ns, &spec, applying, &plugin, policy, &granted).await?;
        Ok(Resolved {
            plugin,
            image,
            spec,
            generation: obj.metadata.generation.unwrap_or(0),
            policy,
            grant_digest,
            grant_summary: granted.summary,
            policies: granted.policies,
            origin: ObjectOrigin {
                uid: obj.metadata.uid.clone().unwrap_or_default(),
            },
        })
    }

    /// A ConfigMap's module, compiled: fetched again only when the ConfigMap's
    /// resourceVersion changed (or the last fetch failed for a reason that may pass).
    async fn config_map_module(
        &self,
        state: &mut State,
        obj: &DynamicObject,
        at: &ConfigMapModule,
        pin: Option<String>,
    ) -> Result<Arc<Plugin>, Refusal> {
        let inner = &*self.inner;
        let ns = &at.namespace;
        let seen = lock(&inner.config_maps)
            .get(&(at.namespace.clone(), at.config_map.clone()))
            .cloned();
        let key = (at.clone(), pin.clone());
        let reuse = match state.fetched.get(&key) {
            Some((Some(rv), Ok(digest))) if seen.as_ref() == Some(rv) => {
                state.compiled.contains_key(digest) || inner.compiles.knows(digest)
            }
            Some((Some(rv), Err(r))) if seen.as_ref() == Some(rv) => !r.reason.is_transient(),
            _ => false,
        };
        if !reuse {
            let fetched = fetch(
                &inner.client,
                at,
                pin.as_deref(),
                inner.config.max_module_bytes,
            )
            .await;
            let digest = match fetched {
                Ok(module) => {
                    let digest = module.digest.clone();
                    if !state.compiled.contains_key(&digest) && !inner.compiles.knows(&digest) {
                        self.take_compile(state, ns)?;
                        let origin = format!(
                            "Plugin {ns}/{} (ConfigMap {}, key {})",
                            obj.name_any(),
                            at.config_map,
                            at.key
                        );
                        inner.compiles.submit(ns, &digest, origin, module.bytes);
                    }
                    Ok(digest)
                }
                Err(r) => Err(r),
            };
            state.fetched.insert(key.clone(), (seen, digest));
        }
        let digest = state.fetched[&key].1.clone()?;
        compiled(state, &inner.compiles, &digest)
    }

    /// Compiling costs the host CPU: a namespace gets a few at once, then one per
    /// interval, however often its modules change.
    fn take_compile(&self, state: &mut State, ns: &str) -> Result<(), Refusal> {
        state.compiles.take(ns, Instant::now()).map_err(|wait| {
            Refusal::new(
                Reason::CompileThrottled,
                format!(
                    "namespace {ns} compiled {COMPILE_BURST} modules lately; this one compiles in {}s",
                    wait.as_secs().max(1)
                ),
            )
        })
    }

    /// Drops fetched and compiled modules nothing runs or asks for.
    fn prune(&self, state: &mut State) {
        let used: HashSet<String> = state
            .applier
            .running()
            .values()
            .map(|r| r.target.plugin.clone())
            .chain(
                state
                    .fetched
                    .values()
                    .filter_map(|(_, d)| d.as_ref().ok().cloned()),
            )
            .chain(self.inner.images.iter().flat_map(|i| i.digests()))
            .collect();
        let referenced = lock(&self.inner.referenced).clone();
        state.fetched.retain(|(at, _), _| {
            referenced.contains(&(at.namespace.clone(), at.config_map.clone()))
        });
        state.compiled.retain(|d, _| used.contains(d));
        self.inner.compiles.retain(|d| used.contains(d));
    }

    /// Writes one Plugin's status (and its Events) if this replica owns it and it changed.
    async fn report(&self, state: &mut State, entry: &Entry) -> (String, Value) {
        let obj = &entry.obj;
        let instance = entry.instance.as_ref().ok();
        let refusal = entry.outcome.as_ref().err().or(entry.held.as_ref());
        let inner = &*self.inner;
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let generation = obj.metadata.generation.unwrap_or(0);
        let key = instance
            .map(|i| i.to_string())
            .unwrap_or_else(|| format!("{ns}/{name}"));
        let mut refusal = refusal.cloned();
        if let (None, Some(f)) = (&refusal, state.applier.failed().get(&key)) {
            refusal = Some(Refusal::new(Reason::StartRefused, f.error.clone()));
        }
        let running = state.running_info.get(&key).cloned();
        let counts = inner.controller.reconcile_counts(&key);
        let denied = lock(&inner.denials).get(&key).map_or(0, |d| d.count);
        let obs = Observation {
            generation,
            running: running.clone(),
            refusal: refusal.clone(),
            runner: self.runner(),
            counts: (counts.total, counts.errors, denied),
            rollout: entry.rollout.clone(),
        };
        // Carried forward from what the host recorded, never from the status read back.
        let read_back = obj.data.get("status");
        let plugin = PluginRef {
            namespace: ns.clone(),
            name: name.clone(),
            uid: obj.metadata.uid.clone().unwrap_or_default(),
        };
        let lookup = inner.records.lookup(&plugin);
        let recorded = match &lookup {
            Lookup::Found(r) => Some(&**r),
            _ => None,
        };
        let status = plugin_status(&obs, recorded.map(Record::view).as_ref(), &now());
        let Some(pass) = inner.gate.enter(&ObjKey::new(Some(&ns), &name)) else {
            inner.records.forget(&plugin);
            return (key, status);
        };
        if lookup == Lookup::Unavailable {
            // Written now, the status would lose what the records keep: wait for them.
            return (key, status);
        }
        let rv = obj.metadata.resource_version.as_deref();
        let forged = recorded
            .map(|r| state.marks.forged(&key, rv, read_back, &r.written))
            .unwrap_or_default();
        let counts_due = state
            .counts_written
            .get(&key)
            .is_none_or(|t| t.elapsed() >= inner.config.counts_every);
        let changed = differs_beyond_counts(&status, read_back);
        let counts_changed = read_back.and_then(|p| p.get("counts")) != status.get("counts");
        // Whether the object now shows this status (beyond counts).
        let mut shown = !changed;
        if (changed || (counts_changed && counts_due)) && pass.holds() {
            let resource = plugin_resource();
            let written = write_status(
                &inner.client,
                &resource,
                Some(&ns),
                &name,
                &status,
                read_back,
            );
            if while_held(&pass, &key, written).await == Some(true) {
                shown = true;
                state.marks.wrote_over(&key, rv, read_back);
            }
            state.counts_written.insert(key.clone(), Instant::now());
        }
        if shown && pass.holds() {
            let record = Record::of(&plugin, &status);
            if recorded != Some(&record)
                && let Some(Err(err)) = while_held(&pass, &key, inner.records.put(&record)).await
            {
                tracing::warn!(plugin = %key, "cannot record the Plugin's status: {err}");
            }
        }
        let regarding = Regarding {
            namespace: ns.clone(),
            name: name.clone(),
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
        };
        let reporter = inner.config.identity.clone();
        // An Event about the Plugin, sent only while this replica holds it.
        let event = async |type_: EventType, reason: &str, message: &str| {
            let sent = record(&inner.client, &regarding, type_, reason, message, &reporter);
            while_held(&pass, &key, sent).await;
        };
        if !forged.is_empty() && pass.holds() && state.marks.first_notice(&key, rv) {
            while_held(
                &pass,
                &key,
                note_forgery(&inner.client, &regarding, &forged, &reporter),
            )
            .await;
        }
        if let Some(r) = &refusal {
            let mark = (key.clone(), r.reason.as_str().to_string(), generation);
            if !state.evented.contains(&mark) && pass.holds() {
                let type_ = match r.reason.is_normal() {
                    true => EventType::Normal,
                    false => EventType::Warning,
                };
                event(type_, r.reason.as_str(), &r.message).await;
                state.evented.insert(mark);
            }
        }
        // Once per revision and grant, by the replica holding the Plugin when it first can
        // (a shard may own it only after the ring settles, passes after the start).
        if let Some(run) = &running {
            let mark = (
                key.clone(),
                format!("Loaded {} {}", run.digest, run.grant),
                generation,
            );
            if !state.evented.contains(&mark) && pass.holds() {
                let message = format!(
                    "revision {} ({} {}, contract {}) runs in {} mode",
                    &run.digest[..12.min(run.digest.len())],
                    run.declared.0,
                    run.declared.1,
                    run.declared.2,
                    if run.mode == Mode::Enforce {
                        "enforce"
                    } else {
                        "dry-run"
                    }
                );
                event(EventType::Normal, "Loaded", &message).await;
                state.evented.insert(mark);
            }
        }
        let unreported: Vec<(String, String)> = {
            let mut all = lock(&inner.denials);
            match all.get_mut(&key) {
                Some(d) => {
                    let taken = std::mem::take(&mut d.unreported);
                    d.reported.extend(taken.iter().map(|(g, _)| g.clone()));
                    taken
                }
                None => Vec::new(),
            }
        };
        for (_, what) in unreported {
            if pass.holds() {
                event(EventType::Warning, "ActionDenied", &what).await;
            }
        }
        (key, status)
    }

    /// Which replica runs the Plugins, as status shows it.
    fn runner(&self) -> String {
        let me = &self.inner.config.identity;
        match &*self.inner.gate.scope() {
            Scope::Everything => me.clone(),
            Scope::Leader { leading: true } => format!("{me} (leader)"),
            Scope::Leader { leading: false } => format!("{me} (follower)"),
            Scope::Shard(view) => {
                let n = view.current.as_ref().map_or(0, |r| r.members().len());
                format!("{n} shards; status by {me}")
            }
        }
    }
}

/// Whether policy `p` applies to `namespace` (with its labels, when known).
fn applies_to_names(
    p: &ClusterPolicySpec,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    p.applies_to.names.iter().any(|n| n == namespace)
        || p.applies_to.selector.as_ref().is_some_and(|s| {
            labels.is_some_and(|l| s.match_labels.iter().all(|(k, v)| l.get(k) == Some(v)))
        })
}

fn load_refusal(err: LoadError) -> Refusal {
    let reason = match &err {
        LoadError::ContractMismatch { .. }
        | LoadError::NotAPlugin { .. }
        | LoadError::Link { .. } => Reason::ContractUnsupported,
        _ => Reason::CompileFailed,
    };
    Refusal::new(reason, err.to_string())
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}

/// Whether the API server serves both kinds.
async fn served(client: &kube::Client) -> bool {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => {
            let has = |p: &str| list.resources.iter().any(|r| r.name == p);
            has("plugins") && has("pluginpolicies")
        }
        Err(_) => false,
    }
}

/// `write`, sent only while `pass` holds the Plugin's key (asked again on every poll, as an
/// action's write is), so a replica frozen and woken after its lease lapsed writes nothing
/// about a Plugin another replica now answers for. `None` when it was dropped.
async fn while_held<F: std::future::Future>(
    pass: &Pass,
    plugin: &str,
    write: F,
) -> Option<F::Output> {
    let hold = || pass.hold();
    match WhileHeld::new(write, &hold).await {
        Ok(out) => Some(out),
        Err(_) => {
            count_withheld(Withheld::Transport);
            tracing::warn!(
                plugin,
                "a Plugin's status, record or Event dropped: this replica stopped holding the Plugin before the request was answered"
            );
            None
        }
    }
}
