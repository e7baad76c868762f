//! Starting and stopping the controller: one shared watch per kind, one queue and a pool of
//! workers per plugin, a router between them, and an optional resync timer.

use super::cache_objects::CacheObjects;
use super::config::ControllerConfig;
use super::instance::PluginInstance;
use super::router;
use super::unit::{PluginUnit, UnitParts};
use crate::actions::Executor;
use crate::cluster::{KindCache, KindRegistry, WatchHandle, spawn_watch};
use crate::contract::{KindRef, Reason};
use crate::plugin::CallContext;
use crate::policy::{AuditRecord, AuditSink};
use crate::queue::{QueueMetrics, WorkQueue};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// A running controller host.
pub struct Controller {
    units: Vec<Arc<PluginUnit>>,
    workers: Vec<JoinHandle<()>>,
    watches: BTreeMap<KindRef, WatchHandle>,
    background: Vec<JoinHandle<()>>,
    registry: prometheus_client::registry::Registry,
    audit: AuditSink,
}

impl Controller {
    /// Starts watches for every kind the plugins need and workers for every plugin. A plugin
    /// whose kinds the API server does not serve is reported and left out; the rest run.
    pub async fn start(
        client: kube::Client,
        config: ControllerConfig,
        instances: Vec<PluginInstance>,
    ) -> anyhow::Result<Self> {
        let kinds = Arc::new(KindRegistry::new(client.clone()));
        let executor = Arc::new(Executor::new(kinds.clone(), config.instance.clone()));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watches: BTreeMap<KindRef, WatchHandle> = BTreeMap::new();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        let audit = config.audit.clone();
        audit.register(&mut registry);
        let mut units = Vec::new();
        'plugins: for instance in instances {
            if units
                .iter()
                .any(|u: &Arc<PluginUnit>| *u.name == instance.name)
            {
                tracing::error!(plugin = %instance.name, "plugin not started: another plugin has the same name");
                continue;
            }
            let meta = instance.plugin.metadata().clone();
            let name = instance.name.as_str();
            let policy = instance.policy.clone();
            let mut caches: Vec<Arc<KindCache>> = Vec::new();
            let extra_reads = policy
                .grants
                .reads
                .iter()
                .filter(|k| **k != meta.reconciles && !meta.owns.contains(k));
            for kind in std::iter::once(&meta.reconciles)
                .chain(&meta.owns)
                .chain(extra_reads)
            {
                if let Some(w) = watches.get(kind) {
                    caches.push(w.cache.clone());
                    continue;
                }
                match kinds.resolve(kind).await {
                    Ok(resolved) => {
                        let handle = spawn_watch(
                            client.clone(),
                            &resolved,
                            config.namespace.as_deref(),
                            tx.clone(),
                        );
                        caches.push(handle.cache.clone());
                        watches.insert(kind.clone(), handle);
                    }
                    Err(err) => {
                        tracing::error!(plugin = name, %kind, "plugin not started: the API server does not serve its kind: {err}");
                        continue 'plugins;
                    }
                }
            }
            let queue = WorkQueue::new(name, &config.queue, &metrics)?;
            let objects =
                CacheObjects::scoped(caches.iter().cloned(), policy.grants.namespaces.clone());
            let ctx = CallContext::new(policy.call_limits(config.limits), Arc::new(objects));
            let primary = caches[0].clone();
            if let Some(selector) = policy.grants.namespaces.selector() {
                // Namespaces granted by label: look them up in a shared Namespace watch (not
                // readable by the plugin); workers wait for it to sync.
                let kind = KindRef::new("v1", "Namespace");
                let cache = match watches.get(&kind) {
                    Some(w) => w.cache.clone(),
                    None => match kinds.resolve(&kind).await {
                        Ok(resolved) => {
                            let handle = spawn_watch(client.clone(), &resolved, None, tx.clone());
                            let cache = handle.cache.clone();
                            watches.insert(kind, handle);
                            cache
                        }
                        Err(err) => {
                            tracing::error!(
                                plugin = name,
                                "plugin not started: its policy selects namespaces by label, but Namespaces cannot be watched: {err}"
                            );
                            continue 'plugins;
                        }
                    },
                };
                selector.attach(cache.clone());
                caches.push(cache);
            }
            units.push(Arc::new(PluginUnit::new(UnitParts {
                name: name.into(),
                plugin: instance.plugin.clone(),
                queue,
                primary,
                caches,
                ctx,
                executor: executor.clone(),
                config: instance.config.clone(),
                policy: policy.clone(),
                audit: audit.clone(),
            })));
            let source = policy.source.as_ref().map(|p| p.display().to_string());
            tracing::info!(plugin = name, version = %meta.version, reconciles = %meta.reconciles, owns = meta.owns.len(), mode = ?policy.mode, policy = source.as_deref().unwrap_or("none (dry-run default)"), "plugin started");
        }
        drop(tx);
        let mut background = vec![tokio::spawn(router::run(rx, units.clone()))];
        if let Some(period) = config.resync {
            background.push(tokio::spawn(resync(units.clone(), period)));
        }
        let workers = units
            .iter()
            .flat_map(|u| (0..config.workers.max(1)).map(|_| tokio::spawn(u.clone().work())))
            .collect();
        Ok(Controller {
            units,
            workers,
            watches,
            background,
            registry,
            audit,
        })
    }

    /// Every audit record from now on: one per action, with its policy decision (to miss
    /// none, subscribe to [`ControllerConfig::audit`] before starting).
    pub fn audit(&self) -> tokio::sync::broadcast::Receiver<Arc<AuditRecord>> {
        self.audit.subscribe()
    }

    /// Names of the plugins that are running.
    pub fn plugins(&self) -> Vec<String> {
        self.units
            .iter()
            .map(|u| u.plugin.name().to_string())
            .collect()
    }

    /// The kinds being watched.
    pub fn watched_kinds(&self) -> Vec<KindRef> {
        self.watches.keys().cloned().collect()
    }

    /// Whether every watch has listed its kind once.
    pub fn is_synced(&self) -> bool {
        self.watches.values().all(|w| w.cache.is_synced())
    }

    /// Keys waiting per plugin.
    pub fn queue_depths(&self) -> HashMap<String, usize> {
        self.units
            .iter()
            .map(|u| (u.plugin.name().to_string(), u.queue.len()))
            .collect()
    }

    /// The metrics registry (workqueue metrics, labelled by plugin).
    pub fn metrics(&self) -> &prometheus_client::registry::Registry {
        &self.registry
    }

    /// Stops taking keys, lets in-flight calls finish, then stops the watches.
    pub async fn shutdown(self) {
        for unit in &self.units {
            unit.queue.shut_down();
        }
        for worker in self.workers {
            let _ = worker.await;
        }
        for task in self.background {
            task.abort();
        }
        drop(self.watches);
    }
}

/// Re-enqueues every cached key of every plugin's kind each `period`.
async fn resync(units: Vec<Arc<PluginUnit>>, period: std::time::Duration) {
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        for unit in &units {
            for key in unit.primary.keys() {
                unit.enqueue(key, Reason::Resync);
            }
        }
    }
}
