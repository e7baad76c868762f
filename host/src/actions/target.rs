//! Where an action's API request goes, computed without a network: the executor sends each
//! action to exactly the target this module gives, so that what the policy checker allowed
//! and what the executor touches can be compared (and are, in the property test).

use crate::contract::{Action, KindRef, ObjectRef, Scope, names};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject};
use kube::core::Resource as _;
use serde_json::Value;
use std::borrow::Cow;

/// Events about cluster-scoped objects go to this namespace, as Kubernetes' own
/// controllers do (a Node's or a Namespace's events are in `default`). The cluster-scope
/// grant covers them.
pub const CLUSTER_EVENT_NAMESPACE: &str = "default";

/// The HTTP method of an action's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A patch (any patch type).
    Patch,
    /// A create (of an object or an Event).
    Post,
    /// A delete.
    Delete,
}

/// Which collection the request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// The action's own kind.
    Kind(KindRef),
    /// `events.k8s.io/v1` Events (an event action).
    Events,
}

/// One action's request: method, namespace path segment, collection, object name and
/// subresource, each of them as it goes into the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTarget {
    /// What the request does.
    pub method: Method,
    /// `None`: the cluster-scoped path (no `namespaces/<ns>/`).
    pub namespace: Option<String>,
    /// The collection.
    pub resource: Resource,
    /// `None` for a create (a POST to the collection).
    pub name: Option<String>,
    /// A patch's subresource (`status`, `scale`).
    pub subresource: Option<String>,
}

/// Why an action has no request target. The validator and the policy checker refuse every
/// such action before the executor sees it; the executor checks again rather than guess.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A namespace on an object of a cluster-scoped kind: never silently dropped.
    #[error("{kind} is cluster-scoped but the action names a namespace")]
    NamespaceOnClusterScoped {
        /// The kind (shown escaped).
        kind: String,
    },
    /// No namespace on an object of a namespaced kind: never invented.
    #[error("{kind} is namespaced but the action names no namespace")]
    NoNamespace {
        /// The kind (shown escaped).
        kind: String,
    },
    /// A name, namespace or subresource that cannot be one URL path segment.
    #[error("unsafe URL path segment {segment}: {reason}")]
    UnsafeSegment {
        /// Which segment (or its debug form).
        segment: String,
        /// Why it is refused.
        reason: String,
    },
}

/// The request `action` on a kind of `scope` resolves to; `None` for logs and requeues.
pub fn request_target(action: &Action, scope: Scope) -> Result<Option<RequestTarget>, TargetError> {
    let target = match action {
        Action::Log { .. } | Action::RequeueAfter { .. } => return Ok(None),
        Action::Patch {
            target,
            subresource,
            ..
        } => {
            let sub = subresource
                .as_deref()
                .map(|s| names::subresource(s).map(|()| s.to_string()))
                .transpose()
                .map_err(|reason| unsafe_segment("subresource", reason.to_string()))?;
            RequestTarget {
                method: Method::Patch,
                namespace: namespace_for(target, scope)?,
                resource: Resource::Kind(target.kind_ref()),
                name: Some(target.name.clone()),
                subresource: sub,
            }
        }
        Action::Delete { target } => RequestTarget {
            method: Method::Delete,
            namespace: namespace_for(target, scope)?,
            resource: Resource::Kind(target.kind_ref()),
            name: Some(target.name.clone()),
            subresource: None,
        },
        Action::Create { manifest } => {
            let target = manifest_ref(manifest);
            RequestTarget {
                method: Method::Post,
                namespace: namespace_for(&target, scope)?,
                resource: Resource::Kind(target.kind_ref()),
                name: None,
                subresource: None,
            }
        }
        Action::Event { regarding, .. } => {
            let ns = namespace_for(regarding, scope)?;
            RequestTarget {
                method: Method::Post,
                namespace: Some(ns.unwrap_or_else(|| CLUSTER_EVENT_NAMESPACE.to_string())),
                resource: Resource::Events,
                name: None,
                subresource: None,
            }
        }
    };
    for segment in [&target.namespace, &target.name, &target.subresource]
        .into_iter()
        .flatten()
    {
        path_segment(segment)?;
    }
    Ok(Some(target))
}

impl RequestTarget {
    /// The URL path of this request for `resource` (the kind's, from discovery), built as
    /// kube's `Api` builds it from the same parts: `<collection>[/<name>[/<subresource>]]`.
    pub fn path(&self, resource: &ApiResource) -> Result<String, TargetError> {
        let namespace = self.namespace.as_deref().map(path_segment).transpose()?;
        let mut path = match self.resource {
            Resource::Kind(_) => DynamicObject::url_path(resource, namespace.as_deref()),
            Resource::Events => Event::url_path(&(), namespace.as_deref()),
        };
        for segment in [&self.name, &self.subresource].into_iter().flatten() {
            path.push('/');
            path.push_str(&path_segment(segment)?);
        }
        Ok(path)
    }
}

