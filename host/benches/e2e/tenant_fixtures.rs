//! The tenants phase's inputs: for each tenant namespace a ConfigMap holding image-pinner,
//! a `Plugin` running it with a config of its own (so each is a distinct revision of one
//! module digest), and small Deployments; one `PluginPolicy` bounding them all. The
//! objects are written as files for the sim to load at start, or as JSON to send it.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The Plugins' API path on the sim.
pub const PLUGINS: &str = "/apis/kubeplug.dev/v1alpha1/plugins";
/// The fields image-pinner patches, which every Plugin here asks for.
pub const PINNED_FIELDS: [&str; 2] = [
    "/spec/template/spec/containers/*/name",
    "/spec/template/spec/containers/*/image",
];

/// The name of tenant `i`'s namespace (`t0000`…).
pub fn namespace(i: usize) -> String {
    format!("t{i:04}")
}

/// The name of tenant `i`'s Deployment `j`: unique across namespaces, as the bench matches
/// changes to patches by name.
pub fn deployment_name(i: usize, j: usize) -> String {
    format!("q{i:04}-{j}")
}

/// The CRD files of Plugin and PluginPolicy, for the sim to serve.
pub fn crds() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    vec![dir.join("plugins.yaml"), dir.join("pluginpolicies.yaml")]
}

/// A built module: `plugins/NAME.wasm` (image-pinner) or `test-plugins/NAME.wasm` (the
/// hostile guest), from `KUBEPLUG_PLUGIN_DIR` / `KUBEPLUG_TEST_PLUGIN_DIR` when set.
pub fn module(name: &str) -> Vec<u8> {
    let (env, sub) = match name {
        "hostile" => ("KUBEPLUG_TEST_PLUGIN_DIR", "test-plugins"),
        _ => ("KUBEPLUG_PLUGIN_DIR", "plugins"),
    };
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target")
                .join(sub)
        })
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run `make plugins test-plugins`, or set {env})",
            path.display()
        )
    })
}

/// `bytes` (a component) with a custom section appended: the same plugin under another
/// digest, a new revision to compile.
pub fn with_custom_section(bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let name = b"kubeplug-bench";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    assert!(section.len() < 128, "one-byte LEB128 size");
    let mut out = bytes.to_vec();
    out.push(0);
    out.push(section.len() as u8);
    out.extend(section);
    out
}

/// A ConfigMap `name` in `ns` holding `wasm` under `binaryData` key `plugin.wasm`, as
/// `kubectl create configmap --from-file=plugin.wasm=FILE` writes it.
pub fn config_map(ns: &str, name: &str, wasm: &[u8]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "binaryData": {"plugin.wasm": k8s_openapi::ByteString(wasm.to_vec())},
    })
}

/// A Plugin `name` in `ns` running the module of ConfigMap `module` with `config`, asking
/// to patch `fields` of Deployments.
pub fn plugin(ns: &str, name: &str, module: &str, config: Value, fields: &[&str]) -> Value {
    json!({
        "apiVersion": "kubeplug.dev/v1alpha1",
        "kind": "Plugin",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "module": {"configMap": {"name": module}},
            "config": config,
            "permissions": {"rules": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "verbs": ["patch"],
                "fields": fields,
            }]},
        },
    })
}

/// A PluginPolicy `name` letting the Plugins of `namespaces` patch their Deployments'
/// container names and images and write Events, in enforce mode; with `limits` when given
/// (`{writesPerSecond, writeBurst}`), else the host's defaults.
pub fn policy(name: &str, namespaces: &[String], limits: Option<Value>) -> Value {
    let mut policy = json!({
        "apiVersion": "kubeplug.dev/v1alpha1",
        "kind": "PluginPolicy",
        "metadata": {"name": name},
        "spec": {
            "mode": "enforce",
            "appliesTo": {"names": namespaces},
            "rules": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "verbs": ["patch", "event"],
                "fields": PINNED_FIELDS,
            }],
        },
    });
    if let Some(limits) = limits {
        policy["spec"]["limits"] = limits;
    }
    policy
}

/// A small Deployment (one container `app`, image `alpine`: it needs image-pinner's patch),
/// about 400 bytes, so that RSS per Plugin is not mostly cached Deployments.
pub fn deployment(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "alpine"}]},
            },
        },
    })
}

/// What the tenants' namespaces hold beside their module ConfigMaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugins {
    /// No Plugin: the host's RSS without them.
    None,
    /// A Plugin each whose module ConfigMap does not exist: each refused and reported,
    /// never loaded. (A Plugin no PluginPolicy covers still loads, in dry-run mode.)
    Refused,
    /// A Plugin each, granted: each loaded and running.
    Running,
}

/// Writes `tenants` tenants' policy, ConfigMaps and (unless [`Plugins::None`]) Plugins under
/// `dir` for the sim to load, 20 tenants per file (each ConfigMap holds the module's ~270 KB
/// of base64). Tenant `i`'s Plugin pins to `nginx:1.<i>`: its own config, its own revision.
pub fn write_tenants(dir: &Path, tenants: usize, plugins: Plugins) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let names: Vec<String> = (0..tenants).map(namespace).collect();
    let module_name = match plugins {
        Plugins::Refused => "absent",
        Plugins::None | Plugins::Running => "pinner",
    };
    std::fs::write(
        dir.join("policy.yaml"),
        policy("tenants", &names, None).to_string(),
    )
    .unwrap();
    let pinner = module("image-pinner");
    for (file, start) in (0..tenants).step_by(20).enumerate() {
        let mut docs = Vec::new();
        for i in start..(start + 20).min(tenants) {
            let ns = namespace(i);
            docs.push(config_map(&ns, "pinner", &pinner).to_string());
            if plugins != Plugins::None {
                let config = json!({"image": format!("nginx:1.{i}")});
                docs.push(plugin(&ns, "pinner", module_name, config, &PINNED_FIELDS).to_string());
            }
        }
        std::fs::write(
            dir.join(format!("tenants-{file:03}.yaml")),
            docs.join("\n---\n"),
        )
        .unwrap();
    }
    dir.to_path_buf()
}
