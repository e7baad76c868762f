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

/// What writing a status came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusWrite {
    /// The API server took it: the object's resourceVersion after it.
    Written(String),
    /// The object changed since `read_back` was read (409 Conflict): nothing was written, and
    /// a pass on the newer object must decide again (another writer's change may be a
    /// forgery, which a write computed from the older read would half keep and never note).
    Conflict,
    /// Refused or not answered (logged).
    Failed,
}

/// Sends `status` as a merge patch of the status subresource that replaces `read_back`, read
/// at `resource_version` (a precondition: another write since is a conflict, not merged).
pub async fn write_status(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    status: &Value,
    read_back: Option<&Value>,
    resource_version: Option<&str>,
) -> StatusWrite {
    let body = replacing_patch(status, read_back);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut patch = json!({ "status": body });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(written) => StatusWrite::Written(written.metadata.resource_version.unwrap_or_default()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(kind = %resource.kind, namespace = ?namespace, name, "status not written: the object changed since it was read");
            StatusWrite::Conflict
        }
        Err(err) => {
            tracing::warn!(kind = %resource.kind, namespace = ?namespace, name, "cannot write status: {err}");
            StatusWrite::Failed
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin_objects::crds::generated;
    use crate::plugin_objects::source::plugin_resource;

    /// A forgery that lands between the host's read and its write is not merged into (a
    /// field the older read lacked would survive a patch computed from it, unnoted): the
    /// write is a conflict, and the write computed from the forged status replaces it.
    #[tokio::test]
    async fn a_status_write_from_an_older_read_conflicts_instead_of_merging_a_forgery() {
        let sim = kubeplug_sim::Sim::start().await.unwrap();
        let (_, plugins) = &generated()[0];
        sim.apply_yaml(plugins).unwrap();
        let stored = sim
            .apply_yaml(
                "apiVersion: kubeplug.dev/v1alpha1\nkind: Plugin\nmetadata: {name: p, namespace: team-a}\nspec: {module: {configMap: {name: m}}}\n",
            )
            .unwrap();
        let read_rv = stored[0]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let client = sim.client().unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "team-a", &plugin_resource());
        let forged = json!({"status": {"observedGeneration": 1, "runner": "a tenant"}});
        let after = api
            .patch_status("p", &PatchParams::default(), &Patch::Merge(forged))
            .await
            .unwrap();
        let status = json!({"observedGeneration": 1});
        let resource = plugin_resource();
        let write = |read_back, rv| {
            let (client, resource, status) = (&client, &resource, &status);
            async move {
                write_status(client, resource, Some("team-a"), "p", status, read_back, rv).await
            }
        };
        assert_eq!(
            write(None, Some(read_rv.as_str())).await,
            StatusWrite::Conflict
        );
        let kept = sim.get("plugins", Some("team-a"), "p").unwrap();
        assert_eq!(kept["status"]["runner"], "a tenant", "nothing was written");
        let read_back = after.data.get("status");
        let rv = after.metadata.resource_version.as_deref();
        assert!(matches!(
            write(read_back, rv).await,
            StatusWrite::Written(_)
        ));
        let now = sim.get("plugins", Some("team-a"), "p").unwrap();
        assert_eq!(now["status"], json!({"observedGeneration": 1}));
    }
}
