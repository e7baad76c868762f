//! One plugin inside the controller: its workqueue, its workers, what it reconciled last.

use super::instance::PluginInstance;
use crate::actions::Executor;
use crate::cluster::{KindCache, ObjKey};
use crate::contract::{ObjectRef, Reason, ReconcileRequest};
use crate::plugin::{CallContext, Plugin};
use crate::queue::WorkQueue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A plugin with its queue and the state its workers share.
pub(crate) struct PluginUnit {
    pub name: Arc<str>,
    pub plugin: Arc<Plugin>,
    pub queue: WorkQueue<ObjKey>,
    /// The cache of the kind it reconciles.
    pub primary: Arc<KindCache>,
    /// Every cache it depends on (reconciled and owned kinds): workers wait for all to sync.
    pub caches: Vec<Arc<KindCache>>,
    pub ctx: CallContext,
    pub executor: Arc<Executor>,
    pub config: Option<Arc<str>>,
    /// Why each queued key was queued (advisory, for the request).
    reasons: Mutex<HashMap<ObjKey, Reason>>,
    /// The object version each key was last reconciled successfully at (when the plugin
    /// asks for it).
    last_ok: Mutex<HashMap<ObjKey, Arc<str>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PluginUnit {
    /// A unit for `instance`; `caches` lists the reconciled kind's cache first, then the
    /// owned kinds'.
    pub(crate) fn new(
        instance: &PluginInstance,
        queue: WorkQueue<ObjKey>,
        caches: Vec<Arc<KindCache>>,
        ctx: CallContext,
        executor: Arc<Executor>,
    ) -> Self {
        PluginUnit {
            name: instance.name.as_str().into(),
            plugin: instance.plugin.clone(),
            queue,
            primary: caches[0].clone(),
            caches,
            ctx,
            executor,
            config: instance.config.clone(),
            reasons: Mutex::default(),
            last_ok: Mutex::default(),
        }
    }

    /// Queues `key`, remembering why (the latest reason wins).
    pub(crate) fn enqueue(&self, key: ObjKey, reason: Reason) {
        lock(&self.reasons).insert(key.clone(), reason);
        self.queue.add(key);
    }

    /// Works keys off the queue until it shuts down.
    pub(crate) async fn work(self: Arc<Self>) {
        for cache in &self.caches {
            cache.wait_synced().await;
        }
        while let Some(key) = self.queue.get().await {
            self.process(&key).await;
            self.queue.done(&key);
        }
    }

    fn request(&self, key: &ObjKey) -> ReconcileRequest {
        let requeues = self.queue.num_requeues(key);
        let reason = lock(&self.reasons).remove(key).unwrap_or(if requeues > 0 {
            Reason::Retry
        } else {
            Reason::Requeue
        });
        let kind = &self.plugin.metadata().reconciles;
        let previous = if self.plugin.metadata().wants_previous {
            lock(&self.last_ok).get(key).cloned()
        } else {
            None
        };
        ReconcileRequest {
            target: ObjectRef {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            },
            object: self.primary.get(key).map(|o| o.json.clone()),
            previous,
            reason,
            attempt: requeues + 1,
            config: self.config.clone(),
        }
    }

    /// One reconcile: call the plugin off the async runtime, execute its actions, and tell
    /// the queue what to do with the key.
    async fn process(&self, key: &ObjKey) {
        let name = &*self.name;
        let request = self.request(key);
        let (plugin, ctx, req) = (self.plugin.clone(), self.ctx.clone(), request.clone());
        let handle = tokio::runtime::Handle::current();
        let report = match tokio::task::spawn_blocking(move || {
            handle.block_on(plugin.reconcile(&req, &ctx))
        })
        .await
        {
            Ok(report) => report,
            Err(err) => {
                tracing::error!(plugin = name, %key, "plugin call task failed: {err}");
                self.queue.add_rate_limited(key.clone());
                return;
            }
        };
        let actions = match report.outcome {
            Ok(actions) => actions,
            Err(err) if err.is_transient() => {
                tracing::warn!(plugin = name, %key, attempt = request.attempt, error = err.kind(), "reconcile failed, will retry: {err}");
                self.queue.add_rate_limited(key.clone());
                return;
            }
            Err(err) => {
                tracing::error!(plugin = name, %key, error = err.kind(), "reconcile failed, not retried until the object changes: {err}");
                self.queue.forget(key);
                return;
            }
        };
        let execution = self
            .executor
            .execute(name, &key.to_string(), &actions)
            .await;
        match execution.failure() {
            Some(f) if f.transient => self.queue.add_rate_limited(key.clone()),
            Some(_) => self.queue.forget(key),
            None => {
                self.queue.forget(key);
                if self.plugin.metadata().wants_previous {
                    let mut last = lock(&self.last_ok);
                    match &request.object {
                        Some(o) => last.insert(key.clone(), o.clone()),
                        None => last.remove(key),
                    };
                }
                if let Some(delay) = execution.requeue_after {
                    self.queue.add_after(key.clone(), delay);
                }
            }
        }
        tracing::debug!(plugin = name, %key, actions = actions.len(), elapsed_us = report.elapsed.as_micros() as u64, "reconciled");
    }
}
