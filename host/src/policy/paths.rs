//! Field paths: the patterns an operator grants (`/spec/template/spec/containers/*/image`)
//! and the paths a patch or manifest touches, extracted per patch type.
//!
//! A touched path is a list of segments; list items are `*` when the patch addresses them by
//! merge key (merge, strategic, apply, create) and their index when it addresses them by
//! position (JSON patch). A pattern grants a path when it is a prefix of it, segment by
//! segment, `*` in the pattern matching any one segment. `/` alone grants every path.

use serde_json::{Map, Value};
use std::fmt;

/// A path inside an object, one segment per level.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<String>);

impl FieldPath {
    fn child(&self, segment: &str) -> FieldPath {
        let mut v = self.0.clone();
        v.push(segment.to_string());
        FieldPath(v)
    }

    fn parse_pointer(pointer: &str) -> Result<FieldPath, PathError> {
        if pointer.is_empty() {
            return Ok(FieldPath(Vec::new()));
        }
        let rest = pointer
            .strip_prefix('/')
            .ok_or_else(|| PathError(format!("JSON pointer {pointer:?} must start with '/'")))?;
        Ok(FieldPath(
            rest.split('/')
                .map(|s| s.replace("~1", "/").replace("~0", "~"))
                .collect(),
        ))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("/");
        }
        for s in &self.0 {
            write!(f, "/{}", s.replace('~', "~0").replace('/', "~1"))?;
        }
        Ok(())
    }
}

/// A patch body or manifest whose touched paths cannot be determined (it is then denied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathError(pub String);

/// A granted field path prefix; `*` matches any one segment (a list item or a map key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPattern {
    text: String,
    segments: Vec<Option<String>>,
}

impl FieldPattern {
    /// Parses `/a/b/*/c`; `/` grants everything. Segments are JSON-pointer escaped (`~1`
    /// for `/`, `~0` for `~`).
    pub fn parse(text: &str) -> Result<FieldPattern, PathError> {
        let path = if text == "/" {
            FieldPath(Vec::new())
        } else {
            FieldPath::parse_pointer(text)?
        };
        if path.0.iter().any(String::is_empty) {
            return Err(PathError(format!(
                "field path {text:?} has an empty segment"
            )));
        }
        Ok(FieldPattern {
            text: text.to_string(),
            segments: path
                .0
                .into_iter()
                .map(|s| (s != "*").then_some(s))
                .collect(),
        })
    }

    /// Whether this pattern grants `path` (is a prefix of it).
    pub fn grants(&self, path: &FieldPath) -> bool {
        self.segments.len() <= path.0.len()
            && self
                .segments
                .iter()
                .zip(&path.0)
                .all(|(p, s)| p.as_ref().is_none_or(|p| p == s))
    }

    /// The pattern as the operator wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether every path `other` grants, this pattern grants too: this is a prefix of it,
    /// segment by segment, where `*` here covers any segment there (`*` included) and a
    /// name here covers only the same name (never a `*`).
    pub fn covers(&self, other: &FieldPattern) -> bool {
        self.segments.len() <= other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|(mine, theirs)| match (mine, theirs) {
                    (None, _) => true,
                    (Some(m), Some(t)) => m == t,
                    (Some(_), None) => false,
                })
    }
}

/// Paths a JSON merge patch (RFC 7386) touches: every leaf of the body. A `null` deletes,
/// an array replaces the whole list, an empty object may create the field: all touch that
/// path.
pub fn merge_patch_paths(body: &Value) -> Vec<FieldPath> {
    let mut out = Vec::new();
    fn walk(path: FieldPath, v: &Value, out: &mut Vec<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    walk(path.child(k), v, out);
                }
            }
            _ => out.push(path),
        }
    }
    walk(FieldPath(Vec::new()), body, &mut out);
    out
}

