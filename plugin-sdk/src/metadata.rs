//! The plugin's description of itself.

use crate::{KindRef, Metadata};

impl Metadata {
    /// A plugin that reconciles apps/v1 Deployments, owns nothing and does not need the
    /// previous version of objects; refine it with the builder methods.
    pub fn new(name: &str, version: &str) -> Self {
        Metadata {
            name: name.to_string(),
            version: version.to_string(),
            reconciles: KindRef::new("apps/v1", "Deployment"),
            owns: Vec::new(),
            wants_previous: false,
        }
    }

    /// Reconcile kind `K` instead of Deployments.
    pub fn reconciles<K: k8s_openapi::Resource>(self) -> Self {
        self.reconciles_kind(KindRef::of::<K>())
    }

    /// Reconcile a kind given by name (for custom kinds).
    pub fn reconciles_kind(mut self, kind: KindRef) -> Self {
        self.reconciles = kind;
        self
    }

    /// Also watch kind `K`: a change to one of its objects enqueues its controller owner.
    pub fn owns<K: k8s_openapi::Resource>(self) -> Self {
        self.owns_kind(KindRef::of::<K>())
    }

    /// Own a kind given by name (for custom kinds).
    pub fn owns_kind(mut self, kind: KindRef) -> Self {
        self.owns.push(kind);
        self
    }

    /// Ask the host to send the last successfully reconciled version with every request.
    pub fn wants_previous(mut self) -> Self {
        self.wants_previous = true;
        self
    }
}
