//! Impersonation, as the real server's filter does it: `Impersonate-User`,
//! `Impersonate-Group` (repeatable), `Impersonate-Uid` and `Impersonate-Extra-<key>`
//! headers ask to act as another user; the caller must be allowed the `impersonate` verb on
//! each (`users`, `groups`, `uids`, `userextras/<key>` in `authentication.k8s.io`, or
//! `serviceaccounts` in the core group of the ServiceAccount's namespace for
//! `system:serviceaccount:NS:NAME`), and the request is then authorised as that user.
//!
//! The headers come from clients, so they are bounded before anything else looks at them:
//! each value at most [`MAX_VALUE_LEN`] bytes, at most [`MAX_GROUPS`] groups, at most
//! [`MAX_EXTRA_KEYS`] extra keys and [`MAX_EXTRA_VALUES`] values in all; over a bound is a 400.

use super::attributes::{Attributes, ResourceAttributes};
use super::authn::{AUTHENTICATED, UserInfo, service_account_groups, split_service_account};
use super::errors::ApiError;
use axum::http::HeaderMap;
use std::collections::BTreeMap;

/// Longest user name, group, UID, extra key or extra value accepted (bytes).
pub const MAX_VALUE_LEN: usize = 512;
/// Most `Impersonate-Group` headers accepted.
pub const MAX_GROUPS: usize = 64;
/// Most distinct `Impersonate-Extra-*` keys accepted.
pub const MAX_EXTRA_KEYS: usize = 16;
/// Most `Impersonate-Extra-*` values accepted, over all keys.
pub const MAX_EXTRA_VALUES: usize = 64;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// What the headers of one request ask to act as; `None` when they ask nothing.
pub fn requested(headers: &HeaderMap) -> Result<Option<UserInfo>, ApiError> {
    let value = |name: &str, v: &axum::http::HeaderValue| -> Result<String, ApiError> {
        let text = v.to_str().map_err(|_| {
            ApiError::bad_request(format!("{name}: the header value is not visible ASCII"))
        })?;
        bounded(name, text.trim())
    };
    let user = match headers.get(USER) {
        Some(v) => Some(value("Impersonate-User", v)?),
        None => None,
    };
    let mut groups = Vec::new();
    for v in headers.get_all(GROUP) {
        if groups.len() == MAX_GROUPS {
            return Err(ApiError::bad_request(format!(
                "Impersonate-Group: at most {MAX_GROUPS} groups may be impersonated"
            )));
        }
        groups.push(value("Impersonate-Group", v)?);
    }
    let uid = match headers.get(UID) {
        Some(v) => Some(value("Impersonate-Uid", v)?),
        None => None,
    };
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut extra_values = 0usize;
    for (name, v) in headers {
        let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) else {
            continue;
        };
        let key = unescape_key(&bounded("Impersonate-Extra key", key)?);
        extra_values += 1;
        if extra_values > MAX_EXTRA_VALUES
            || (!extra.contains_key(&key) && extra.len() == MAX_EXTRA_KEYS)
        {
            return Err(ApiError::bad_request(format!(
                "Impersonate-Extra-*: at most {MAX_EXTRA_KEYS} keys and {MAX_EXTRA_VALUES} values may be impersonated"
            )));
        }
        let v = value("Impersonate-Extra", v)?;
        extra.entry(key).or_default().push(v);
    }
    let Some(name) = user else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::bad_request(
                "requested impersonation of groups, a UID or extra fields without impersonating a user",
            ));
        }
        return Ok(None);
    };
    if name.is_empty() {
        return Err(ApiError::bad_request("Impersonate-User: empty user name"));
    }
    Ok(Some(UserInfo {
        name,
        uid: uid.unwrap_or_default(),
        groups,
        extra,
    }))
}

fn bounded(name: &str, value: &str) -> Result<String, ApiError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(ApiError::bad_request(format!(
            "{name}: longer than {MAX_VALUE_LEN} bytes"
        )));
    }
    Ok(value.to_string())
}

