//! The review APIs, answered and never stored, as the real server's: `SubjectAccessReview`
//! and `LocalSubjectAccessReview` (may this user do this?), `SelfSubjectAccessReview` (may I?
//! `kubectl auth can-i`), `SelfSubjectRulesReview` (what may I do here? `kubectl auth can-i
//! --list`) in `authorization.k8s.io/v1`, and `SelfSubjectReview` (who am I? `kubectl auth
//! whoami`) in `authentication.k8s.io/v1`.
//!
//! A review body comes from a client: its user, UID, group and extra strings are bounded as
//! impersonation's headers are ([`MAX_VALUE_LEN`] bytes each, at most [`MAX_GROUPS`] groups,
//! [`MAX_EXTRA_VALUES`] extra values); over a bound is a 400.

use super::attributes::{Attributes, ResourceAttributes};
use super::authn::UserInfo;
use super::errors::ApiError;
use super::impersonation::{MAX_EXTRA_VALUES, MAX_GROUPS, MAX_VALUE_LEN};
use super::rbac;
use super::store::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One review resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Review {
    /// API group.
    pub group: &'static str,
    /// Resource plural.
    pub plural: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether it is addressed in a namespace.
    pub namespaced: bool,
}

/// The review resources served (all version `v1`, verb `create` only).
pub const REVIEWS: [Review; 5] = [
    Review {
        group: "authorization.k8s.io",
        plural: "subjectaccessreviews",
        kind: "SubjectAccessReview",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        plural: "selfsubjectaccessreviews",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        plural: "selfsubjectrulesreviews",
        kind: "SelfSubjectRulesReview",
        namespaced: false,
    },
    Review {
        group: "authorization.k8s.io",
        plural: "localsubjectaccessreviews",
        kind: "LocalSubjectAccessReview",
        namespaced: true,
    },
    Review {
        group: "authentication.k8s.io",
        plural: "selfsubjectreviews",
        kind: "SelfSubjectReview",
        namespaced: false,
    },
];

/// The review served at `group`/`v1`/`plural`, if any.
pub fn find(group: &str, version: &str, plural: &str) -> Option<Review> {
    (version == "v1")
        .then(|| {
            REVIEWS
                .into_iter()
                .find(|r| r.group == group && r.plural == plural)
        })
        .flatten()
}

/// How the server answers an access question: by RBAC, or (authorization off) allowing all.
pub trait Authorizer {
    /// Whether `user` may do `attrs`.
    fn decide(&self, user: &UserInfo, attrs: &Attributes) -> rbac::Decision;
    /// The rules that apply to `user` in `namespace` (for the rules review).
    fn rules(&self, user: &UserInfo, namespace: &str) -> Vec<Value>;
}

/// RBAC over a store.
pub struct Rbac<'a>(pub &'a Store);

impl Authorizer for Rbac<'_> {
    fn decide(&self, user: &UserInfo, attrs: &Attributes) -> rbac::Decision {
        rbac::authorize(self.0, user, attrs)
    }
    fn rules(&self, user: &UserInfo, namespace: &str) -> Vec<Value> {
        if user.in_group(super::authn::MASTERS) {
            return vec![
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
            ];
        }
        rbac::rules_for(self.0, user, namespace)
    }
}

/// Authorization off: everything is allowed.
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn decide(&self, _: &UserInfo, _: &Attributes) -> rbac::Decision {
        rbac::Decision {
            allowed: true,
            reason: String::new(),
        }
    }
    fn rules(&self, _: &UserInfo, _: &str) -> Vec<Value> {
        vec![
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
            json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
        ]
    }
}

