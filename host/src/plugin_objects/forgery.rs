//! Status the host did not write: a Plugin's `status` read back is compared, field by field,
//! with what the host last wrote (kept as digests in its own record, [`super::records`]), so
//! a field someone else wrote (a tenant allowed `plugins/status`) is named once in a Warning
//! Event and overwritten by the next write, which also removes every key the host does not
//! write. Only field paths are ever named, never the values found.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The top-level `status` fields the host writes on a Plugin.
pub const OWNED_FIELDS: [&str; 12] = [
    "observedGeneration",
    "conditions",
    "runner",
    "counts",
    "mode",
    "digest",
    "shortDigest",
    "declared",
    "grant",
    "image",
    "revisions",
    "rollout",
];

/// Fields left out of the comparison: counts change on every reconcile and are written only
/// every so often, so what is read back may lag what is counted.
const UNCOMPARED: [&str; 1] = ["counts"];

/// How a field the host does not write is named (its name is someone else's text).
pub const FOREIGN_FIELD: &str = "status (a field the host does not write)";

/// `value` as JSON with object keys sorted, so equal values digest equally whatever order
/// the API server returns their keys in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A SHA-256 (hex) of each compared top-level field of `status` that the host writes.
pub fn field_digests(status: &Value) -> BTreeMap<String, String> {
    let Some(map) = status.as_object() else {
        return BTreeMap::new();
    };
    map.iter()
        .filter(|(k, v)| {
            OWNED_FIELDS.contains(&k.as_str()) && !UNCOMPARED.contains(&k.as_str()) && !v.is_null()
        })
        .map(|(k, v)| {
            let mut text = String::new();
            canonical(v, &mut text);
            (k.clone(), hex::encode(Sha256::digest(text.as_bytes())))
        })
        .collect()
}

/// The paths of the fields of `read_back` that differ from what the host wrote (`written`,
/// digests by [`field_digests`]): `status.<field>` for a field the host writes, and
/// [`FOREIGN_FIELD`] once for any others.
pub fn forged_fields(read_back: Option<&Value>, written: &BTreeMap<String, String>) -> Vec<String> {
    let empty = Map::new();
    let map = read_back.and_then(Value::as_object).unwrap_or(&empty);
    let seen = field_digests(read_back.unwrap_or(&Value::Null));
    let mut forged: Vec<String> = OWNED_FIELDS
        .iter()
        .filter(|f| seen.get(**f) != written.get(**f))
        .map(|f| format!("status.{f}"))
        .collect();
    if map
        .iter()
        .any(|(k, v)| !OWNED_FIELDS.contains(&k.as_str()) && !v.is_null())
    {
        forged.push(FOREIGN_FIELD.to_string());
    }
    forged
}

/// A JSON merge patch that turns `old` into `new`: `new` with `null` for every key, at any
/// depth, that `old` has and `new` lacks (a merge patch alone would keep them).
pub fn replacing_patch(new: &Value, old: Option<&Value>) -> Value {
    match (new, old) {
        (Value::Object(n), Some(Value::Object(o))) => {
            let mut out = Map::new();
            for (k, v) in n {
                out.insert(k.clone(), replacing_patch(v, o.get(k)));
            }
            for k in o.keys() {
                out.entry(k.clone()).or_insert(Value::Null);
            }
            Value::Object(out)
        }
        (new, _) => new.clone(),
    }
}

/// What the status read back was when the host last wrote over it.
#[derive(Debug, Clone)]
struct Base {
    resource_version: Option<String>,
    digests: BTreeMap<String, String>,
}

/// Per Plugin, in memory: what the host wrote over (so a read-back that still shows it, the
/// watch not having caught up with the write, is not taken for a forgery) and which forged
/// read-back was already noted (one Event per forgery, not one per pass).
#[derive(Debug, Default)]
pub struct Marks {
    bases: HashMap<String, Base>,
    noted: HashMap<String, Option<String>>,
}

impl Marks {
    /// The forged fields of Plugin `key`'s status `read_back` (at `resource_version`),
    /// against `written`: none when the read-back is still the one the host last wrote over.
    pub fn forged(
        &self,
        key: &str,
        resource_version: Option<&str>,
        read_back: Option<&Value>,
        written: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if let Some(base) = self.bases.get(key) {
            let stale = base.resource_version.as_deref() == resource_version
                || base.digests == field_digests(read_back.unwrap_or(&Value::Null));
            if stale {
                return Vec::new();
            }
        }
        forged_fields(read_back, written)
    }

