//! Starting, changing and stopping the controller: one shared watch per kind, one queue and
//! a pool of workers per plugin, a router between them, and an optional resync timer.
//! Plugins can be added, updated and removed while it runs (see [`Controller::upsert`]).

use super::config::ControllerConfig;
use crate::actions::{ApiWriter, Executor, HostWrites, KubeWriter, Pipeline};
use crate::cluster::{Feed, KindRegistry, WatchScope, WatchSettings, Watches};
use crate::contract::text::shown;
use crate::contract::{KindRef, Reason};
use crate::plugin::{GuestCpu, Plugin};
use crate::policy::{AuditRecord, AuditSink, Policy};
use crate::queue::FairSlots;
use crate::queue::QueueMetrics;
use crate::router;
use crate::worker::{
    Drain, InstanceName, PluginInstance, ReconcileCounts, ReconcileMetrics, Revision,
    RunningPlugin, RunningPlugins, Shared, StartError,
};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// A running controller host; clones share it.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

struct Inner {
    config: ControllerConfig,
    watches: Watches,
    running: RunningPlugins,
    /// The router's feed, which a starting plugin joins.
    feed: Feed,
    /// What each running plugin is started with.
    shared: Shared,
    background: Mutex<Vec<JoinHandle<()>>>,
    audit: AuditSink,
    /// Serialises changes to the set of plugins; `true` once shutting down.
    changing: tokio::sync::Mutex<bool>,
}

/// What [`Controller::upsert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A new plugin: queue and workers started, every cached key queued.
    Started,
    /// A running plugin got a new revision; its queue was kept and every key re-queued.
    Updated,
    /// A running plugin now reconciles another kind: its old queue was stopped and a new one
    /// started.
    Restarted,
}

use crate::sync::lock;

impl Controller {
    /// Starts a controller with no plugin yet (the router and resync timer run).
    pub fn new(client: kube::Client, config: ControllerConfig) -> Self {
        Self::with_writer(client, config, |kinds| Arc::new(KubeWriter::new(kinds)))
    }