/// Answers a review `body` POSTed by `caller` to `review` (in `namespace` for the local one):
/// the object with its `status` filled in.
pub fn answer(
    review: Review,
    namespace: Option<&str>,
    caller: &UserInfo,
    body: Value,
    authorizer: &dyn Authorizer,
) -> Result<Value, ApiError> {
    let type_ok = body["kind"].as_str().is_none_or(|k| k == review.kind)
        && body["apiVersion"]
            .as_str()
            .is_none_or(|v| v == format!("{}/v1", review.group));
    if !type_ok {
        return Err(ApiError::bad_request(format!(
            "the body is a {} {}, not a {}",
            body["apiVersion"].as_str().unwrap_or_default(),
            body["kind"].as_str().unwrap_or_default(),
            review.kind
        )));
    }
    let mut spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec.is_object() {
        return Err(ApiError::bad_request("spec must be an object"));
    }
    let status = match review.kind {
        "SelfSubjectReview" => {
            spec = Value::Null;
            json!({"userInfo": user_info_json(caller)})
        }
        "SelfSubjectRulesReview" => {
            let ns = bounded_str(&spec, "namespace")?;
            rules_status(&authorizer.rules(caller, &ns))
        }
        "SelfSubjectAccessReview" => {
            let attrs = attributes(&spec, review.kind)?;
            decision_status(&authorizer.decide(caller, &attrs))
        }
        _ => {
            let user = subject(&spec, review.kind)?;
            let attrs = attributes(&spec, review.kind)?;
            if let (Some(ns), Attributes::Resource(r)) = (namespace, &attrs)
                && r.namespace != ns
            {
                return Err(invalid(
                    review.kind,
                    &format!(
                        "spec.resourceAttributes.namespace: Invalid value: {:?}: must match metadata.namespace",
                        r.namespace
                    ),
                ));
            }
            decision_status(&authorizer.decide(&user, &attrs))
        }
    };
    let mut metadata = json!({"creationTimestamp": null});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    let mut out = json!({
        "kind": review.kind,
        "apiVersion": format!("{}/v1", review.group),
        "metadata": metadata,
        "status": status,
    });
    if !spec.is_null() {
        out["spec"] = spec;
    }
    Ok(out)
}

fn invalid(kind: &str, message: &str) -> ApiError {
    let group = if kind == "SelfSubjectReview" {
        "authentication.k8s.io"
    } else {
        "authorization.k8s.io"
    };
    ApiError::invalid(format!("{kind}.{group} \"\" is invalid: {message}"))
}

fn bounded_str(v: &Value, field: &str) -> Result<String, ApiError> {
    let s = match &v[field] {
        Value::Null => "",
        Value::String(s) => s.as_str(),
        _ => return Err(ApiError::bad_request(format!("{field} must be a string"))),
    };
    if s.len() > MAX_VALUE_LEN {
        return Err(ApiError::bad_request(format!(
            "{field}: longer than {MAX_VALUE_LEN} bytes"
        )));
    }
    Ok(s.to_string())
}

fn bounded_list(v: &Value, field: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let items = match &v[field] {
        Value::Null => return Ok(Vec::new()),
        // The protobuf form of an extra value is `{"items": [...]}`.
        Value::Object(o) if o.contains_key("items") => {
            return bounded_list(&v[field], "items", max);
        }
        Value::Array(items) => items,
        _ => return Err(ApiError::bad_request(format!("{field} must be a list"))),
    };
    if items.len() > max {
        return Err(ApiError::bad_request(format!(
            "{field}: at most {max} entries"
        )));
    }
    items
        .iter()
        .map(|item| bounded_str(&json!({"v": item}), "v"))
        .collect()
}

/// The user a SubjectAccessReview asks about.
fn subject(spec: &Value, kind: &str) -> Result<UserInfo, ApiError> {
    let name = bounded_str(spec, "user")?;
    let groups = bounded_list(spec, "groups", MAX_GROUPS)?;
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            kind,
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let mut extra = BTreeMap::new();
    let mut values = 0;
    if let Some(map) = spec["extra"].as_object() {
        for (key, v) in map {
            if key.len() > MAX_VALUE_LEN {
                return Err(ApiError::bad_request("spec.extra: key too long"));
            }
            let list = bounded_list(&json!({"v": v}), "v", MAX_EXTRA_VALUES)?;
            values += list.len();
            if values > MAX_EXTRA_VALUES {
                return Err(ApiError::bad_request(format!(
                    "spec.extra: at most {MAX_EXTRA_VALUES} values"
                )));
            }
            extra.insert(key.clone(), list);
        }
    }
    Ok(UserInfo {
        name,
        uid: bounded_str(spec, "uid")?,
        groups,
        extra,
    })
}