    /// Remembers that the host wrote over `read_back` (at `resource_version`).
    pub fn wrote_over(
        &mut self,
        key: &str,
        resource_version: Option<&str>,
        read_back: Option<&Value>,
    ) {
        self.bases.insert(
            key.to_string(),
            Base {
                resource_version: resource_version.map(str::to_string),
                digests: field_digests(read_back.unwrap_or(&Value::Null)),
            },
        );
    }

    /// Whether the forgery seen at `resource_version` is new (and marks it noted).
    pub fn first_notice(&mut self, key: &str, resource_version: Option<&str>) -> bool {
        let rv = resource_version.map(str::to_string);
        match self.noted.get(key) == Some(&rv) {
            true => false,
            false => {
                self.noted.insert(key.to_string(), rv);
                true
            }
        }
    }

    /// Forgets Plugins not in `current`.
    pub fn retain(&mut self, current: &HashSet<String>) {
        self.bases.retain(|k, _| current.contains(k));
        self.noted.retain(|k, _| current.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written() -> Value {
        json!({"observedGeneration": 1, "runner": "r1", "counts": {"reconciles": 1},
            "revisions": [{"digest": "sha256:aa", "generation": 1, "at": "T1"}]})
    }

    #[test]
    fn key_order_and_counts_do_not_count_as_forgery() {
        let w = field_digests(&written());
        let mut back = json!({"revisions": [{"at": "T1", "generation": 1, "digest": "sha256:aa"}],
            "runner": "r1", "observedGeneration": 1, "counts": {"reconciles": 99}});
        assert!(forged_fields(Some(&back), &w).is_empty());
        back["revisions"][0]["digest"] = json!("sha256:fff");
        back["rollout"] = json!({"phase": "Promoted", "message": "after 500 agreeing keys"});
        back["evil"] = json!("x");
        let forged = forged_fields(Some(&back), &w);
        assert_eq!(
            forged,
            ["status.revisions", "status.rollout", FOREIGN_FIELD],
            "{forged:?}"
        );
        // Only paths: nothing of the values found.
        assert!(
            forged
                .iter()
                .all(|f| !f.contains("fff") && !f.contains("500"))
        );
        // A field the host wrote and someone removed is forged too.
        let removed = json!({"observedGeneration": 1, "revisions": written()["revisions"]});
        assert_eq!(forged_fields(Some(&removed), &w), ["status.runner"]);
    }

    #[test]
    fn the_patch_removes_nested_keys_the_host_does_not_write() {
        let old =
            json!({"rollout": {"phase": "Held", "extra": 1}, "evil": true, "mode": "enforce"});
        let new = json!({"rollout": {"phase": "Held"}, "mode": "enforce"});
        assert_eq!(
            replacing_patch(&new, Some(&old)),
            json!({"rollout": {"phase": "Held", "extra": null}, "evil": null, "mode": "enforce"})
        );
        assert_eq!(replacing_patch(&new, None), new);
    }

    #[test]
    fn a_stale_read_back_is_not_a_forgery_and_a_forgery_is_noted_once() {
        let mut marks = Marks::default();
        let w = field_digests(&written());
        let old = json!({"observedGeneration": 0});
        marks.wrote_over("a/p", Some("5"), Some(&old));
        // The watch still shows what was written over: not a forgery.
        assert!(marks.forged("a/p", Some("5"), Some(&old), &w).is_empty());
        // Another write with the same old status (a spec change raced the status write).
        assert!(marks.forged("a/p", Some("6"), Some(&old), &w).is_empty());
        let mut forged = written();
        forged["rollout"] = json!({"phase": "Promoted"});
        assert_eq!(
            marks.forged("a/p", Some("8"), Some(&forged), &w),
            ["status.rollout"]
        );
        assert!(marks.first_notice("a/p", Some("8")));
        assert!(!marks.first_notice("a/p", Some("8")));
        assert!(marks.first_notice("a/p", Some("11")));
        marks.retain(&HashSet::new());
        assert!(marks.first_notice("a/p", Some("11")));
    }
}
