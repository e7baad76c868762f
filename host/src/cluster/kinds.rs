//! Resolving a kind (apiVersion + kind) to its REST resource through API discovery, once.

use crate::contract::KindRef;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use std::collections::HashMap;
use std::sync::Mutex;

/// A kind the API server serves: its resource (plural, group, version) and scope.
#[derive(Debug, Clone)]
pub struct ResolvedKind {
    pub kind: KindRef,
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Remembers resolved kinds, so discovery runs once per kind.
pub struct KindRegistry {
    client: kube::Client,
    known: Mutex<HashMap<KindRef, ResolvedKind>>,
}

impl KindRegistry {
    /// A registry asking `client`'s API server.
    pub fn new(client: kube::Client) -> Self {
        KindRegistry {
            client,
            known: Mutex::default(),
        }
    }

    /// The resource serving `kind`, from discovery the first time.
    pub async fn resolve(&self, kind: &KindRef) -> Result<ResolvedKind, kube::Error> {
        if let Some(k) = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
        {
            return Ok(k.clone());
        }
        let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let resolved = ResolvedKind {
            kind: kind.clone(),
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kind.clone(), resolved.clone());
        Ok(resolved)
    }

    /// The client this registry uses.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}
