//! Kubeconfig for a running sim on loopback: with a bearer token when the sim authenticates
//! (`Sim::builder().rbac(true)`), and its CA when it serves TLS (`Sim::builder().tls(true)`).

use base64::Engine;
use kube::config::Kubeconfig;
use serde_json::json;

/// Context, cluster and user name used in the generated kubeconfig.
pub const CONTEXT: &str = "kubeplug-sim";

/// A kubeconfig whose current context points at `url` with namespace `default`, sending
/// `token` as its bearer token and trusting the CA certificate `ca_pem` when given.
pub fn build(
    url: &str,
    token: Option<&str>,
    ca_pem: Option<&str>,
) -> Result<Kubeconfig, serde_json::Error> {
    let user = match token {
        Some(token) => json!({"token": token}),
        None => json!({}),
    };
    let mut cluster = json!({"server": url});
    if let Some(pem) = ca_pem {
        cluster["certificate-authority-data"] =
            base64::engine::general_purpose::STANDARD.encode(pem).into();
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
    }))
}

/// The kubeconfig as YAML text (kubectl reads it with `--kubeconfig` or `KUBECONFIG`). Long
/// values (the CA's data) stay plain one-line scalars rather than folded blocks, so that a
/// line-oriented `grep` finds them whole.
pub fn to_yaml(config: &Kubeconfig) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(config, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_and_the_token_go_where_kubectl_reads_them() {
        let config = build("https://127.0.0.1:1", Some("t"), Some("PEM")).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:1"));
        let data = cluster.certificate_authority_data.as_deref().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        assert_eq!(decoded, b"PEM");
        let yaml = to_yaml(&config).unwrap();
        assert!(yaml.contains("certificate-authority-data:"), "{yaml}");
        // A real CA's data stays on one line (`kubeplug sim` prints a grep for it).
        let pem = "A".repeat(800);
        let config = build("https://127.0.0.1:1", None, Some(&pem)).unwrap();
        let data = config.clusters[0].cluster.as_ref().unwrap();
        let data = data.certificate_authority_data.as_deref().unwrap();
        let line = format!("certificate-authority-data: {data}\n");
        let yaml = to_yaml(&config).unwrap();
        assert!(yaml.contains(&line), "{yaml}");
        let plain = build("http://127.0.0.1:1", None, None).unwrap();
        let cluster = plain.clusters[0].cluster.as_ref().unwrap();
        assert!(cluster.certificate_authority_data.is_none());
    }
}
