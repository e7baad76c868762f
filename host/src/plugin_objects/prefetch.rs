//! The ConfigMap module fetches of a pass, made a few at once before the pass resolves its
//! Plugins one by one. Fetched in turn, 1,000 new Plugins took 1,000 round trips of a module
//! each (12.3 s of the first pass at the e2e bench's 1,000 tenants); here at most
//! [`CONCURRENT_FETCHES`] are in flight. A module whose code is compiled or compiling
//! already keeps only its digest, so a thousand tenants running the same module never hold
//! a thousand copies of it.

use super::module::{ConfigMapModule, Module, ModuleRef, fetch};
use super::pass_state::State;
use super::refusal::Refusal;
use super::source::{Inner, lock};
use super::spec::{PluginObjectSpec, parse_spec};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::{HashMap, HashSet};

/// Module fetches in flight at once in a pass.
pub(super) const CONCURRENT_FETCHES: usize = 8;

/// A ConfigMap module and the digest its Plugin pins, if any.
pub(super) type FetchKey = (ConfigMapModule, Option<String>);

/// What a pass fetched ahead. A module with empty bytes was compiled or compiling when it
/// arrived: only its digest was kept.
pub(super) type Prefetched = HashMap<FetchKey, Result<Module, Refusal>>;

/// Whether the pass may reuse what it fetched of `key` last time: the ConfigMap is at the
/// version then seen and the module's code is still at hand (or its refusal was not
/// transient).
pub(super) fn reusable(inner: &Inner, state: &State, key: &FetchKey) -> bool {
    let seen = lock(&inner.config_maps)
        .get(&(key.0.namespace.clone(), key.0.config_map.clone()))
        .cloned();
    match state.fetched.get(key) {
        Some((Some(rv), Ok(digest))) if seen.as_ref() == Some(rv) => known(inner, state, digest),
        Some((Some(rv), Err(r))) if seen.as_ref() == Some(rv) => !r.reason.is_transient(),
        _ => false,
    }
}

/// Whether the code of module `digest` is compiled or on its way.
pub(super) fn known(inner: &Inner, state: &State, digest: &str) -> bool {
    state.compiled.contains_key(digest) || inner.compiles.knows(digest)
}

/// Fetches, [`CONCURRENT_FETCHES`] at once, the ConfigMap modules of `plugins` that the pass
/// cannot reuse.
pub(super) async fn prefetch<'a>(
    inner: &Inner,
    state: &State,
    plugins: impl Iterator<Item = &'a DynamicObject>,
) -> Prefetched {
    let mut wanted: HashSet<FetchKey> = HashSet::new();
    for obj in plugins {
        let ns = obj.namespace().unwrap_or_default();
        let Ok(spec) = parse_spec::<PluginObjectSpec>(&obj.data) else {
            continue;
        };
        if let Ok(ModuleRef::ConfigMap(at)) = ModuleRef::of(&ns, &spec.module) {
            let key = (at, spec.module.sha256.clone());
            if !reusable(inner, state, &key) {
                wanted.insert(key);
            }
        }
    }
    futures::stream::iter(wanted)
        .map(|key| async move {
            let fetched = fetch(
                &inner.client,
                &key.0,
                key.1.as_deref(),
                inner.config.max_module_bytes,
            )
            .await;
            (key, fetched)
        })
        .buffer_unordered(CONCURRENT_FETCHES)
        .map(|(key, fetched)| {
            let fetched = fetched.map(|mut module| {
                if known(inner, state, &module.digest) {
                    module.bytes = Vec::new();
                }
                module
            });
            (key, fetched)
        })
        .collect()
        .await
}
