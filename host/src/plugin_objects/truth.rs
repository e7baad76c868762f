//! Writing a status the host owns: the write replaces the status read back (every key the
//! host does not write is removed, at any depth), and a forgery found in what was read back
//! is noted once as a Warning Event naming the fields, never their values.

use super::events::{EventType, Regarding, record};
use super::forgery::replacing_patch;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The reason of the Event that notes a forged status.
pub const STATUS_OVERWRITTEN: &str = "StatusOverwritten";

/// Sends `status` as a merge patch of the status subresource that replaces `read_back`; the
/// object's resourceVersion after it, if the API server took it.
pub async fn write_status(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    status: &Value,
    read_back: Option<&Value>,
) -> Option<String> {
    let body = replacing_patch(status, read_back);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let patch = Patch::Merge(json!({ "status": body }));
    match api
        .patch_status(name, &PatchParams::default(), &patch)
        .await
    {
        Ok(written) => Some(written.metadata.resource_version.unwrap_or_default()),
        Err(err) => {
            tracing::warn!(kind = %resource.kind, namespace = ?namespace, name, "cannot write status: {err}");
            None
        }
    }
}

/// Notes (log and Warning Event) that the status read back had `fields` the host did not
/// write, which the host's write replaced.
pub async fn note_forgery(
    client: &kube::Client,
    regarding: &Regarding,
    fields: &[String],
    reporter: &str,
) {
    let plugin = format!("{}/{}", regarding.namespace, regarding.name);
    tracing::warn!(%plugin, fields = %fields.join(","), "the Plugin's status had fields kubeplug did not write: rebuilt from its own record");
    let message = format!(
        "{} did not hold what kubeplug wrote; rewritten from kubeplug's own record (only kubeplug writes a Plugin's status)",
        fields.join(", ")
    );
    record(
        client,
        regarding,
        EventType::Warning,
        STATUS_OVERWRITTEN,
        &message,
        reporter,
    )
    .await;
}
