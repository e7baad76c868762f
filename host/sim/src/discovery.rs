//! Discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`) in
//! the legacy (non-aggregated) format, which kubectl and kube-rs fall back to.

use super::kinds::Registry;
use serde_json::{Value, json};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "35", "gitVersion": "v1.35.0-kubeplug-sim", "gitCommit": "",
        "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "rust",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `/apis`.
pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>` (one group).
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let list = groups(registry);
    list["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == name)
        .map(|g| {
            let mut g = g.clone();
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api/v1` or `/apis/<group>/<version>`; `None` when nothing is served there.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for k in registry
        .all()
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        let mut r = json!({
            "name": k.plural, "singularName": k.singular, "namespaced": k.namespaced,
            "kind": k.kind, "verbs": VERBS,
        });
        if !k.short_names.is_empty() {
            r["shortNames"] = json!(k.short_names);
        }
        if matches!(k.kind.as_str(), "Deployment" | "Pod") && k.builtin {
            r["categories"] = json!(["all"]);
        }
        resources.push(r);
        if k.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", k.plural), "singularName": "", "namespaced": k.namespaced,
                "kind": k.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if k.scale_subresource {
            resources.push(json!({
                "name": format!("{}/scale", k.plural), "singularName": "", "namespaced": k.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