/// An extra key is sent percent-encoded (header names are case-insensitive and restricted);
/// undone here as the real server does, lower-cased.
fn unescape_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&key[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

/// The `impersonate` checks the request needs, each with what it asks, in the real filter's
/// order (user, groups, extra, UID); and the user it then acts as.
pub fn checks(requested: &UserInfo) -> (Vec<Attributes>, UserInfo) {
    let mut checks = Vec::new();
    let impersonate = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
        Attributes::Resource(ResourceAttributes {
            verb: "impersonate".into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        })
    };
    let mut groups = requested.groups.clone();
    match split_service_account(&requested.name) {
        Some((namespace, name)) => {
            checks.push(impersonate("", "serviceaccounts", "", namespace, name));
            if groups.is_empty() {
                groups = service_account_groups(namespace);
            }
        }
        None => checks.push(impersonate(
            "authentication.k8s.io",
            "users",
            "",
            "",
            &requested.name,
        )),
    }
    for group in &requested.groups {
        checks.push(impersonate(
            "authentication.k8s.io",
            "groups",
            "",
            "",
            group,
        ));
    }
    for (key, values) in &requested.extra {
        for value in values {
            checks.push(impersonate(
                "authentication.k8s.io",
                "userextras",
                key,
                "",
                value,
            ));
        }
    }
    if !requested.uid.is_empty() {
        checks.push(impersonate(
            "authentication.k8s.io",
            "uids",
            "",
            "",
            &requested.uid,
        ));
    }
    if requested.name != "system:anonymous"
        && !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == "system:unauthenticated")
    {
        groups.push(AUTHENTICATED.into());
    }
    let user = UserInfo {
        name: requested.name.clone(),
        uid: requested.uid.clone(),
        groups,
        extra: requested.extra.clone(),
    };
    (checks, user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_service_account_gets_its_groups_and_one_check() {
        let asked = requested(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:t1:app",
        )]))
        .unwrap()
        .unwrap();
        let (checks, user) = checks(&asked);
        assert_eq!(checks.len(), 1);
        let Attributes::Resource(r) = &checks[0] else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.namespace.as_str(), r.name.as_str()),
            ("serviceaccounts", "t1", "app")
        );
        assert_eq!(
            user.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:t1",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn users_groups_extras_and_uids_are_each_checked() {
        let asked = requested(&headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes%2Fa", "x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(asked.extra["scopes/a"], vec!["x"]);
        let (checks, user) = checks(&asked);
        let resources: Vec<String> = checks
            .iter()
            .map(|c| match c {
                Attributes::Resource(r) => format!("{}/{}={}", r.resource, r.subresource, r.name),
                _ => String::new(),
            })
            .collect();
        assert_eq!(
            resources,
            vec![
                "users/=alice",
                "groups/=dev",
                "groups/=ops",
                "userextras/scopes/a=x",
                "uids/=u-1"
            ]
        );
        assert_eq!(user.groups, vec!["dev", "ops", "system:authenticated"]);
    }

    #[test]
    fn bounds_and_malformed_requests_are_refused() {
        assert!(requested(&HeaderMap::new()).unwrap().is_none());
        let too_long = "a".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(
            requested(&headers(&[("Impersonate-User", &too_long)]))
                .unwrap_err()
                .code,
            400
        );
        let mut many = vec![("Impersonate-User", "alice")];
        many.extend(std::iter::repeat_n(("Impersonate-Group", "g"), MAX_GROUPS));
        assert!(requested(&headers(&many)).is_ok());
        many.push(("Impersonate-Group", "g"));
        assert_eq!(requested(&headers(&many)).unwrap_err().code, 400);
        assert_eq!(
            requested(&headers(&[("Impersonate-Group", "g")]))
                .unwrap_err()
                .code,
            400,
            "a group without a user"
        );
    }
}
