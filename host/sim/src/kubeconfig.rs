//! Kubeconfig for a running sim: plain HTTP on loopback, with a bearer token when the sim
//! authenticates (`Sim::builder().rbac(true)`).

use kube::config::Kubeconfig;
use serde_json::json;

/// Context, cluster and user name used in the generated kubeconfig.
pub const CONTEXT: &str = "kubeplug-sim";

/// A kubeconfig whose current context points at `url` with namespace `default`, sending
/// `token` as its bearer token when given.
pub fn build(url: &str, token: Option<&str>) -> Result<Kubeconfig, serde_json::Error> {
    let user = match token {
        Some(token) => json!({"token": token}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
    }))
}

/// The kubeconfig as YAML text (kubectl reads it with `--kubeconfig` or `KUBECONFIG`).
pub fn to_yaml(config: &Kubeconfig) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(config)
}
