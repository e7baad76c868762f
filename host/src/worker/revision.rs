//! A revision of a running plugin: the compiled plugin with its policy, configuration and
//! the caches it reads. A reload builds a new revision and swaps it in; calls in flight keep
//! the revision they started with.

use super::error::StartError;
use super::expectations::Cached;
use super::instance::{InstanceName, PluginInstance};
use crate::cluster::{CacheObjects, KindCache, ObjKey, WatchScope, Watches};
use crate::contract::KindRef;
use crate::plugin::{CallContext, Limits, Plugin};
use crate::policy::{NamespaceLabels, Namespaces, PluginIdentity, Policy, WriteBudget};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one revision of a running plugin runs with.
pub(crate) struct Revision {
    pub plugin: Arc<Plugin>,
    /// The cache of the kind it reconciles.
    pub primary: Arc<KindCache>,
    /// Every cache it depends on (reconciled, owned kinds for routing, policy-granted read
    /// kinds, and Namespaces for a label-selecting policy): calls wait for all to sync. Only
    /// the reconciled and granted ones are readable by the plugin.
    pub caches: Vec<Arc<KindCache>>,
    /// What calls may read: the reconciled and granted caches, in the granted namespaces.
    /// Each call reads through its own record of it
    /// ([`CallObjects`](crate::cluster::CallObjects)), whose versions fence its writes.
    pub objects: Arc<CacheObjects>,
    /// The call's limits and instance name (its object source is replaced per call).
    pub ctx: CallContext,
    pub config: Option<Arc<str>>,
    /// What the operator granted it.
    pub policy: Arc<Policy>,
    /// Its write budget, awaited before each API write (kept across revisions while the
    /// policy's write limits stay the same, so a reload does not refill it).
    pub budget: Arc<WriteBudget>,
    pub identity: Arc<PluginIdentity>,
    /// Where its kinds need watching: its granted namespaces, when it names them.
    pub scope: WatchScope,
}

impl Revision {
    /// Checks instance `name` (its policy's grant of the kind it reconciles, its digest pin),
    /// starts (or reuses) the watches it needs and wires a revision from them. `previous`
    /// lends its write budget when the write rate did not change.
    pub async fn build(
        watches: &Watches,
        name: &InstanceName,
        instance: &PluginInstance,
        host_limits: Limits,
        previous: Option<&Revision>,
    ) -> Result<Revision, StartError> {
        check(name, instance)?;
        let meta = instance.plugin.metadata();
        let mut policy = instance.policy.clone();
        let readable = readable_kinds(instance);
        let scope = watch_scope(&policy);
        let mut caches = Vec::new();
        for kind in readable.iter().chain(&meta.owns) {
            if caches.iter().any(|c: &Arc<KindCache>| c.kind() == kind) {
                continue;
            }
            let cache =
                watches
                    .ensure(kind, &scope)
                    .await
                    .map_err(|source| StartError::KindNotServed {
                        plugin: name.clone(),
                        kind: kind.clone(),
                        source: Box::new(source),
                    })?;
            caches.push(cache);
        }
        if policy.grants.namespaces.selector().is_some() {
            // Namespaces granted by label: looked up in the shared Namespace watch, which the
            // plugin itself cannot read. The revision runs a copy of the policy bound to it.
            let cache = watches
                .ensure(&namespace_kind(), &WatchScope::All)
                .await
                .map_err(|source| StartError::NamespacesUnwatchable {
                    plugin: name.clone(),
                    source: Box::new(source),
                })?;
            policy = Arc::new(policy.bind_namespaces(cache.clone()));
            caches.push(cache);
        }
        // Owned kinds are watched to route a child's change to its owner's key; the plugin
        // reads only what it reconciles and what its policy grants.
        let namespaces = policy.grants.namespaces.clone();
        let objects = Arc::new(CacheObjects::scoped(
            caches
                .iter()
                .filter(|c| readable.contains(c.kind()))
                .cloned(),
            Arc::new(move |namespace| namespaces.allows(namespace)),
        ));
        let ctx =
            CallContext::new(policy.call_limits(host_limits), objects.clone()).for_instance(name);
        let budget = match previous {
            Some(p) if p.policy.limits.write_rate() == policy.limits.write_rate() => {
                p.budget.clone()
            }
            _ => Arc::new(policy.write_budget()),
        };
        Ok(Revision {
            identity: Arc::new(PluginIdentity {
                name: name.to_string(),
                declared: meta.name.clone(),
                version: meta.version.clone(),
                digest: instance.plugin.digest().to_string(),
            }),
            plugin: instance.plugin.clone(),
            primary: caches[0].clone(),
            caches,
            objects,
            ctx,
            config: instance.config.clone(),
            policy,
            budget,
            scope,
        })
    }

