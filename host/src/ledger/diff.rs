//! Which fields a change changed: the JSON pointers where two versions of an object differ,
//! bounded in count and depth (a list or a deep object that changed is named whole), without
//! the bookkeeping every write changes (resourceVersion, managedFields, generation), with a
//! changed scalar's old and new values when short.
//!
//! It compares the cache's JSON text, not parsed trees: the cache writes every object in one
//! canonical form (compact, keys sorted), so equal subtrees are equal bytes and are skipped
//! unparsed; only the members along a changed path are split out (as raw text, not values).
//! Parsing both versions whole was most of the ledger's cost in the e2e bench.

use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The most paths reported; one more says how many were left out.
pub const MAX_PATHS: usize = 32;
/// The deepest path reported: below it the object is named whole.
const MAX_DEPTH: usize = 8;

const IGNORED: [&str; 3] = [
    "/metadata/resourceVersion",
    "/metadata/managedFields",
    "/metadata/generation",
];

/// The longest value shown beside its path (longer ones are named by path only).
const MAX_VALUE: usize = 64;

/// An absent member, compared as JSON `null`.
const ABSENT: &str = "null";

/// The paths where the JSON texts `before` and `after` differ, in document order; with
/// `values` (never for a Secret's), a changed scalar's as `/spec/replicas 1→3`.
pub fn changed_paths(before: &str, after: &str, values: bool) -> Vec<String> {
    let mut paths = Vec::new();
    let mut more = 0usize;
    let mut walker = Walk {
        values,
        out: &mut paths,
        more: &mut more,
    };
    walker.walk(before.trim(), after.trim(), &mut String::new(), 0);
    if more > 0 {
        paths.push(format!("… and {more} more"));
    }
    paths
}

/// An object's members as raw text, or `None` when `text` is not a JSON object. Keys are
/// borrowed from the text unless one is escaped (rare in Kubernetes objects).
fn members(text: &str) -> Option<Members<'_>> {
    if !text.starts_with('{') {
        return None;
    }
    if let Ok(borrowed) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(text) {
        return Some(
            borrowed
                .into_iter()
                .map(|(k, v)| (Cow::Borrowed(k), v))
                .collect(),
        );
    }
    let owned: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    Some(owned.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect())
}

/// An object's members: key, raw value.
type Members<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

/// Member `key`'s text, `null` when absent.
fn member<'a>(members: &Members<'a>, key: &str) -> &'a str {
    members.get(key).map_or(ABSENT, |v| v.get().trim())
}

/// A scalar as shown beside its path, when short: numbers, booleans, short strings.
fn shown(raw: &str) -> Option<String> {
    // A string's JSON form is at least as long as its text: longer ones are never shown.
    if raw.len() > MAX_VALUE * 2 || raw.starts_with(['{', '[']) {
        return None;
    }
    let text = match serde_json::from_str::<serde_json::Value>(raw).ok()? {
        serde_json::Value::Null => "none".to_string(),
        serde_json::Value::String(s) => serde_json::to_string(&s).ok()?,
        v => v.to_string(),
    };
    (text.len() <= MAX_VALUE).then_some(text)
}

/// The walk's settings and findings.
struct Walk<'a> {
    values: bool,
    out: &'a mut Vec<String>,
    more: &'a mut usize,
}

impl Walk<'_> {
    fn walk(&mut self, a: &str, b: &str, path: &mut String, depth: usize) {
        if a == b || IGNORED.contains(&path.as_str()) {
            return;
        }
        if depth < MAX_DEPTH
            && let (Some(x), Some(y)) = (members(a), members(b))
        {
            let mut keys: Vec<&Cow<str>> = x
                .keys()
                .chain(y.keys().filter(|k| !x.contains_key(*k)))
                .collect();
            keys.sort();
            for key in keys {
                let len = path.len();
                path.push('/');
                // JSON pointer escaping (RFC 6901).
                match key.contains(['~', '/']) {
                    true => path.push_str(&key.replace('~', "~0").replace('/', "~1")),
                    false => path.push_str(key),
                }
                self.walk(member(&x, key), member(&y, key), path, depth + 1);
                path.truncate(len);
            }
            return;
        }
        if self.out.len() >= MAX_PATHS {
            *self.more += 1;
            return;
        }
        let at = if path.is_empty() { "/" } else { path.as_str() };
        let values = match (self.values, shown(a), shown(b)) {
            (true, Some(a), Some(b)) => format!(" {a}→{b}"),
            _ => String::new(),
        };
        self.out.push(format!("{at}{values}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn changed_paths(a: &Value, b: &Value, values: bool) -> Vec<String> {
        super::changed_paths(&a.to_string(), &b.to_string(), values)
    }

    #[test]
    fn names_the_changed_fields_only() {
        let a = json!({"metadata": {"resourceVersion": "1", "labels": {"a/b": "x"}}, "spec": {"replicas": 1, "template": {"spec": {"containers": [{"image": "nginx"}]}}}});
        let b = json!({"metadata": {"resourceVersion": "2", "labels": {"a/b": "y"}}, "spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "nginx:1.25"}]}}}});
        assert_eq!(
            changed_paths(&a, &b, false),
            [
                "/metadata/labels/a~1b",
                "/spec/replicas",
                "/spec/template/spec/containers"
            ]
        );
        assert_eq!(
            changed_paths(&a, &b, true),
            [
                "/metadata/labels/a~1b \"x\"→\"y\"",
                "/spec/replicas 1→3",
                "/spec/template/spec/containers"
            ]
        );
        assert!(changed_paths(&a, &a, true).is_empty());
        let long = json!({"spec": {"replicas": "x".repeat(100)}});
        assert_eq!(changed_paths(&a, &long, true)[1], "/spec/replicas");
    }

    #[test]
    fn bounded_in_count() {
        let a = json!({});
        let b: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let paths = changed_paths(&a, &Value::Object(b), true);
        assert_eq!(paths.len(), MAX_PATHS + 1);
        assert_eq!(paths[MAX_PATHS], "… and 68 more");
    }

    #[test]
    fn members_added_removed_escaped_and_deep() {
        let a = json!({"metadata": {"annotations": {"x~y": "1"}}, "spec": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}});
        let b = json!({"metadata": {"annotations": {"x~y": "2", "new": true}}, "spec": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 2}}}}}}}}, "status": {"ready": 1}});
        assert_eq!(
            changed_paths(&a, &b, true),
            [
                "/metadata/annotations/new none→true",
                "/metadata/annotations/x~0y \"1\"→\"2\"",
                "/spec/a/b/c/d/e/f/g",
                "/status"
            ]
        );
        // A key JSON escapes cannot be borrowed from the text: it is read owned.
        assert_eq!(
            changed_paths(&json!({"a\"b": 1}), &json!({"a\"b": 2}), true),
            ["/a\"b 1→2"]
        );
        // An explicit null and an absent member are the same.
        assert!(changed_paths(&json!({"a": null}), &json!({}), true).is_empty());
        // Text that is not JSON names the root, never panics.
        assert_eq!(super::changed_paths("{", "{}", true), ["/"]);
    }
}
