//! sample-controller: Kubernetes' sample-controller as a plugin.
//!
//! For each `Foo` (`samplecontroller.k8s.io/v1alpha1`): keep a Deployment named
//! `spec.deploymentName` with `spec.replicas` replicas of `nginx:latest`, controlled by the
//! Foo; copy the Deployment's `availableReplicas` into the Foo's status; report `Synced`.
//! A Deployment of that name the Foo does not control is left alone and reported as
//! `ErrResourceExists`. A change to an owned Deployment re-queues its Foo (the host routes by
//! owner reference); a deleted Foo's Deployment goes by garbage collection.
//!
//! Where it differs from the Go original: `Synced` is reported only by calls that wrote
//! something (the original reports it on every sync, resyncs included); on
//! `ErrResourceExists` the Foo is looked at again after 30 s (the original returns an error
//! and retries with exponential backoff, reporting the event on each retry); a Deployment the
//! Foo controls under a previous `deploymentName` is deleted (the original leaves it running
//! until the Foo goes).

use k8s_openapi::api::apps::v1::Deployment;
use kubeplug_sdk::{
    Action, CustomResource, Error, EventType, KindRef, Metadata, Reconciler, Request, children,
    custom_kind, host,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

/// The desired state of a Foo.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment the Foo keeps.
    #[serde(default)]
    pub deployment_name: String,
    /// Its replicas; absent leaves the Deployment's default (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// The observed state of a Foo.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// The Deployment's `status.availableReplicas`.
    #[serde(default)]
    pub available_replicas: i32,
}

custom_kind!(
    FooSpec,
    status = FooStatus,
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    plural = "foos"
);

/// A Foo object.
pub type Foo = CustomResource<FooSpec>;

/// How long until a Foo whose Deployment name is taken is looked at again.
const RECHECK_TAKEN: Duration = Duration::from_secs(30);

/// The sample-controller reconciler.
pub struct SampleController;

impl Reconciler for SampleController {
    fn metadata() -> Metadata {
        Metadata::new("sample-controller", env!("CARGO_PKG_VERSION"))
            .reconciles::<Foo>()
            .owns::<Deployment>()
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let Some(parent) = req.object::<Foo>()? else {
            return Ok(Vec::new()); // its Deployment goes by garbage collection
        };
        let name = &parent.spec.deployment_name;
        if name.is_empty() {
            return Err(Error::permanent(format!(
                "{}: deployment name must be specified",
                req.key()
            )));
        }
        let kind = KindRef::of::<Deployment>();
        let namespace = parent.metadata.namespace.as_deref();
        let foo_name = parent.metadata.name.clone().unwrap_or_default();
        // Deployments this Foo may control (by label), and whatever holds the wanted name.
        let mut existing: Vec<Value> =
            host::list(&kind, namespace, Some(&format!("controller={foo_name}")))?;
        let named: Option<Value> = host::get(&kind, namespace, name)?;
        if let Some(d) = &named
            && !existing.iter().any(|e| e["metadata"]["name"] == *name)
        {
            existing.push(d.clone());
        }
        let plan = children::plan(
            &parent,
            &kind,
            vec![new_deployment(&parent, &foo_name)],
            &existing,
        )?;
        if !plan.conflicts.is_empty() {
            let message = format!("Resource {name} already exists and is not managed by Foo");
            return Ok(vec![
                Action::event(
                    &req.target,
                    EventType::Warning,
                    "ErrResourceExists",
                    message,
                ),
                Action::requeue_after(RECHECK_TAKEN),
            ]);
        }
        let available = named
            .and_then(|d| serde_json::from_value::<Deployment>(d).ok())
            .and_then(|d| d.status?.available_replicas)
            .unwrap_or(0);
        let mut actions = plan.actions();
        actions.extend(parent.update_status(FooStatus {
            available_replicas: available,
        })?);
        if !actions.is_empty() {
            let synced = "Foo synced successfully";
            actions.push(Action::event(
                &req.target,
                EventType::Normal,
                "Synced",
                synced,
            ));
        }
        Ok(actions)
    }
}

/// The Deployment a Foo wants: `nginx:latest`, labelled `app: nginx, controller: <foo>`.
fn new_deployment(parent: &Foo, foo_name: &str) -> Value {
    let labels = json!({"app": "nginx", "controller": foo_name});
    let mut spec = json!({
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}},
    });
    if let Some(replicas) = parent.spec.replicas {
        spec["replicas"] = json!(replicas);
    }
    json!({"metadata": {"name": parent.spec.deployment_name, "labels": labels}, "spec": spec})
}

kubeplug_sdk::export!(SampleController);
