//! The API source of plugin instances: follows `Plugin` and `PluginPolicy` objects (and the
//! ConfigMaps their modules are in) once the API server serves the CRDs, and keeps the
//! controller's object-backed instances in step with them through the same planner as the
//! plugins directory. Each pass: parse the policies (a bad one keeps its last good spec in
//! force), resolve each Plugin (module, digest pin, compile, effective grant), plan, apply,
//! then write each object's status (and Events) from the one replica that owns it.

use super::compiles::Compiles;
use super::config::PluginObjectsConfig;
use super::echoes::Echoes;
use super::image::ImagePulls;
use super::pass_state::Denials;
use super::pass_state::{Entry, Good, State};
use super::policies::in_force;
use super::prefetch::prefetch;
use super::records::{PluginRef, RecordStore};
use super::refusal::{Reason, Refusal};
use super::resolve::{Referenced, regrant, take_compiled};
use super::shadow::Comparison;
use super::slots::{Slots, default_per_namespace, holds_slot};
use super::spec::{GROUP, VERSION};
use super::status::RunningRevision;
use super::statuses::PluginStatuses;
use super::time_slice::TimeSlice;
use crate::cluster::{AccessReviewer, KindRegistry, KubeAccessReviewer};
use crate::controller::{Applied, Controller, InstanceName};
use crate::coordination::{Gate, Pass, WhileHeld, Withheld, count_withheld};
use crate::plugin::{LoadError, PluginRuntime};
use crate::policy::AuditSink;
use crate::reload::applier::{Desired, Version};
use crate::reload::state::{PolicyContent, Target};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

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

pub(super) struct Inner {
    pub(super) client: kube::Client,
    /// Asks the API server what a Plugin's ServiceAccount may do (answers cached briefly).
    pub(super) reviewer: Arc<dyn AccessReviewer>,
    /// Resolves the kinds a Plugin reads to the resources its account is asked about.
    pub(super) kinds: KindRegistry,
    pub(super) controller: Controller,
    pub(super) gate: Gate,
    pub(super) config: PluginObjectsConfig,
    pub(super) wake: Arc<Notify>,
    /// The images Plugins name, pulled in the background.
    pub(super) images: Option<Arc<ImagePulls>>,
    /// Modules compiled in the background, namespaces in turn.
    pub(super) compiles: Arc<Compiles>,
    pub(super) state: tokio::sync::Mutex<State>,
    pub(super) stores: OnceLock<(Store<DynamicObject>, Store<DynamicObject>)>,
    /// ConfigMap resourceVersions as the watch saw them.
    pub(super) config_maps: Mutex<HashMap<(String, String), String>>,
    /// ConfigMaps some Plugin's module is in: a change to one wakes a pass.
    pub(super) referenced: Mutex<HashSet<(String, String)>>,
    pub(super) denials: Mutex<HashMap<String, Denials>>,
    /// Where calls' decisions are announced (shadow comparisons listen).
    pub(super) audit: AuditSink,
    /// The comparisons of candidates in shadow, by the live instance's name.
    pub(super) comparisons: Mutex<HashMap<String, Comparison>>,
    /// The statuses computed in the last pass, for the dashboard.
    pub(super) statuses: PluginStatuses,
    /// The versions the host's own status writes gave Plugins, whose watch events need no
    /// pass.
    pub(super) echoes: Echoes,
    /// What the host recorded of each Plugin's status (in its own namespace).
    pub(super) records: RecordStore,
}