    /// The kinds this revision keeps watched.
    pub fn kinds(&self) -> impl Iterator<Item = &KindRef> {
        self.caches.iter().map(|c| c.kind())
    }

    /// Whether this revision's policy grants keys in `namespace` (`None`: cluster-scoped).
    pub fn grants_namespace(&self, namespace: Option<&str>) -> bool {
        self.policy.grants.namespaces.allows(namespace)
    }

    /// What this revision's caches hold of one object (for expectations: any cache it
    /// depends on, readable by the plugin or not).
    pub fn cached(&self, kind: &KindRef, object: &ObjKey) -> Cached {
        match self.caches.iter().find(|c| c.kind() == kind) {
            None => Cached::Unwatched,
            Some(cache) => match cache.get(object) {
                Some(o) => Cached::At(o.resource_version.clone()),
                None => Cached::Gone {
                    seen: cache.seen(object.namespace.as_deref()),
                },
            },
        }
    }
}

/// Where a plugin's kinds need watching: the namespaces its policy names, when it grants
/// only named namespaces (as a Plugin object's grant does); else everywhere.
fn watch_scope(policy: &Policy) -> WatchScope {
    match &policy.grants.namespaces {
        Namespaces::Only {
            names,
            selector: None,
            ..
        } => WatchScope::Only(names.clone()),
        _ => WatchScope::All,
    }
}

/// The kinds an instance's calls may read: the one it reconciles first, then those its
/// policy grants ([`Grants::readable`](crate::policy::Grants::readable)). Never a kind only
/// the plugin's own metadata names.
fn readable_kinds(instance: &PluginInstance) -> Vec<KindRef> {
    let meta = instance.plugin.metadata();
    instance
        .policy
        .grants
        .readable(&meta.reconciles, &meta.owns)
}

/// What must hold before an instance runs: its policy grants the kind it reconciles, and
/// the file is the one its policy pins.
fn check(name: &InstanceName, instance: &PluginInstance) -> Result<(), StartError> {
    let reconciles = &instance.plugin.metadata().reconciles;
    if !instance.policy.grants.allows_reconciling(reconciles) {
        return Err(StartError::KindNotGranted {
            plugin: name.clone(),
            kind: reconciles.clone(),
            policy: policy_name(instance),
        });
    }
    let actual = instance.plugin.digest();
    match &instance.policy.plugin_sha256 {
        Some(pinned) if pinned != actual => Err(StartError::DigestMismatch {
            plugin: name.clone(),
            policy: policy_name(instance),
            pinned: pinned.clone(),
            actual: actual.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The policy's file, for errors.
fn policy_name(instance: &PluginInstance) -> String {
    instance
        .policy
        .source
        .as_ref()
        .map_or_else(|| "(inline)".into(), |p| p.display().to_string())
}

fn namespace_kind() -> KindRef {
    KindRef::new("v1", "Namespace")
}

/// A policy's namespace label selector looks labels up in the `v1 Namespace` cache.
impl NamespaceLabels for KindCache {
    fn has_labels(&self, namespace: &str, match_labels: &BTreeMap<String, String>) -> bool {
        self.get(&ObjKey::new(None, namespace)).is_some_and(|ns| {
            match_labels
                .iter()
                .all(|(k, v)| ns.labels.get(k) == Some(v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{CacheWriter, CachedObject};

    #[test]
    fn namespace_labels_follow_the_namespace_cache() {
        let mut cache = CacheWriter::new(namespace_kind());
        let ns = |name: &str, tenant: &str| {
            let object: crate::cluster::WatchedObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "resourceVersion": tenant,
                             "labels": {"tenant": tenant, "team": name}}
            }))
            .unwrap();
            CachedObject::from_watched(object)
        };
        let reader = cache.reader();
        let tenant_a = BTreeMap::from([("tenant".to_string(), "a".to_string())]);
        assert!(!reader.has_labels("team-a", &tenant_a), "not cached yet");
        cache.upsert(ns("team-a", "a"));
        cache.upsert(ns("team-b", "b"));
        assert!(reader.has_labels("team-a", &tenant_a));
        assert!(reader.has_labels("team-a", &BTreeMap::new()));
        assert!(!reader.has_labels("team-b", &tenant_a));
        assert!(!reader.has_labels("unknown", &BTreeMap::new()));
        cache.upsert(ns("team-a", "c"));
        assert!(!reader.has_labels("team-a", &tenant_a), "relabelled");
    }
}
