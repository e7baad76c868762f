//! Connecting to the API server the way Kubernetes users expect: `--kubeconfig`, `--context`,
//! `KUBECONFIG`, `~/.kube/config`, then the in-cluster service account.

use anyhow::Context;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::PathBuf;

/// Flags that pick the cluster and its scope.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster config).
    #[arg(long, env = "KUBEPLUG_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: its current context).
    #[arg(long, env = "KUBEPLUG_CONTEXT")]
    pub context: Option<String>,
    /// Watch and act in this namespace only (default: all namespaces).
    #[arg(long, short = 'n', env = "KUBEPLUG_NAMESPACE")]
    pub namespace: Option<String>,
}

/// A client for the cluster the flags name, checked to answer; errors say which source
/// failed and why.
pub async fn connect(args: &ClusterArgs) -> anyhow::Result<kube::Client> {
    connect_as(args, concat!("kubeplug/", env!("CARGO_PKG_VERSION"))).await
}

/// [`connect`], sending `user_agent` with every request (a replica's identity in it tells
/// replicas apart in the API server's logs).
pub async fn connect_as(args: &ClusterArgs, user_agent: &str) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("cannot load the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        None => kube::Config::infer()
            .await
            .context("no cluster configured: no $KUBECONFIG, ~/.kube/config or in-cluster service account (try --embedded)")?,
    };
    let mut config = config;
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_str(user_agent)
            .with_context(|| format!("invalid user agent {user_agent:?}"))?,
    ));
    let url = config.cluster_url.to_string();
    let url = url.trim_end_matches('/');
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    client
        .apiserver_version()
        .await
        .with_context(|| format!("cannot reach the API server at {url}"))?;
    Ok(client)
}
