//! Helpers both the API tests and the fault schedule tests use.

use k8s_openapi::api::coordination::v1::Lease;
use kubeplug_sim::Sim;
use serde_json::{Value, json};
use std::time::Duration;

/// A sim with fast status and bookmarks.
pub async fn sim() -> anyhow::Result<Sim> {
    Ok(Sim::builder()
        .status_delay(Duration::from_millis(50))
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await?)
}

/// A Lease `name` with these labels, held by `name`.
pub fn lease(name: &str, labels: Value) -> Lease {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"holderIdentity": name}}),
    )
    .expect("valid lease")
}

/// The HTTP status of an API error (`None` for any other error).
pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}
