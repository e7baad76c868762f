//! Discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`) in
//! the legacy (non-aggregated) format, which kubectl and kube-rs fall back to; and OpenAPI v3
//! documents that describe operations (and custom kinds' schemas), enough for kubectl's
//! default `--validate=strict` to see that the server does field validation itself.

use super::access_review::REVIEWS;
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

/// `/apis`: the registry's groups, then the review APIs' (`authorization.k8s.io`,
/// `authentication.k8s.io`).
pub fn groups(registry: &Registry) -> Value {
    let mut all = registry.groups();
    for review in REVIEWS {
        if !all.iter().any(|(g, _)| g == review.group) {
            all.push((review.group.to_string(), vec!["v1".to_string()]));
        }
    }
    let groups: Vec<Value> = all
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
    if version == "v1" {
        for review in REVIEWS.iter().filter(|r| r.group == group) {
            resources.push(json!({
                "name": review.plural, "singularName": review.kind.to_lowercase(),
                "namespaced": review.namespaced, "kind": review.kind, "verbs": ["create"],
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

/// `/openapi/v3`: one document per served group version, its URL carrying a hash of what it
/// lists (kubectl caches the documents by that URL).
pub fn openapi_root(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    let mut versions: Vec<(String, String)> = vec![(String::new(), "v1".into())];
    for (group, vs) in registry.groups() {
        versions.extend(vs.into_iter().map(|v| (group.clone(), v)));
    }
    for (group, version) in versions {
        let Some(doc) = openapi(registry, &group, &version) else {
            continue;
        };
        let key = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            doc.to_string().hash(&mut h);
            format!("{:016X}", h.finish())
        };
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`: for each kind, its object
/// path with a PATCH operation that names the kind and accepts `fieldValidation` (the sim
/// accepts and ignores it: see README), and no request body types, so kubectl neither
/// validates on the client nor builds strategic merge patches from it; custom kinds' schemas
/// are published (for `kubectl explain`), built-in kinds have none.
pub fn openapi(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for k in registry
        .all()
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        if let Some(schema) = &k.schema {
            // A CRD's schema, as the real server publishes it (`kubectl explain` reads it).
            let reversed: Vec<&str> = group.split('.').rev().collect();
            let mut schema = (**schema).clone();
            schema["x-kubernetes-group-version-kind"] =
                json!([{"group": group, "version": version, "kind": k.kind}]);
            schemas.insert(
                format!("{}.{version}.{}", reversed.join("."), k.kind),
                schema,
            );
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if k.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.plural)
        } else {
            format!("{prefix}/{}/{{name}}", k.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": k.kind});
        let parameter =
            |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
        paths.insert(
            path,
            json!({"patch": {
                "operationId": format!("patch{}", k.kind),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [parameter("dryRun"), parameter("fieldManager"),
                    parameter("fieldValidation"), parameter("force")],
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0-kubeplug-sim"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
