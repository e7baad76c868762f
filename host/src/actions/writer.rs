//! The API server as the action pipeline sees it: a kind's scope, and one write request.
//! [`KubeWriter`] is the real one (discovery and kube's dynamic API); tests put a fake that
//! records requests and answers from a script behind the same trait, so the worker loop
//! can run under paused time without a network.

use super::target::{RequestTarget, Resource, TargetError, path_segment};
use crate::cluster::{KindRegistry, Principal, ResolveError};
use crate::contract::{KindRef, Scope};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One write, with what it carries, ready for the API server. Its URL comes from the
/// [`RequestTarget`] it is sent with.
#[derive(Debug, Clone)]
pub enum ApiRequest {
    /// A patch of the target (or its subresource) as `params.field_manager`.
    Patch {
        /// The field manager (and `force` for server-side apply).
        params: PatchParams,
        /// The body, in the plugin's patch type.
        patch: Patch<Value>,
    },
    /// A POST of `object` to the target's collection.
    Create {
        /// The field manager.
        params: PostParams,
        /// The plugin's manifest.
        object: Box<DynamicObject>,
    },
    /// A delete of the target (background propagation; a resourceVersion precondition
    /// when [fenced](super::fence)).
    Delete {
        /// Propagation and preconditions.
        params: DeleteParams,
    },
    /// A POST of an Event to the target namespace's `events.k8s.io/v1` collection.
    Event(Box<Event>),
}

/// Why a request failed before or at the API server.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server answered with an error, or the transport failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// A path segment of the request is not safe to send.
    #[error("refused before sending: {0}")]
    Target(#[from] TargetError),
    /// The request does not fit its target (an Event to a kind's collection, say).
    #[error("refused before sending: the request does not match its target")]
    Mismatch,
}

/// What the API server's answer to a write said of its object (nothing for a delete or an
/// Event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// The object's name: a create with `generateName` learns it only here.
    pub name: Option<String>,
    /// The object's resourceVersion after the write.
    pub resource_version: Option<String>,
}

/// Where the pipeline's writes go. Implementations must send exactly the request given to
/// exactly the target given: the policy checked that target.
pub trait ApiWriter: Send + Sync + 'static {
    /// The scope of `kind` (cluster or namespaced), from discovery.
    fn scope<'a>(&'a self, kind: &'a KindRef) -> BoxFuture<'a, Result<Scope, ResolveError>>;

    /// Sends `request` to `target`, as `principal` when given (impersonated, so the API
    /// server bounds it by that principal's rights) or else as the host; the object's name
    /// and resourceVersion when the answer carries the object (a patch or a create).
    fn send<'a>(
        &'a self,
        target: &'a RequestTarget,
        request: ApiRequest,
        principal: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<Written, WriteError>>;
}

/// Impersonating clients kept at most (one per principal that wrote lately); past it they
/// are made again (each shares the host's connections, so making one is cheap).
const MAX_PRINCIPAL_CLIENTS: usize = 4096;

/// The API server behind a [`KindRegistry`] (its discovery cache and client).
pub struct KubeWriter {
    kinds: Arc<KindRegistry>,
    /// A client per principal writes were sent as.
    as_principal: Mutex<HashMap<Principal, kube::Client>>,
}

impl KubeWriter {
    /// Writes through `kinds`' client, resolving kinds with its discovery cache.
    pub fn new(kinds: Arc<KindRegistry>) -> Self {
        KubeWriter {
            kinds,
            as_principal: Mutex::default(),
        }
    }

    /// The client that sends as `principal` (impersonating it), or as the host.
    fn client(&self, principal: Option<&Principal>) -> kube::Client {
        let Some(principal) = principal else {
            return self.kinds.client().clone();
        };
        let mut clients = self.as_principal.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(principal) {
            return client.clone();
        }
        if clients.len() >= MAX_PRINCIPAL_CLIENTS {
            clients.clear();
        }
        let client = principal.impersonating(self.kinds.client());
        clients.insert(principal.clone(), client.clone());
        client
    }

