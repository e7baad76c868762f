//! Resolving a kind (apiVersion + kind) to its REST resource through API discovery, once.

use crate::contract::text::shown;
use crate::contract::{KindRef, Scope, names};
use kube::core::{ApiResource, GroupVersionKind};
use kube::error::DiscoveryError;
use std::collections::HashMap;
use std::sync::Mutex;

/// A kind the API server serves: its resource (plural, group, version) and scope.
#[derive(Debug, Clone)]
pub struct ResolvedKind {
    /// The kind asked for.
    pub kind: KindRef,
    /// Where the API serves it (plural, group, version).
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Why a kind has no scope.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The API server does not serve it (or it is not a kind name at all): the action is
    /// invalid.
    #[error("{kind} is not served by the API server: {source}")]
    Unknown {
        /// The kind, as `apiVersion/kind`.
        kind: String,
        /// Discovery's answer.
        #[source]
        source: kube::Error,
    },
    /// Discovery failed (network, server error): worth retrying.
    #[error("cannot look {kind} up: {source}")]
    Unavailable {
        /// The kind, as `apiVersion/kind`.
        kind: String,
        /// Why discovery failed.
        #[source]
        source: kube::Error,
    },
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

    /// The resource serving `kind`, from discovery the first time. A kind whose apiVersion
    /// or name is not Kubernetes-shaped is refused before any request: the apiVersion names
    /// a discovery URL.
    pub async fn resolve(&self, kind: &KindRef) -> Result<ResolvedKind, kube::Error> {
        if let Some(k) = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
        {
            return Ok(k.clone());
        }
        if let Err(why) = names::api_version(&kind.api_version).and(names::kind(&kind.kind)) {
            return Err(kube::Error::Discovery(DiscoveryError::InvalidGroupVersion(
                why.to_string(),
            )));
        }
        let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let resolved = ResolvedKind {
            kind: kind.clone(),
            resource,
            namespaced: caps.scope == kube::discovery::Scope::Namespaced,
        };
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kind.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Whether `kind` is namespaced or cluster-scoped, from discovery the first time.
    pub async fn scope(&self, kind: &KindRef) -> Result<Scope, ResolveError> {
        match self.resolve(kind).await {
            Ok(k) => Ok(Scope::from_namespaced(k.namespaced)),
            Err(source) => {
                let kind = shown(&kind.to_string()).to_string();
                Err(match &source {
                    kube::Error::Discovery(_) => ResolveError::Unknown { kind, source },
                    kube::Error::Api(e) if e.code == 404 => ResolveError::Unknown { kind, source },
                    _ => ResolveError::Unavailable { kind, source },
                })
            }
        }
    }

    /// The client this registry uses.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry whose API server address refuses connections: any request it made would
    /// fail as a transport error, not as the validation error.
    fn unreachable() -> KindRegistry {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        KindRegistry::new(kube::Client::try_from(config).unwrap())
    }

    #[tokio::test]
    async fn plugin_chosen_api_versions_never_reach_a_discovery_url() {
        let kinds = unreachable();
        for (api_version, kind) in [
            ("../../api/v1/namespaces/x", "Pod"),
            ("apps/v1?watch=1", "Deployment"),
            ("apps/v1", "Deploy/ment"),
            ("", "Pod"),
        ] {
            let err = kinds
                .resolve(&KindRef::new(api_version, kind))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    kube::Error::Discovery(DiscoveryError::InvalidGroupVersion(_))
                ),
                "{api_version} {kind}: {err}"
            );
            let scope = kinds.scope(&KindRef::new(api_version, kind)).await;
            assert!(
                matches!(scope, Err(ResolveError::Unknown { .. })),
                "{scope:?}"
            );
        }
        // A well-formed kind is looked up (and here fails as unavailable, to be retried).
        let scope = kinds.scope(&KindRef::new("apps/v1", "Deployment")).await;
        assert!(
            matches!(scope, Err(ResolveError::Unavailable { .. })),
            "{scope:?}"
        );
    }
}
