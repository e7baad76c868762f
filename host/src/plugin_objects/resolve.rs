//! The resolve step of a pass: one Plugin's spec to a revision that can run (its module
//! fetched or pulled, pinned, compiled in its namespace's turn, granted by the PluginPolicies
//! that apply and bound to its ServiceAccount), or the refusal that says why not.

use super::compiles::{Compiles, Progress};
use super::grant::effective;
use super::module::{COMPILE_BURST, ConfigMapModule, ImageModule, ModuleRef, fetch};
use super::pass_state::{Good, ObjectOrigin, Resolved, State};
use super::prefetch::{Prefetched, known, reusable};
use super::refusal::{Reason, Refusal};
use super::service_account;
use super::source::{Inner, PluginObjects, load_refusal, lock};
use super::spec::{ClusterPolicySpec, GROUP, PluginObjectSpec, parse_spec};
use crate::controller::InstanceName;
use crate::plugin::{CallError, LoadError, Plugin};
use crate::policy::Policy;
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

impl PluginObjects {
    /// Resolves one Plugin: spec, module, compile, grant, policy.
    pub(super) async fn resolve(
        &self,
        state: &mut State,
        obj: &DynamicObject,
        instance: &InstanceName,
        applying: &[(&str, &ClusterPolicySpec)],
        referenced: &mut Referenced,
        prefetched: &mut Prefetched,
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
                let plugin = self
                    .config_map_module(state, obj, &at, pin, prefetched)
                    .await?;
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
    pub(super) async fn config_map_module(
        &self,
        state: &mut State,
        obj: &DynamicObject,
        at: &ConfigMapModule,
        pin: Option<String>,
        prefetched: &mut Prefetched,
    ) -> Result<Arc<Plugin>, Refusal> {
        let inner = &*self.inner;
        let ns = &at.namespace;
        let seen = lock(&inner.config_maps)
            .get(&(at.namespace.clone(), at.config_map.clone()))
            .cloned();
        let key = (at.clone(), pin.clone());
        if !reusable(inner, state, &key) {
            let fetched = match prefetched.remove(&key) {
                // Fetched ahead while its code was at hand, which it no longer is: its bytes
                // are needed after all.
                Some(Ok(m)) if m.bytes.is_empty() && !known(inner, state, &m.digest) => None,
                ahead => ahead,
            };
            let fetched = match fetched {
                Some(fetched) => fetched,
                None => {
                    let max = inner.config.max_module_bytes;
                    fetch(&inner.client, at, pin.as_deref(), max).await
                }
            };
            let digest = match fetched {
                Ok(module) => {
                    let digest = module.digest.clone();
                    if !known(inner, state, &digest) {
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
    pub(super) fn take_compile(&self, state: &mut State, ns: &str) -> Result<(), Refusal> {
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
}

/// The previous revision `good` under the policies that apply now (a policy that no longer
/// grants its request stops it), as its ServiceAccount (whose rights it must still have).
pub(super) async fn regrant(
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
pub(super) async fn as_service_account(
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
        &granted.document.spec.grants.namespaces.names,
    )
    .await?;
    let digest = format!("{}/{}", granted.digest, principal.name());
    policy.principal = Some(principal);
    Ok((policy, digest))
}

/// What the Plugins of a pass name: ConfigMaps (their changes wake a pass) and images
/// (followed while named).
#[derive(Default)]
pub(super) struct Referenced {
    pub(super) config_maps: HashSet<(String, String)>,
    pub(super) images: HashSet<ImageModule>,
}

/// The compiled module of `digest`, or why it did not compile, or where its compile is.
pub(super) fn compiled(
    state: &mut State,
    compiles: &Compiles,
    digest: &str,
) -> Result<Arc<Plugin>, Refusal> {
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
pub(super) fn take_compiled(state: &mut State, compiles: &Compiles) {
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
pub(super) fn load_is_transient(err: &LoadError) -> bool {
    matches!(
        err,
        LoadError::Metadata {
            source: CallError::Instantiate { .. },
            ..
        }
    )
}
