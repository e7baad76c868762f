//! The embedded API server over HTTPS (`Sim::builder().tls(true)`), through real kube
//! clients: the sim's own client and one read from the kubeconfig it writes trust its CA and
//! list, watch and send their tokens over TLS; a client that does not trust the CA is refused
//! at the handshake.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubeplug_sim::Sim;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_clients_list_and_watch_over_tls_trusting_the_sims_ca() -> anyhow::Result<()> {
    let sim = Sim::builder().tls(true).start().await?;
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let ca = sim.ca_pem().expect("a CA when serving TLS");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");

    let client = sim.client()?;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let names: Vec<_> = namespaces
        .items
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    assert!(names.contains(&"default"), "{names:?}");

    // A watch streams over the TLS connection.
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = maps
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut events = maps
        .watch(&WatchParams::default().timeout(60), &rv)
        .await?
        .boxed();
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "m"}}))?;
    maps.create(&PostParams::default(), &map).await?;
    loop {
        match events.try_next().await? {
            Some(WatchEvent::Added(added)) if added.metadata.name.as_deref() == Some("m") => {
                break;
            }
            Some(_) => {}
            None => anyhow::bail!("the watch ended before the ConfigMap was added"),
        }
    }

    // A client from the kubeconfig the sim writes (https URL, certificate-authority-data).
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path)?;
    let text = std::fs::read_to_string(&path)?;
    assert!(text.contains("certificate-authority-data:"), "{text}");
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&path)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let from_file = kube::Client::try_from(config)?;
    assert_eq!(
        Api::<ConfigMap>::namespaced(from_file, "default")
            .get("m")
            .await?
            .metadata
            .name
            .as_deref(),
        Some("m")
    );

    // Without the sim's CA, the handshake fails: no API answer at all.
    let mut untrusting = sim.kube_config()?;
    untrusting.root_cert = None;
    let err = Api::<Namespace>::all(kube::Client::try_from(untrusting)?)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_authenticate_over_tls() -> anyhow::Result<()> {
    let sim = Sim::builder()
        .tls(true)
        .rbac(true)
        .manifest("apiVersion: v1\nkind: Namespace\nmetadata: {name: t1}\n")
        .start()
        .await?;
    let admin = Api::<Secret>::namespaced(sim.client()?, "t1");
    assert!(admin.list(&ListParams::default()).await?.items.is_empty());
    let tenant = sim.client_with_token(&sim.service_account_token("t1", "app"))?;
    let err = Api::<Secret>::namespaced(tenant, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 403),
        "{err}"
    );
    let stranger = sim.client_with_token("not-a-token")?;
    let err = Api::<Secret>::namespaced(stranger, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 401),
        "{err}"
    );
    Ok(())
}