/// Paths a JSON patch (RFC 6902) touches: each operation's `path`, and its `from` for
/// `move` (which removes it) and `copy` (which reads it). `test` touches nothing.
pub fn json_patch_paths(body: &Value) -> Result<Vec<FieldPath>, PathError> {
    let ops = body
        .as_array()
        .ok_or_else(|| PathError("a JSON patch must be an array of operations".into()))?;
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let field = |name: &str| {
            op.get(name).and_then(Value::as_str).ok_or_else(|| {
                PathError(format!("JSON patch operation {i} has no string {name:?}"))
            })
        };
        match field("op")? {
            "test" => {}
            "add" | "remove" | "replace" => out.push(FieldPath::parse_pointer(field("path")?)?),
            "move" | "copy" => {
                out.push(FieldPath::parse_pointer(field("from")?)?);
                out.push(FieldPath::parse_pointer(field("path")?)?);
            }
            other => {
                return Err(PathError(format!(
                    "JSON patch operation {i} has unknown op {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// Paths a strategic merge patch touches. Object fields as in a merge patch; list items
/// (addressed by merge key) as `*`, their merge key included (it may add an item); a list of
/// scalars touches the list. Directives: `$patch: replace|delete` touches the whole
/// enclosing object (or, inside a list item, the whole list); `$retainKeys` touches the
/// enclosing object; `$setElementOrder/<f>` and `$deleteFromPrimitiveList/<f>` touch `<f>`.
pub fn strategic_patch_paths(body: &Value) -> Vec<FieldPath> {
    let mut out = Vec::new();
    strategic_walk(&FieldPath(Vec::new()), body, &mut out);
    out
}

fn strategic_walk(path: &FieldPath, v: &Value, out: &mut Vec<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => strategic_object(path, m, out),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
            let item_path = path.child("*");
            for item in items {
                let m = item.as_object().expect("checked above");
                if is_patch_directive(m) {
                    out.push(path.clone());
                } else {
                    strategic_walk(&item_path, item, out);
                }
            }
        }
        _ => out.push(path.clone()),
    }
}

fn is_patch_directive(m: &Map<String, Value>) -> bool {
    matches!(
        m.get("$patch").and_then(Value::as_str),
        Some("replace" | "delete")
    )
}

fn strategic_object(path: &FieldPath, m: &Map<String, Value>, out: &mut Vec<FieldPath>) {
    if is_patch_directive(m) || m.contains_key("$retainKeys") {
        out.push(path.clone());
    }
    for (k, v) in m {
        if k == "$patch" || k == "$retainKeys" {
            continue;
        }
        if let Some(field) = k
            .strip_prefix("$setElementOrder/")
            .or_else(|| k.strip_prefix("$deleteFromPrimitiveList/"))
        {
            out.push(path.child(field));
            continue;
        }
        strategic_walk(&path.child(k), v, out);
    }
}

/// Whether `path` only names the object (apiVersion, kind, metadata.name/namespace).
fn is_identity(path: &FieldPath) -> bool {
    let s: Vec<&str> = path.0.iter().map(String::as_str).collect();
    matches!(
        s.as_slice(),
        ["apiVersion"] | ["kind"] | ["metadata", "name"] | ["metadata", "namespace"]
    )
}

/// Paths a server-side apply body touches: its fields as in a strategic merge patch (list
/// items by key as `*`), without the object's identity (apiVersion, kind, metadata.name,
/// metadata.namespace).
pub fn apply_paths(body: &Value) -> Vec<FieldPath> {
    let mut out = strategic_patch_paths(body);
    out.retain(|p| !is_identity(p));
    out
}

/// Paths a create sets: every leaf of the manifest (list items as `*`) except its identity.
pub fn create_paths(manifest: &Value) -> Vec<FieldPath> {
    let mut out = Vec::new();
    fn walk(path: FieldPath, v: &Value, out: &mut Vec<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    walk(path.child(k), v, out);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for item in items {
                    walk(path.child("*"), item, out);
                }
            }
            _ => out.push(path),
        }
    }
    walk(FieldPath(Vec::new()), manifest, &mut out);
    out.retain(|p| !is_identity(p));
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pattern_covers_the_patterns_it_is_a_prefix_of() {
        let p = |t: &str| super::FieldPattern::parse(t).unwrap();
        for (wide, narrow) in [
            ("/", "/spec"),
            ("/metadata/labels", "/metadata/labels/app"),
            ("/spec/*/image", "/spec/containers/image"),
            ("/spec/*/image", "/spec/*/image"),
            ("/spec/containers", "/spec/containers"),
        ] {
            assert!(p(wide).covers(&p(narrow)), "{wide} covers {narrow}");
        }
        for (wide, narrow) in [
            ("/spec", "/"),
            ("/metadata/labels/app", "/metadata/labels"),
            ("/spec/containers/image", "/spec/*/image"),
            ("/spec/replicas", "/spec/template"),
        ] {
            assert!(
                !p(wide).covers(&p(narrow)),
                "{wide} does not cover {narrow}"
            );
        }
    }

    use super::*;
    use serde_json::json;

    fn strs(paths: &[FieldPath]) -> Vec<String> {
        let mut v: Vec<String> = paths.iter().map(ToString::to_string).collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn patterns_grant_prefixes_with_wildcards() {
        let p = FieldPattern::parse("/spec/template/spec/containers/*/image").unwrap();
        let path = |s: &str| FieldPath::parse_pointer(s).unwrap();
        assert!(p.grants(&path("/spec/template/spec/containers/*/image")));
        assert!(p.grants(&path("/spec/template/spec/containers/3/image")));
        assert!(!p.grants(&path("/spec/template/spec/containers/*/name")));
        assert!(!p.grants(&path("/spec/template/spec/containers")));
        assert!(!p.grants(&path("/spec/template")));
        let labels = FieldPattern::parse("/metadata/labels").unwrap();
        assert!(labels.grants(&path("/metadata/labels/app")));
        assert!(!labels.grants(&path("/metadata/annotations/x")));
        assert!(FieldPattern::parse("/").unwrap().grants(&path("")));
        assert!(FieldPattern::parse("spec").is_err());
        assert!(FieldPattern::parse("/spec//x").is_err());
    }

    #[test]
    fn merge_patch_touches_every_leaf_and_nulls() {
        let body = json!({"metadata": {"labels": {"a": "1", "b": null}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "x"}]}}}});
        assert_eq!(
            strs(&merge_patch_paths(&body)),
            [
                "/metadata/labels/a",
                "/metadata/labels/b",
                "/spec/replicas",
                "/spec/template/spec/containers"
            ]
        );
        assert_eq!(strs(&merge_patch_paths(&json!(null))), ["/"]);
    }

    #[test]
    fn json_patch_touches_paths_and_move_copy_sources() {
        let body = json!([
            {"op": "test", "path": "/spec/secret", "value": 1},
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x"},
            {"op": "move", "from": "/spec/secret", "path": "/metadata/labels/a"},
            {"op": "copy", "from": "/data/key", "path": "/metadata/labels/b"},
            {"op": "remove", "path": "/metadata/labels/a~1b"}
        ]);
        assert_eq!(
            strs(&json_patch_paths(&body).unwrap()),
            [
                "/data/key",
                "/metadata/labels/a",
                "/metadata/labels/a~1b",
                "/metadata/labels/b",
                "/spec/secret",
                "/spec/template/spec/containers/0/image"
            ]
        );
        assert!(json_patch_paths(&json!({"op": "add"})).is_err());
        assert!(json_patch_paths(&json!([{"op": "add"}])).is_err());
        assert!(json_patch_paths(&json!([{"op": "explode", "path": "/a"}])).is_err());
    }

    #[test]
    fn strategic_patch_maps_list_items_and_directives() {
        let body = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "nginx"}],
            "$setElementOrder/containers": [{"name": "app"}],
            "$deleteFromPrimitiveList/finalizers": ["x"],
            "args": ["a", "b"]
        }}}});
        assert_eq!(
            strs(&strategic_patch_paths(&body)),
            [
                "/spec/template/spec/args",
                "/spec/template/spec/containers",
                "/spec/template/spec/containers/*/image",
                "/spec/template/spec/containers/*/name",
                "/spec/template/spec/finalizers",
            ]
        );
    }

    #[test]
    fn strategic_patch_directives_touch_the_enclosing_object_or_list() {
        let replace = json!({"spec": {"template": {"$patch": "replace", "spec": {}}}});
        assert!(strs(&strategic_patch_paths(&replace)).contains(&"/spec/template".to_string()));
        let delete_item = json!({"spec": {"containers": [{"$patch": "delete", "name": "x"}]}});
        assert_eq!(
            strs(&strategic_patch_paths(&delete_item)),
            ["/spec/containers"]
        );
        let retain = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        assert_eq!(
            strs(&strategic_patch_paths(&retain)),
            ["/spec/strategy", "/spec/strategy/type"]
        );
        let merge = json!({"metadata": {"$patch": "merge", "labels": {"a": "b"}}});
        assert_eq!(strs(&strategic_patch_paths(&merge)), ["/metadata/labels/a"]);
    }

    #[test]
    fn apply_excludes_identity_only() {
        let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "a", "labels": {"x": "y"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "i"}]}}}});
        assert_eq!(
            strs(&apply_paths(&body)),
            [
                "/metadata/labels/x",
                "/spec/template/spec/containers/*/image",
                "/spec/template/spec/containers/*/name"
            ]
        );
    }

    #[test]
    fn create_touches_every_field_but_identity() {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a"},
            "data": {"k": "v"}, "spec": {"ports": [{"port": 80}, {"port": 81}], "empty": []}});
        assert_eq!(
            strs(&create_paths(&manifest)),
            ["/data/k", "/spec/empty", "/spec/ports/*/port"]
        );
    }
}
