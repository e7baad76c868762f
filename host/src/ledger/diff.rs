//! Which fields a change changed: the JSON pointers where two versions of an object differ,
//! bounded in count and depth (a list or a deep object that changed is named whole), without
//! the bookkeeping every write changes (resourceVersion, managedFields, generation), with a
//! changed scalar's old and new values when short.

use serde_json::Value;

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

/// The paths where `before` and `after` differ, in document order; with `values` (never for
/// a Secret's), a changed scalar's as `/spec/replicas 1→3`.
pub fn changed_paths(before: &Value, after: &Value, values: bool) -> Vec<String> {
    let mut paths = Vec::new();
    let mut more = 0usize;
    let mut walker = Walk {
        values,
        out: &mut paths,
        more: &mut more,
    };
    walker.walk(before, after, &mut String::new(), 0);
    if more > 0 {
        paths.push(format!("… and {more} more"));
    }
    paths
}

/// A scalar as shown beside its path, when short: numbers, booleans, short strings.
fn shown(v: &Value) -> Option<String> {
    let text = match v {
        Value::Null => "none".to_string(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        Value::String(s) => serde_json::to_string(s).ok()?,
        Value::Array(_) | Value::Object(_) => return None,
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
    fn walk(&mut self, a: &Value, b: &Value, path: &mut String, depth: usize) {
        if a == b || IGNORED.contains(&path.as_str()) {
            return;
        }
        match (a, b) {
            (Value::Object(x), Value::Object(y)) if depth < MAX_DEPTH => {
                let mut keys: Vec<&String> = x
                    .keys()
                    .chain(y.keys().filter(|k| !x.contains_key(*k)))
                    .collect();
                keys.sort();
                for key in keys {
                    let len = path.len();
                    path.push('/');
                    // JSON pointer escaping (RFC 6901).
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    let null = Value::Null;
                    self.walk(
                        x.get(key).unwrap_or(&null),
                        y.get(key).unwrap_or(&null),
                        path,
                        depth + 1,
                    );
                    path.truncate(len);
                }
            }
            _ if self.out.len() >= MAX_PATHS => *self.more += 1,
            _ => {
                let at = if path.is_empty() { "/" } else { path.as_str() };
                let values = match (self.values, shown(a), shown(b)) {
                    (true, Some(a), Some(b)) => format!(" {a}→{b}"),
                    _ => String::new(),
                };
                self.out.push(format!("{at}{values}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
