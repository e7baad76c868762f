//! What a request asks to do, in the terms authorization speaks (the real server's
//! `authorizer.Attributes`): a verb on a resource (group, resource, subresource, namespace,
//! name) or on a non-resource path; and the 403 a denial answers, worded as the real
//! server's.

use super::errors::ApiError;
use serde_json::json;

/// One authorization question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A verb on an API resource.
    Resource(ResourceAttributes),
    /// A verb (the lower-cased HTTP method) on a path outside the resource API.
    NonResource {
        /// `get`, `post`, ...
        verb: String,
        /// The request path.
        path: String,
    },
}

/// A verb on an API resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `impersonate`, ...
    pub verb: String,
    /// API group (empty for the core group).
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource (empty for none).
    pub subresource: String,
    /// Namespace (empty at the cluster scope).
    pub namespace: String,
    /// Object name (empty for list, watch, create and collections).
    pub name: String,
}

impl Attributes {
    /// The verb asked.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource { verb, .. } => verb,
        }
    }

    /// The real server's 403 for `user` denied this: `secrets is forbidden: User "u" cannot
    /// list resource "secrets" in API group "" in the namespace "t1"`, with `reason` (what the
    /// authorizer said, often nothing) after a colon.
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let (message, details) = match self {
            Attributes::NonResource { verb, path } => (
                format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
                json!({}),
            ),
            Attributes::Resource(r) => {
                let resource = if r.subresource.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}/{}", r.resource, r.subresource)
                };
                let scope = if r.namespace.is_empty() {
                    "at the cluster scope".to_string()
                } else {
                    format!("in the namespace {:?}", r.namespace)
                };
                let what = format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
                    r.verb, r.group
                );
                let qualified = if r.group.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}.{}", r.resource, r.group)
                };
                let message = if r.name.is_empty() {
                    format!("{qualified} is forbidden: {what}")
                } else {
                    format!("{qualified} {:?} is forbidden: {what}", r.name)
                };
                let mut details = json!({"group": r.group, "kind": r.resource});
                if !r.name.is_empty() {
                    details["name"] = json!(r.name);
                }
                (message, details)
            }
        };
        let message = if reason.is_empty() {
            message
        } else {
            format!("{message}: {reason}")
        };
        ApiError::new(403, "Forbidden", message).with_details(details)
    }
}

/// The verb of a resource request, as the real server's request-info factory derives it:
/// GET of a name is `get`, of a collection `list`, or `watch` with `watch=true|1`; POST
/// `create`; PUT `update`; PATCH `patch`; DELETE of a name `delete`, of a collection
/// `deletecollection`.
pub fn resource_verb(method: &str, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) if watch => "watch",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

/// The name a list or watch with `fieldSelector=metadata.name=N` is authorised for (the real
/// server does the same, so a grant with `resourceNames` allows watching that one object).
pub fn name_from_field_selector(selector: &str) -> Option<String> {
    let mut name = None;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(f, _)| !f.ends_with('!'))?;
        if field.trim() == "metadata.name" {
            name = Some(value.trim().to_string());
        }
    }
    name.filter(|n| !n.is_empty() && !n.contains('/') && n != "." && n != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_read_as_the_real_servers() {
        let attrs = Attributes::Resource(ResourceAttributes {
            verb: "patch".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "t1".into(),
            name: "web".into(),
            ..ResourceAttributes::default()
        });
        let err = attrs.forbidden("system:serviceaccount:t1:default", "");
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            r#"deployments.apps "web" is forbidden: User "system:serviceaccount:t1:default" cannot patch resource "deployments" in API group "apps" in the namespace "t1""#
        );
        let list = Attributes::Resource(ResourceAttributes {
            verb: "list".into(),
            resource: "namespaces".into(),
            ..ResourceAttributes::default()
        });
        assert_eq!(
            list.forbidden("bob", "").message,
            r#"namespaces is forbidden: User "bob" cannot list resource "namespaces" in API group "" at the cluster scope"#
        );
        let path = Attributes::NonResource {
            verb: "get".into(),
            path: "/sim/faults".into(),
        };
        assert_eq!(
            path.forbidden("bob", "").message,
            r#"forbidden: User "bob" cannot get path "/sim/faults""#
        );
    }

    #[test]
    fn verbs_and_field_selector_names() {
        assert_eq!(resource_verb("GET", false, true), "watch");
        assert_eq!(resource_verb("GET", false, false), "list");
        assert_eq!(resource_verb("GET", true, false), "get");
        assert_eq!(resource_verb("DELETE", false, false), "deletecollection");
        assert_eq!(
            name_from_field_selector("metadata.name=web"),
            Some("web".into())
        );
        assert_eq!(name_from_field_selector("metadata.name!=web"), None);
        assert_eq!(name_from_field_selector("status.phase=Running"), None);
    }
}