    /// The API of `target`'s collection: namespaced exactly when the target names a
    /// namespace (the scope was checked when the target was made), the namespace escaped.
    async fn api(
        &self,
        target: &RequestTarget,
        client: kube::Client,
    ) -> Result<Api<DynamicObject>, WriteError> {
        let Resource::Kind(kind) = &target.resource else {
            return Err(WriteError::Mismatch);
        };
        self.api_of(kind, target.namespace.as_deref(), client).await
    }

    /// The API of `kind`'s collection, in `namespace` when given (escaped).
    async fn api_of(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        client: kube::Client,
    ) -> Result<Api<DynamicObject>, WriteError> {
        let resource = self.kinds.resolve(kind).await?.resource;
        Ok(match namespace {
            Some(ns) => Api::namespaced_with(client, &path_segment(ns)?, &resource),
            None => Api::all_with(client, &resource),
        })
    }

    /// The uid of the object an Event is about, or `None` when it cannot be read (gone,
    /// not allowed, a kind discovery does not know): `kubectl describe` finds an object's
    /// Events by `involvedObject.uid`, so an Event without it is listed by `kubectl get
    /// events` but missing from `describe`. One GET per Event: the writer has no cache.
    async fn uid_of(&self, regarding: &ObjectReference, client: kube::Client) -> Option<String> {
        let kind = KindRef::new(
            regarding.api_version.as_deref()?,
            regarding.kind.as_deref()?,
        );
        let api = self
            .api_of(&kind, regarding.namespace.as_deref(), client)
            .await
            .ok()?;
        let name = path_segment(regarding.name.as_deref()?).ok()?;
        match api.get_opt(&name).await {
            Ok(object) => object?.metadata.uid,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the uid of an Event's object");
                None
            }
        }
    }

    async fn write(
        &self,
        target: &RequestTarget,
        request: ApiRequest,
        principal: Option<&Principal>,
    ) -> Result<Written, WriteError> {
        let client = self.client(principal);
        // The object name as one escaped path segment (kube does not escape it).
        let name = path_segment(target.name.as_deref().unwrap_or_default());
        let rv = |o: DynamicObject| Written {
            name: o.metadata.name,
            resource_version: o.metadata.resource_version,
        };
        match request {
            ApiRequest::Patch { params, patch } => {
                let api = self.api(target, client).await?;
                let name = name?;
                let sub = target
                    .subresource
                    .as_deref()
                    .map(path_segment)
                    .transpose()?;
                let result = match sub.as_deref() {
                    Some(sub) => api.patch_subresource(sub, &name, &params, &patch).await,
                    None => api.patch(&name, &params, &patch).await,
                };
                Ok(result.map(rv)?)
            }
            ApiRequest::Create { params, object } => {
                let api = self.api(target, client).await?;
                Ok(api.create(&params, &object).await.map(rv)?)
            }
            ApiRequest::Delete { params } => {
                let api = self.api(target, client).await?;
                api.delete(&name?, &params).await?;
                Ok(Written::default())
            }
            ApiRequest::Event(mut event) => {
                if target.resource != Resource::Events {
                    return Err(WriteError::Mismatch);
                }
                let ns = target.namespace.as_deref().ok_or(WriteError::Mismatch)?;
                if let Some(regarding) = event.regarding.as_mut().filter(|r| r.uid.is_none()) {
                    regarding.uid = self.uid_of(regarding, client.clone()).await;
                }
                let api: Api<Event> = Api::namespaced(client, &path_segment(ns)?);
                api.create(&PostParams::default(), &event).await?;
                Ok(Written::default())
            }
        }
    }
}

impl ApiWriter for KubeWriter {
    fn scope<'a>(&'a self, kind: &'a KindRef) -> BoxFuture<'a, Result<Scope, ResolveError>> {
        Box::pin(self.kinds.scope(kind))
    }

    fn send<'a>(
        &'a self,
        target: &'a RequestTarget,
        request: ApiRequest,
        principal: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<Written, WriteError>> {
        Box::pin(self.write(target, request, principal))
    }
}