fn unsafe_segment(what: &str, reason: String) -> TargetError {
    TargetError::UnsafeSegment {
        segment: what.to_string(),
        reason,
    }
}

/// The namespace path segment of an object of a kind of `scope`.
fn namespace_for(target: &ObjectRef, scope: Scope) -> Result<Option<String>, TargetError> {
    let kind = || crate::contract::text::shown(&target.kind_ref().to_string()).to_string();
    match (scope, &target.namespace) {
        (Scope::Namespaced, Some(ns)) => Ok(Some(ns.clone())),
        (Scope::Namespaced, None) => Err(TargetError::NoNamespace { kind: kind() }),
        (Scope::Cluster, None) => Ok(None),
        (Scope::Cluster, Some(_)) => Err(TargetError::NamespaceOnClusterScoped { kind: kind() }),
    }
}

/// The object a manifest describes (name empty for a generateName).
pub(crate) fn manifest_ref(manifest: &Value) -> ObjectRef {
    let at = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    ObjectRef {
        api_version: at("/apiVersion"),
        kind: at("/kind"),
        namespace: manifest
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string),
        name: at("/metadata/name"),
    }
}

/// `segment` as one URL path segment: kube's `Api` puts names, namespaces and subresources
/// into the path as they are (kube-core 5 `Request` formats `{path}/{name}/{subresource}`
/// without escaping), so this is the last guard. Empty, `.` and `..` are refused (no
/// escaping makes them safe); every byte outside RFC 3986's unreserved set and `:`/`@` is
/// percent-encoded. For names the validator accepted this is the identity.
pub fn path_segment(segment: &str) -> Result<Cow<'_, str>, TargetError> {
    if segment.is_empty() || segment == "." || segment == ".." {
        return Err(unsafe_segment(
            &format!("{:?}", segment),
            "empty, `.` and `..` are not names".into(),
        ));
    }
    let keep =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':' | b'@');
    if segment.bytes().all(keep) {
        return Ok(Cow::Borrowed(segment));
    }
    let mut out = String::with_capacity(segment.len() * 3);
    for b in segment.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{EventType, PatchType};
    use serde_json::json;

    fn r(namespace: Option<&str>, kind: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: "demo".into(),
        }
    }

    #[test]
    fn the_namespace_segment_follows_the_scope() {
        let delete = |ns, kind| Action::Delete {
            target: r(ns, kind),
        };
        let t = request_target(&delete(Some("team-a"), "ConfigMap"), Scope::Namespaced)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.method, t.namespace.as_deref(), t.name.as_deref()),
            (Method::Delete, Some("team-a"), Some("demo"))
        );
        let t = request_target(&delete(None, "Namespace"), Scope::Cluster)
            .unwrap()
            .unwrap();
        assert_eq!(t.namespace, None);
        // The bypass: never silently drop a namespace, never invent one.
        assert!(matches!(
            request_target(&delete(Some("team-a"), "Namespace"), Scope::Cluster),
            Err(TargetError::NamespaceOnClusterScoped { .. })
        ));
        assert!(matches!(
            request_target(&delete(None, "ConfigMap"), Scope::Namespaced),
            Err(TargetError::NoNamespace { .. })
        ));
    }

    #[test]
    fn events_about_cluster_scoped_objects_go_to_default() {
        let event = |ns| Action::Event {
            regarding: r(ns, "Namespace"),
            event_type: EventType::Normal,
            reason: "R".into(),
            message: "m".into(),
            event_action: "Reconcile".into(),
        };
        let t = request_target(&event(None), Scope::Cluster)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.resource, t.namespace.as_deref()),
            (Resource::Events, Some(CLUSTER_EVENT_NAMESPACE))
        );
        assert!(request_target(&event(Some("team-a")), Scope::Cluster).is_err());
    }

    #[test]
    fn hostile_segments_never_resolve() {
        for bad in [
            "x?fieldManager=kube-controller-manager&a=",
            "x/../../../demo/deployments/web",
        ] {
            let patch = Action::Patch {
                target: r(Some("team-a"), "ConfigMap"),
                patch_type: PatchType::Merge,
                subresource: Some(bad.into()),
                body: json!({}),
            };
            assert!(request_target(&patch, Scope::Namespaced).is_err(), "{bad}");
            let mut target = r(Some("team-a"), "ConfigMap");
            target.name = bad.into();
            let t = request_target(&Action::Delete { target }, Scope::Namespaced)
                .unwrap()
                .unwrap();
            let encoded = path_segment(t.name.as_deref().unwrap()).unwrap();
            assert!(!encoded.contains(['/', '?', '&', '#']), "{encoded}");
        }
        for bad in ["", ".", ".."] {
            assert!(path_segment(bad).is_err(), "{bad:?}");
        }
        assert_eq!(path_segment("web-1.a").unwrap(), "web-1.a");
        assert_eq!(path_segment("a b%").unwrap(), "a%20b%25");
    }
}