/// The question: `resourceAttributes` or `nonResourceAttributes`, exactly one.
fn attributes(spec: &Value, kind: &str) -> Result<Attributes, ApiError> {
    match (
        spec.get("resourceAttributes").filter(|v| !v.is_null()),
        spec.get("nonResourceAttributes").filter(|v| !v.is_null()),
    ) {
        (Some(r), None) => Ok(Attributes::Resource(ResourceAttributes {
            verb: bounded_str(r, "verb")?,
            group: bounded_str(r, "group")?,
            resource: bounded_str(r, "resource")?,
            subresource: bounded_str(r, "subresource")?,
            namespace: bounded_str(r, "namespace")?,
            name: bounded_str(r, "name")?,
        })),
        (None, Some(n)) => Ok(Attributes::NonResource {
            verb: bounded_str(n, "verb")?,
            path: bounded_str(n, "path")?,
        }),
        _ => Err(invalid(
            kind,
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
    }
}

fn decision_status(decision: &rbac::Decision) -> Value {
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    status
}

fn rules_status(rules: &[Value]) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        if rule.get("nonResourceURLs").is_some_and(|u| u.is_array()) {
            non_resource_rules
                .push(json!({"verbs": rule["verbs"], "nonResourceURLs": rule["nonResourceURLs"]}));
        } else {
            let mut r = json!({"verbs": rule["verbs"], "apiGroups": rule["apiGroups"], "resources": rule["resources"]});
            if rule.get("resourceNames").is_some_and(|n| n.is_array()) {
                r["resourceNames"] = rule["resourceNames"].clone();
            }
            resource_rules.push(r);
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}

fn user_info_json(user: &UserInfo) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    struct DenyAll;
    impl Authorizer for DenyAll {
        fn decide(&self, _: &UserInfo, _: &Attributes) -> rbac::Decision {
            rbac::Decision {
                allowed: false,
                reason: String::new(),
            }
        }
        fn rules(&self, _: &UserInfo, _: &str) -> Vec<Value> {
            Vec::new()
        }
    }

    fn sar() -> Review {
        find("authorization.k8s.io", "v1", "subjectaccessreviews").unwrap()
    }

    #[test]
    fn a_review_needs_a_subject_and_exactly_one_question() {
        let caller = UserInfo::admin();
        let no_subject = json!({"spec": {"resourceAttributes": {"verb": "get"}}});
        assert_eq!(
            answer(sar(), None, &caller, no_subject, &AlwaysAllow)
                .unwrap_err()
                .code,
            422
        );
        let both = json!({"spec": {"user": "a", "resourceAttributes": {"verb": "get"},
            "nonResourceAttributes": {"verb": "get", "path": "/"}}});
        assert_eq!(
            answer(sar(), None, &caller, both, &AlwaysAllow)
                .unwrap_err()
                .code,
            422
        );
        let ok = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "a", "groups": ["g"], "resourceAttributes": {"verb": "get", "resource": "pods"}}});
        let answered = answer(sar(), None, &caller, ok.clone(), &DenyAll).unwrap();
        assert_eq!(answered["status"]["allowed"], false);
        assert_eq!(answered["spec"], ok["spec"]);
        let too_many = json!({"spec": {"user": "a", "groups": vec!["g"; MAX_GROUPS + 1],
            "resourceAttributes": {"verb": "get"}}});
        assert_eq!(
            answer(sar(), None, &caller, too_many, &AlwaysAllow)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn a_local_review_stays_in_its_namespace() {
        let local = find("authorization.k8s.io", "v1", "localsubjectaccessreviews").unwrap();
        let body = json!({"spec": {"user": "a", "resourceAttributes": {"verb": "get", "namespace": "t2"}}});
        assert_eq!(
            answer(local, Some("t1"), &UserInfo::admin(), body, &AlwaysAllow)
                .unwrap_err()
                .code,
            422
        );
    }
}
