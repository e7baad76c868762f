//! Which fields a change changed: the JSON pointers where two versions of an object differ,
//! bounded in count and depth (a list or a deep object that changed is named whole), without
//! the bookkeeping every write changes (resourceVersion, managedFields, generation).

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

/// The paths where `before` and `after` differ, in document order.
pub fn changed_paths(before: &Value, after: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    let mut more = 0usize;
    walk(before, after, &mut String::new(), 0, &mut paths, &mut more);
    if more > 0 {
        paths.push(format!("… and {more} more"));
    }
    paths
}

fn walk(
    a: &Value,
    b: &Value,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
    more: &mut usize,
) {
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
                walk(
                    x.get(key).unwrap_or(&null),
                    y.get(key).unwrap_or(&null),
                    path,
                    depth + 1,
                    out,
                    more,
                );
                path.truncate(len);
            }
        }
        _ => {
            if out.len() < MAX_PATHS {
                out.push(if path.is_empty() {
                    "/".to_string()
                } else {
                    path.clone()
                });
            } else {
                *more += 1;
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
            changed_paths(&a, &b),
            [
                "/metadata/labels/a~1b",
                "/spec/replicas",
                "/spec/template/spec/containers"
            ]
        );
        assert!(changed_paths(&a, &a).is_empty());
    }

    #[test]
    fn bounded_in_count() {
        let a = json!({});
        let b: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let paths = changed_paths(&a, &Value::Object(b));
        assert_eq!(paths.len(), MAX_PATHS + 1);
        assert_eq!(paths[MAX_PATHS], "… and 68 more");
    }
}
