//! One version of a plugin unit: the compiled plugin with its policy, configuration and the
//! caches it reads. A reload builds a new version and swaps it in; calls in flight keep the
//! version they started with.

use super::cache_objects::CacheObjects;
use super::error::ControllerError;
use super::instance::PluginInstance;
use super::watches::Watches;
use crate::cluster::KindCache;
use crate::contract::KindRef;
use crate::plugin::{CallContext, Limits, Plugin};
use crate::policy::{PluginIdentity, Policy, WriteBudget};
use std::sync::Arc;

/// What one version of a unit runs with.
pub(crate) struct UnitVersion {
    pub plugin: Arc<Plugin>,
    /// The cache of the kind it reconciles.
    pub primary: Arc<KindCache>,
    /// Every cache it depends on (reconciled, owned and policy-granted read kinds, and
    /// Namespaces for a label-selecting policy): calls wait for all to sync.
    pub caches: Vec<Arc<KindCache>>,
    pub ctx: CallContext,
    pub config: Option<Arc<str>>,
    /// What the operator granted it.
    pub policy: Arc<Policy>,
    /// Its write budget, awaited before each API write (kept across versions while the
    /// policy's write limits stay the same, so a reload does not refill it).
    pub budget: Arc<WriteBudget>,
    pub identity: Arc<PluginIdentity>,
}

impl UnitVersion {
    /// Starts (or reuses) the watches `instance` needs and wires a version from them.
    /// `previous` lends its write budget when the write limits did not change.
    pub async fn build(
        watches: &Watches,
        instance: &PluginInstance,
        host_limits: Limits,
        previous: Option<&UnitVersion>,
    ) -> Result<UnitVersion, ControllerError> {
        let meta = instance.plugin.metadata();
        let policy = instance.policy.clone();
        let mut caches = Vec::new();
        for kind in readable_kinds(instance) {
            let cache =
                watches
                    .ensure(&kind)
                    .await
                    .map_err(|e| ControllerError::KindNotServed {
                        plugin: instance.name.clone(),
                        kind: kind.clone(),
                        message: e.to_string(),
                    })?;
            caches.push(cache);
        }
        let objects =
            CacheObjects::scoped(caches.iter().cloned(), policy.grants.namespaces.clone());
        let ctx = CallContext::new(policy.call_limits(host_limits), Arc::new(objects));
        if let Some(selector) = policy.grants.namespaces.selector() {
            // Namespaces granted by label: looked up in the shared Namespace watch, which the
            // plugin itself cannot read.
            let cache = watches.ensure(&namespace_kind()).await.map_err(|e| {
                ControllerError::NamespacesUnwatchable {
                    plugin: instance.name.clone(),
                    message: e.to_string(),
                }
            })?;
            selector.attach(cache.clone());
            caches.push(cache);
        }
        let budget = match previous {
            Some(p)
                if p.policy.limits.writes_per_second == policy.limits.writes_per_second
                    && p.policy.limits.write_burst == policy.limits.write_burst =>
            {
                p.budget.clone()
            }
            _ => Arc::new(policy.write_budget()),
        };
        Ok(UnitVersion {
            identity: Arc::new(PluginIdentity {
                name: instance.name.clone(),
                version: meta.version.clone(),
                digest: instance.plugin.digest().to_string(),
            }),
            plugin: instance.plugin.clone(),
            primary: caches[0].clone(),
            caches,
            ctx,
            config: instance.config.clone(),
            policy,
            budget,
        })
    }

    /// The kinds this version keeps watched.
    pub fn kinds(&self) -> impl Iterator<Item = &KindRef> {
        self.caches.iter().map(|c| c.kind())
    }
}

/// The kinds an instance's calls may read: the one it reconciles first, then the ones it
/// owns and the extra ones its policy grants.
fn readable_kinds(instance: &PluginInstance) -> Vec<KindRef> {
    let meta = instance.plugin.metadata();
    let mut kinds = vec![meta.reconciles.clone()];
    for kind in meta.owns.iter().chain(&instance.policy.grants.reads) {
        if !kinds.contains(kind) {
            kinds.push(kind.clone());
        }
    }
    kinds
}

fn namespace_kind() -> KindRef {
    KindRef::new("v1", "Namespace")
}
