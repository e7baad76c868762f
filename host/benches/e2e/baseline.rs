//! The kube-rs controller the bench measures kubeplug against: a `Controller` with its own
//! watch and store, calling the image-pinner code natively. It runs as this bench binary
//! re-executed with [`BASELINE_ENV`] set, so it is its own process as a user's operator is.

use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::controller::{Action as Requeue, Controller};
use kubeplug_sdk::{Action, Reconciler};
use serde_json::Value;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set in the child that runs the kube-rs controller: the kubeconfig to use.
pub const BASELINE_ENV: &str = "KUBEPLUG_E2E_BASELINE_KUBECONFIG";
/// Set in a child that reports its no-op rate: the number of reconciles to time. It prints
/// `noop <reconciles> <seconds>`, from its first reconcile's start to that many ends.
pub const NOOP_ENV: &str = "KUBEPLUG_E2E_BASELINE_NOOP";

#[derive(Debug, thiserror::Error)]
enum BaselineError {
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("plugin: {0:?}")]
    Plugin(String),
}

/// What the reconciles share: the client, and the no-op clock when one is asked for.
struct Context {
    client: kube::Client,
    count: AtomicUsize,
    first: Mutex<Option<Instant>>,
    report_at: Option<usize>,
}

/// Runs the controller until the process is killed.
pub fn run(kubeconfig: &str) {
    use futures::StreamExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<Deployment> = kube::Api::all(client.clone());
        let context = Arc::new(Context {
            client,
            count: AtomicUsize::new(0),
            first: Mutex::new(None),
            report_at: std::env::var(NOOP_ENV).ok().and_then(|v| v.parse().ok()),
        });
        Controller::new(api, kube::runtime::watcher::Config::default())
            .run(
                reconcile,
                |_, _, _| Requeue::requeue(Duration::from_secs(1)),
                context,
            )
            .for_each(|_| async {})
            .await;
    });
}

async fn reconcile(d: Arc<Deployment>, context: Arc<Context>) -> Result<Requeue, BaselineError> {
    if context.report_at.is_some() {
        context
            .first
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
    }
    let result = pin(&d, &context.client).await;
    let done = context.count.fetch_add(1, Ordering::SeqCst) + 1;
    if context.report_at == Some(done) {
        let first = context.first.lock().unwrap().expect("set above");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "noop {done} {}", first.elapsed().as_secs_f64());
        let _ = out.flush();
    }
    result
}

/// image-pinner's logic, natively: the same request a plugin gets, its patches sent.
async fn pin(d: &Deployment, client: &kube::Client) -> Result<Requeue, BaselineError> {
    let namespace = d.metadata.namespace.clone();
    let name = d.metadata.name.clone().unwrap_or_default();
    let request = kubeplug_sdk::Request {
        target: kubeplug_sdk::ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: namespace.clone(),
            name: name.clone(),
        },
        object: Some(serde_json::to_string(d)?),
        previous: None,
        reason: kubeplug_sdk::Reason::Changed,
        attempt: 1,
        config: None,
    };
    let actions = image_pinner::ImagePinner::reconcile(request)
        .map_err(|e| BaselineError::Plugin(format!("{e:?}")))?;
    let api: kube::Api<Deployment> =
        kube::Api::namespaced(client.clone(), namespace.as_deref().unwrap_or("default"));
    for action in actions {
        if let Action::Patch(p) = action {
            let body: Value = serde_json::from_str(&p.body)?;
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(&body),
            )
            .await?;
        }
    }
    Ok(Requeue::await_change())
}
