//! The bench's inputs on disk: N copies of the ~6 KB fixture Deployment for the sim to load,
//! and plugin directories holding copies of image-pinner under a policy each.

use crate::harness::NAMESPACE;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The fixture Deployment of `tests/fixtures`.
pub fn fixture() -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/deployment-6k.json"),
    )
    .expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// Writes `n` copies of the fixture (`d00000`…) under `dir`, for the sim to load at start,
/// 200 per file (the loader bounds the YAML nodes of one file), built one file at a time: a
/// parsed copy takes about 68 KB, so 100,000 held at once took 6.8 GB.
pub fn write_objects(dir: &Path, n: usize) -> PathBuf {
    let base = fixture();
    std::fs::create_dir_all(dir).unwrap();
    for (file, start) in (0..n).step_by(200).enumerate() {
        let docs: Vec<String> = (start..(start + 200).min(n))
            .map(|i| {
                let mut d = base.clone();
                let meta = d["metadata"].as_object_mut().unwrap();
                for field in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
                    meta.remove(field);
                }
                meta.insert("name".into(), format!("d{i:05}").into());
                meta.insert("namespace".into(), NAMESPACE.into());
                d.as_object_mut().unwrap().remove("status");
                d.to_string()
            })
            .collect();
        std::fs::write(
            dir.join(format!("deployments-{file:03}.yaml")),
            docs.join("\n---\n"),
        )
        .unwrap();
    }
    dir.to_path_buf()
}

/// A plugins directory with `count` copies of image-pinner (`image-pinner-0`…), each with
/// the same policy under its own name: `count` independent controllers of Deployments.
pub fn write_plugins(dir: &Path, count: usize) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let built = std::env::var_os("KUBEPLUG_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
        .join("image-pinner.wasm");
    assert!(built.exists(), "run `make plugins` first");
    for i in 0..count {
        let name = format!("image-pinner-{i}");
        std::fs::copy(&built, dir.join(format!("{name}.wasm"))).unwrap();
        std::fs::write(
            dir.join(format!("{name}.policy.yaml")),
            format!("apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: {name}}}\nspec:\n  mode: enforce\n  namespaces: {{all: true}}\n  rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]\n  limits: {{writesPerSecond: 100000, writeBurst: 100000}}\n  config: {{image: \"nginx:1.13\"}}\n"),
        )
        .unwrap();
    }
    dir.to_path_buf()
}
