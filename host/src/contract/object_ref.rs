//! References to objects and kinds.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifies one Kubernetes object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
    /// The namespace; `None` for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The kind of the referenced object.
    pub fn kind_ref(&self) -> KindRef {
        KindRef::new(&self.api_version, &self.kind)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.key())
    }
}

/// A kind of object: `apiVersion` + `kind`, for example `apps/v1` + `Deployment`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
}

impl KindRef {
    /// A kind from its apiVersion and kind name.
    pub fn new(api_version: &str, kind: &str) -> Self {
        KindRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// apps/v1 Deployment, the kind plugins reconcile unless they say otherwise.
    pub fn deployment() -> Self {
        KindRef::new("apps/v1", "Deployment")
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }

    /// The API version without the group.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// Where a kind's objects live, as discovery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// In a namespace: references and manifests name one.
    Namespaced,
    /// In the cluster (Namespace, ClusterRole, Node…): references and manifests name none.
    Cluster,
}

impl Scope {
    /// The scope of a kind discovery reports as `namespaced` or not.
    pub fn from_namespaced(namespaced: bool) -> Self {
        if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        }
    }

    /// `namespaced` or `cluster-scoped`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "namespaced",
            Scope::Cluster => "cluster-scoped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_group_and_version() {
        let d = KindRef::deployment();
        assert_eq!((d.group(), d.version()), ("apps", "v1"));
        let pod = KindRef::new("v1", "Pod");
        assert_eq!((pod.group(), pod.version()), ("", "v1"));
    }

    #[test]
    fn keys_name_namespaced_and_cluster_objects() {
        let mut r = ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ns".into()),
            name: "p".into(),
        };
        assert_eq!(r.key(), "ns/p");
        r.namespace = None;
        assert_eq!(r.key(), "p");
    }
}