/// The plugins of the cluster's Plugin objects (the API source of plugins, beside the
/// plugins directory; not to be confused with [`crate::contract::ObjectSource`], what a
/// plugin reads); clones share it.
#[derive(Clone)]
pub struct PluginObjects {
    pub(super) inner: Arc<Inner>,
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

pub(super) use crate::sync::lock;

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
                echoes: Echoes::default(),
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
        lock(&tasks).extend(inner.records.start(inner.wake.clone()));
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
                    Ok(event) if wakes(&event, &me.inner.echoes) => me.inner.wake.notify_one(),
                    Ok(_) => {}
                    Err(err) => tracing::warn!("watch of Plugin objects failed, retrying: {err}"),
                }
            }
        }));
        store
    }

    /// One pass over every Plugin and PluginPolicy.
    pub async fn pass(&self) {
        let inner = &*self.inner;
        let Some((plugins, policies)) = inner.stores.get() else {
            return;
        };
        let mut plugins = plugins.state();
        oldest_first(&mut plugins);
        let policy_objects = policies.state();
        let mut state = inner.state.lock().await;

        // Policies: a spec that does not parse keeps the last good one in force.
        let (in_force, policy_errors) = in_force(&mut state, &policy_objects);
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
        let mut prefetched = prefetch(inner, &state, plugins.iter().take(max).map(|o| &**o)).await;
        let mut slice = TimeSlice::start();
        for obj in plugins.iter() {
            slice.check().await;
            let ns = obj.namespace().unwrap_or_default();
            let name = obj.name_any();
            let instance = InstanceName::object(&ns, &name)
                .map_err(|e| Refusal::new(Reason::InvalidName, e.to_string()))
                .and_then(|n| slots.admit(&ns, plugins.len()).map(|()| n));
            let (outcome, fallback) = match &instance {
                Ok(instance) => {
                    let applying = self.applying(&ns, &in_force, &mut labels).await;
                    let outcome = self
                        .resolve(
                            &mut state,
                            obj,
                            instance,
                            &applying,
                            &mut referenced,
                            &mut prefetched,
                        )
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
            slice.check().await;
            let (key, status) = self.report(&mut state, entry).await;
            computed.insert(key, status);
        }
        inner.statuses.replace(computed);
        // What is remembered per Plugin stays bounded by the Plugins that exist now: Events
        // sent for their current generation only, count timestamps for existing ones.
        let current = generations(entries.iter().map(|e| &*e.obj));
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
        self.report_policies(
            &policy_objects,
            &plugins,
            (&in_force, &policy_errors),
            &labels,
        )
        .await;
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
}

/// Whether a watch event of a Plugin or PluginPolicy calls for a pass: not the relist's
/// start or its objects one by one (the end of the relist does), nor the host's own status
/// write come back (see [`Echoes`]).
fn wakes(event: &Event<DynamicObject>, echoes: &Echoes) -> bool {
    match event {
        Event::Init | Event::InitApply(_) => false,
        Event::Apply(obj) => !echoes.is_echo(obj),
        Event::InitDone | Event::Delete(_) => true,
    }
}

/// Sorts Plugins oldest first (then by namespace and name): when there are more than the
/// host runs, the newest wait.
fn oldest_first(plugins: &mut [Arc<DynamicObject>]) {
    plugins.sort_by(|a, b| {
        let at = |o: &DynamicObject| o.metadata.creation_timestamp.clone().map(|t| t.0);
        (at(a), a.namespace(), a.name_any()).cmp(&(at(b), b.namespace(), b.name_any()))
    });
}

/// Each Plugin's generation (0 when it has none) by `namespace/name`: what the memory of
/// Events sent and counts written is bounded by.
fn generations<'a>(plugins: impl Iterator<Item = &'a DynamicObject>) -> HashMap<String, i64> {
    plugins
        .map(|o| {
            let (ns, name) = (o.namespace().unwrap_or_default(), o.name_any());
            (format!("{ns}/{name}"), o.metadata.generation.unwrap_or(0))
        })
        .collect()
}

/// The refusal of a Plugin whose module does not load: one built for another contract (or
/// not a plugin at all) is `ContractUnsupported`, any other failure `CompileFailed`.
pub(super) fn load_refusal(err: LoadError) -> Refusal {
    let reason = match &err {
        LoadError::ContractMismatch { .. }
        | LoadError::NotAPlugin { .. }
        | LoadError::Link { .. } => Reason::ContractUnsupported,
        _ => Reason::CompileFailed,
    };
    Refusal::new(reason, err.to_string())
}

/// Now, to the second, as Kubernetes writes a time (`2026-01-02T03:04:05Z`).
pub(super) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}

/// Whether the API server serves both kinds.
pub(super) async fn served(client: &kube::Client) -> bool {
    client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
        .is_ok_and(|list| serves_both(&list))
}

/// Whether `list`, the resources of the group and version, holds both kinds' (their
/// subresources, `plugins/status`, are not the kinds).
fn serves_both(list: &APIResourceList) -> bool {
    let has = |p: &str| list.resources.iter().any(|r| r.name == p);
    has(&plugin_resource().plural) && has(&policy_resource().plural)
}

/// `write`, sent only while `pass` holds the Plugin's key (asked again on every poll, as an
/// action's write is), so a replica frozen and woken after its lease lapsed writes nothing
/// about a Plugin another replica now answers for. `None` when it was dropped.
pub(super) async fn while_held<F: std::future::Future>(
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

#[cfg(test)]
mod tests;