    /// A controller whose writes go through the writer `writer` makes of its kind registry
    /// (tests give a fake).
    pub(crate) fn with_writer(
        client: kube::Client,
        config: ControllerConfig,
        writer: impl FnOnce(Arc<KindRegistry>) -> Arc<dyn ApiWriter>,
    ) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut metrics = None;
        let audit = config.audit.clone();
        let guest_cpu = GuestCpu::of_host();
        let limit = config.metrics.series_limit().clone();
        config.metrics.register(|registry| {
            metrics = Some((
                QueueMetrics::new(registry, &limit),
                ReconcileMetrics::new(registry, &limit),
            ));
            audit.register(registry, &limit);
            guest_cpu.register(registry);
        });
        let (queue_metrics, reconcile_metrics) = metrics.expect("register runs its closure");
        let kinds = Arc::new(KindRegistry::new(client));
        let writer = writer(kinds.clone());
        let running = RunningPlugins::default();
        let mut background = vec![tokio::spawn(router::run(rx, running.clone()))];
        if let Some(period) = config.resync {
            background.push(tokio::spawn(resync(running.clone(), period)));
        }
        if config.gate.is_coordinated() {
            background.push(tokio::spawn(super::handover::follow(
                config.gate.clone(),
                running.clone(),
            )));
        }
        let shared = Shared {
            pipeline: Arc::new(Pipeline::new(
                Executor::new(writer, config.host_name.clone()),
                audit.clone(),
            )),
            metrics: reconcile_metrics,
            queue: config.queue.clone(),
            queue_metrics,
            gate: config.gate.clone(),
            workers: config.workers,
            expectation_wait: config.expectation_wait,
            host_writes: HostWrites::new(config.max_writes_in_flight),
            calls: FairSlots::new(config.max_calls),
            guest_cpu,
            ledger: config.ledger.clone(),
        };
        Controller {
            inner: Arc::new(Inner {
                watches: Watches::new(
                    kinds,
                    config.namespace.clone(),
                    WatchSettings {
                        streaming_lists: config.streaming_lists,
                        timeout: config.watch_timeout,
                    },
                    tx.clone(),
                ),
                feed: tx,
                running,
                shared,
                background: Mutex::new(background),
                audit,
                changing: tokio::sync::Mutex::new(false),
                config,
            }),
        }
    }

    /// Starts a controller running `instances`. A plugin that cannot start (its kinds are
    /// not served, its name is taken) is reported and left out; the rest run.
    pub async fn start(
        client: kube::Client,
        config: ControllerConfig,
        instances: Vec<PluginInstance>,
    ) -> anyhow::Result<Self> {
        let controller = Controller::new(client, config);
        for instance in instances {
            if let Err(err) = controller.add(instance).await {
                tracing::error!("plugin not started: {err}");
            }
        }
        Ok(controller)
    }

    /// Starts a plugin that is not running yet.
    pub async fn add(&self, instance: PluginInstance) -> Result<Applied, StartError> {
        let name = checked_name(&instance)?;
        if self.inner.running.get(name).is_some() {
            return Err(StartError::DuplicateName(name.clone()));
        }
        self.upsert(instance).await
    }

    /// Starts `instance`, or, when a plugin of that name runs, swaps in the new revision:
    /// calls in flight finish on the old one, queued keys stay and run on the new one, and
    /// every cached key is queued again. Watches the new revision needs are started first;
    /// watches no plugin needs any more are stopped. On error the running revision (if any)
    /// keeps running.
    pub async fn upsert(&self, instance: PluginInstance) -> Result<Applied, StartError> {
        let name = checked_name(&instance)?.clone();
        let changing = self.inner.changing.lock().await;
        if *changing {
            return Err(StartError::ShuttingDown);
        }
        let result = self.apply(&name, instance).await;
        self.retain_watches();
        result
    }

    async fn apply(
        &self,
        name: &InstanceName,
        instance: PluginInstance,
    ) -> Result<Applied, StartError> {
        let Some(running) = self.inner.running.get(name) else {
            let revision = self.build(name, &instance, None).await?;
            self.start_running(name, &instance, revision)?;
            return Ok(Applied::Started);
        };
        let old = running.current();
        let meta = instance.plugin.metadata();
        if old.plugin.metadata().reconciles != meta.reconciles {
            // Its keys name objects of another kind: nothing queued carries over.
            let revision = self.build(name, &instance, None).await?;
            self.stop(name).await;
            self.start_running(name, &instance, revision)?;
            return Ok(Applied::Restarted);
        }
        let revision = self.build(name, &instance, Some(&old)).await?;
        running.update(revision);
        tracing::info!(record = "reload", result = "updated", plugin = %name, declared = %shown(&meta.name), from = %old.identity.version, to = %meta.version, digest = %instance.plugin.digest(), policy = policy_source(&instance), "plugin updated");
        Ok(Applied::Updated)
    }

    async fn build(
        &self,
        name: &InstanceName,
        instance: &PluginInstance,
        previous: Option<&Revision>,
    ) -> Result<Revision, StartError> {
        Revision::build(
            &self.inner.watches,
            name,
            instance,
            crate::plugin::Limits::from(self.inner.config.limits),
            previous,
        )
        .await
    }

    fn start_running(
        &self,
        name: &InstanceName,
        instance: &PluginInstance,
        revision: Revision,
    ) -> Result<(), StartError> {
        let running = RunningPlugin::start(name.clone(), revision, &self.inner.shared)?;
        self.inner.running.insert(running.clone());
        self.inner
            .config
            .metrics
            .series_limit()
            .started(name.as_str());
        self.inner.shared.metrics.start_plugin(name.as_str());
        running.prime(&self.inner.feed);
        let meta = instance.plugin.metadata();
        tracing::info!(record = "reload", result = "started", plugin = name.as_str(), declared = %shown(&meta.name), version = %meta.version, digest = %instance.plugin.digest(), reconciles = %meta.reconciles, owns = meta.owns.len(), mode = ?instance.policy.mode, policy = policy_source(instance), "plugin started");
        Ok(())
    }

    /// Stops the plugin `name`: its queued keys are dropped, calls in flight finish, its
    /// watches are stopped unless another plugin needs them. Returns whether it ran.
    pub async fn remove(&self, name: &str) -> bool {
        let _changing = self.inner.changing.lock().await;
        let removed = self.stop(name).await;
        self.retain_watches();
        removed
    }

    async fn stop(&self, name: &str) -> bool {
        let Some(running) = self.inner.running.remove(name) else {
            return false;
        };
        running.halt();
        running.join(None).await;
        // Counted out first, so a namespace left with no plugin keeps no retired counts.
        self.inner.config.metrics.series_limit().stopped(name);
        self.inner.shared.queue_metrics.remove_queue(name);
        self.inner.shared.metrics.remove_plugin(name);
        self.inner.audit.remove_plugin(name);
        tracing::info!(
            record = "reload",
            result = "removed",
            plugin = name,
            "plugin stopped"
        );
        true
    }

    fn retain_watches(&self) {
        let mut needed: BTreeMap<KindRef, WatchScope> = BTreeMap::new();
        for running in self.inner.running.snapshot().iter() {
            let revision = running.current();
            for kind in revision.kinds() {
                match needed.get_mut(kind) {
                    Some(scope) => scope.widen(&revision.scope),
                    None => {
                        needed.insert(kind.clone(), revision.scope.clone());
                    }
                }
            }
        }
        self.inner.watches.retain(&needed);
    }

    /// Where each kind is watched: `None` for cluster-wide, else its namespaces.
    pub fn watch_scopes(&self) -> Vec<(KindRef, Vec<Option<String>>)> {
        self.inner.watches.scopes()
    }

    /// How many objects each watched kind's cache holds.
    pub fn cached_objects(&self) -> Vec<(KindRef, usize)> {
        self.inner.watches.object_counts()
    }

    /// Every audit record from now on: one per action, with its policy decision (to miss
    /// none, subscribe to [`ControllerConfig::audit`] before starting).
    pub fn audit(&self) -> tokio::sync::broadcast::Receiver<Arc<AuditRecord>> {
        self.inner.audit.subscribe()
    }

    /// Names of the plugins that are running.
    pub fn plugins(&self) -> Vec<String> {
        let running = self.inner.running.snapshot();
        running.iter().map(|p| p.name.to_string()).collect()
    }

    /// The plugin that new calls of the running plugin `name` run (its current revision's), if
    /// it runs.
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.inner
            .running
            .get(name)
            .map(|p| p.current().plugin.clone())
    }

    /// The policy plugin `name` runs under, if it runs.
    pub fn policy(&self, name: &str) -> Option<Arc<Policy>> {
        self.inner
            .running
            .get(name)
            .map(|p| p.current().policy.clone())
    }

    /// The kinds being watched.
    pub fn watched_kinds(&self) -> Vec<KindRef> {
        self.inner.watches.kinds()
    }

    /// Whether every watch has listed its kind once.
    pub fn is_synced(&self) -> bool {
        self.inner.watches.all_synced()
    }

    /// Keys waiting per plugin.
    pub fn queue_depths(&self) -> HashMap<String, usize> {
        let running = self.inner.running.snapshot();
        running
            .iter()
            .map(|p| (p.name.to_string(), p.queue.len()))
            .collect()
    }

    /// The metrics (workqueue metrics labelled by plugin, actions by decision, and whatever
    /// was registered with [`register_metrics`](Self::register_metrics)) in the Prometheus
    /// text format.
    pub fn metrics_text(&self) -> String {
        let gate = &self.inner.config.gate;
        if gate.is_coordinated() {
            let (owned, cached) = super::handover::owned_keys(&self.inner.running, &gate.scope());
            gate.metrics().keys_owned.set(owned as i64);
            gate.metrics().keys.set(cached as i64);
        }
        let running = self.inner.running.snapshot();
        self.inner
            .shared
            .metrics
            .set_writes(running.iter().map(|p| {
                let (in_flight, limit) = p.writes();
                (p.name.to_string(), in_flight, limit)
            }));
        self.inner.shared.metrics.set_cache_objects(
            self.inner
                .watches
                .object_counts()
                .into_iter()
                .map(|(kind, n)| (kind.to_string(), n)),
        );
        self.inner.config.metrics.encode()
    }

    /// [`metrics_text`](Self::metrics_text) with every series per plugin whatever the series
    /// limit: for the host's own per-plugin readers (the dashboard), not for scrapers.
    pub fn metrics_text_per_plugin(&self) -> String {
        crate::metrics::per_plugin_view(|| self.metrics_text())
    }

    /// Queues every cached key of running plugin `name` again (as a resync does); `false`
    /// when no plugin of that name runs.
    pub fn requeue(&self, name: &str) -> bool {
        match self.inner.running.get(name) {
            Some(running) => {
                running.enqueue_cached(Reason::Resync);
                true
            }
            None => false,
        }
    }

    /// How many reconciles plugin `name` has run and how many did not succeed (zero for a
    /// plugin not running).
    pub fn reconcile_counts(&self, name: &str) -> ReconcileCounts {
        self.inner.shared.metrics.counts(name)
    }

    /// Registers more metrics beside the controller's own (in the registry of its
    /// [`ControllerConfig::metrics`]).
    pub fn register_metrics(&self, register: impl FnOnce(&mut Registry)) {
        self.inner.config.metrics.register(register);
    }

    /// Drains with the default bound ([`DEFAULT_SHUTDOWN_TIMEOUT`]); see
    /// [`Controller::shutdown_within`].
    pub async fn shutdown(&self) -> Drain {
        self.shutdown_within(DEFAULT_SHUTDOWN_TIMEOUT).await
    }

    /// Stops every plugin as a removal does: queued keys are dropped (a restart relists them),
    /// calls in flight finish, and their writes still waiting for the write budget are
    /// skipped and audited. Workers still busy `timeout` after the start are abandoned, so a
    /// slow API server or a long budget never holds the process. Then stops the watches.
    pub async fn shutdown_within(&self, timeout: Duration) -> Drain {
        let deadline = tokio::time::Instant::now() + timeout;
        // A reload in progress holds this lock; stop the plugins whether or not it ends in time.
        let changing = tokio::time::timeout_at(deadline, self.inner.changing.lock()).await;
        match changing {
            Ok(mut changing) => *changing = true,
            Err(_) => {
                tracing::warn!("a plugin change is still in progress at the shutdown deadline")
            }
        }
        let running = self.inner.running.snapshot();
        for plugin in running.iter() {
            plugin.halt();
        }
        let mut drain = Drain::default();
        for plugin in running.iter() {
            let joined = plugin.join(Some(deadline)).await;
            for _ in 0..joined.abandoned {
                tracing::warn!(plugin = %plugin.name, timeout_ms = timeout.as_millis() as u64, "worker still busy at the shutdown deadline: abandoned");
            }
            drain.finished += joined.finished;
            drain.abandoned += joined.abandoned;
        }
        for task in lock(&self.inner.background).drain(..) {
            task.abort();
        }
        self.inner.watches.stop_all();
        drain
    }
}

/// How long a drain waits for busy workers unless told otherwise (`--shutdown-timeout`).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

fn policy_source(instance: &PluginInstance) -> String {
    match &instance.policy.source {
        Some(p) => p.display().to_string(),
        None => "none (dry-run default)".into(),
    }
}

/// Re-enqueues every cached key of every plugin's kind each `period`.
async fn resync(running: RunningPlugins, period: std::time::Duration) {
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        for plugin in running.snapshot().iter() {
            plugin.enqueue_cached(Reason::Resync);
        }
    }
}

#[cfg(test)]
mod tests;

/// The name of `instance`, or why the controller refuses it.
fn checked_name(instance: &PluginInstance) -> Result<&InstanceName, StartError> {
    instance
        .name()
        .map_err(|invalid| StartError::InvalidName(invalid.clone()))
}
