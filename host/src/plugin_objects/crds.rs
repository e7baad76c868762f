//! The CRDs of `host/deploy/crds/`, generated from the Rust types that parse the objects
//! ([`super::spec`], [`super::crd_status`]) with kube's `CustomResource` derive: printed by
//! `kubeplug crds`, and checked against the files by a test, so the schema the API server
//! enforces and the types the host reads cannot drift apart.

use super::spec::{PluginObject, PluginPolicyObject};
use kube::CustomResourceExt;

/// The files of `host/deploy/crds/` and their content, as the types generate them.
pub fn generated() -> Vec<(&'static str, String)> {
    vec![
        (
            "plugins.yaml",
            document(
                "# Plugin (kubeplug.dev/v1alpha1, namespaced): a tenant's request to run one sandboxed\n\
                 # reconciler in its own namespace; what it may do is its request intersected with the\n\
                 # cluster's PluginPolicies (with no matching policy it runs in dry-run).\n",
                &PluginObject::crd(),
            ),
        ),
        (
            "pluginpolicies.yaml",
            document(
                "# PluginPolicy (kubeplug.dev/v1alpha1, cluster-scoped): what the platform team allows\n\
                 # the Plugins of some namespaces (spec.appliesTo) to do.\n",
                &PluginPolicyObject::crd(),
            ),
        ),
    ]
}

fn document<T: serde::Serialize>(about: &str, crd: &T) -> String {
    let mut crd = serde_json::to_value(crd).expect("a CRD serialises to JSON");
    tidy(&mut crd);
    let yaml = serde_saphyr::to_string(&crd).expect("a CRD serialises to YAML");
    format!(
        "{about}# Generated from the Rust types by `kubeplug crds --out host/deploy/crds`: do not edit.\n\
         # Install: kubectl apply -f host/deploy/crds/  (or: kubeplug sim --crd FILE).\n{yaml}"
    )
}

/// What the derive writes that the API server should not act on: `default`s that are not
/// non-empty strings (a Rust `Default` of an object, a list, `false` or `""` would be stored
/// into every object; the host supplies those defaults when it parses), and bounds written as floats
/// (`maximum: 1024.0`) where they are whole numbers.
fn tidy(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            if map
                .get("default")
                .is_some_and(|d| d.as_str().is_none_or(str::is_empty))
            {
                map.remove("default");
            }
            for bound in ["minimum", "maximum"] {
                if let Some(n) = map.get(bound).and_then(Value::as_f64)
                    && n.fract() == 0.0
                    && n.abs() < 1e15
                {
                    map.insert(bound.into(), Value::from(n as i64));
                }
            }
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    // Property names, not keywords: a property may be called `default`.
                    ("properties" | "patternProperties" | "definitions", Value::Object(named)) => {
                        named.values_mut().for_each(tidy)
                    }
                    // Values, not schemas.
                    ("default" | "enum" | "example", _) => {}
                    (_, value) => tidy(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{generated, tidy};
    use serde_json::json;

    #[test]
    fn tidying_drops_defaults_and_float_bounds_but_never_a_property_named_like_a_keyword() {
        let mut schema = json!({"type": "object", "default": {}, "properties": {
            "default": {"type": "object", "default": [], "properties": {"x": {"type": "string", "default": "a"}}},
            "maximum": {"type": "integer", "maximum": 1024.0, "minimum": 0.5},
        }});
        tidy(&mut schema);
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {
                "default": {"type": "object", "properties": {"x": {"type": "string", "default": "a"}}},
                "maximum": {"type": "integer", "maximum": 1024, "minimum": 0.5},
            }})
        );
    }
    use std::path::Path;

    /// Fails when a type changed and the files were not regenerated (or the reverse).
    #[test]
    fn the_crd_files_are_what_the_types_generate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
        for (name, want) in generated() {
            let have = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            assert!(
                have == want,
                "host/deploy/crds/{name} differs from what the types generate: run \
                 `cargo run -p kubeplug -- crds --out host/deploy/crds`"
            );
        }
    }

    /// The rules the API server enforces for the host come from the types' attributes.
    #[test]
    fn the_generated_schema_keeps_the_bounds() {
        let all: String = generated().into_iter().map(|(_, y)| y).collect();
        for needle in [
            "has(self.configMap) != has(self.image)",
            "x-kubernetes-preserve-unknown-fields: true",
            "maxLength: 253",
            "pattern: ^[0-9a-fA-F]{64}$",
            "x-kubernetes-list-type: map",
            "- patch-status",
            "maximum: 1024",
        ] {
            assert!(all.contains(needle), "{needle} missing from the CRDs");
        }
    }
}
