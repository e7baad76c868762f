//! Kubernetes Events on `Plugin` objects: a load, a failure (once per reason and
//! generation), the first denial of each kind of grant. Written by the replica that writes
//! the Plugin's status, so replicas never repeat each other; a failed write is logged and
//! dropped (an Event is a notice, never a reason to retry).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Api;
use kube::api::PostParams;

/// The Plugin an Event is about.
#[derive(Debug, Clone)]
pub struct Regarding {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid (what `kubectl describe` selects Events by).
    pub uid: Option<String>,
    /// Its resourceVersion when the Event was decided.
    pub resource_version: Option<String>,
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something went as it should.
    Normal,
    /// Something needs the tenant's attention.
    Warning,
}

/// Records an Event about `regarding`.
pub async fn record(
    client: &kube::Client,
    regarding: &Regarding,
    type_: EventType,
    reason: &str,
    message: &str,
    reporter: &str,
) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", regarding.name)),
            namespace: Some(regarding.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(format!("{}/{}", super::spec::GROUP, super::spec::VERSION)),
            kind: Some("Plugin".into()),
            name: Some(regarding.name.clone()),
            namespace: Some(regarding.namespace.clone()),
            uid: regarding.uid.clone(),
            resource_version: regarding.resource_version.clone(),
            ..ObjectReference::default()
        },
        type_: Some(
            match type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        reason: Some(reason.into()),
        message: Some(super::refusal::one_line(message, 1024)),
        source: Some(EventSource {
            component: Some("kubeplug".into()),
            host: None,
        }),
        reporting_component: Some("kubeplug.dev/host".into()),
        reporting_instance: Some(super::refusal::one_line(reporter, 128)),
        action: Some("Load".into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &regarding.namespace);
    if let Err(err) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(plugin = %format!("{}/{}", regarding.namespace, regarding.name), reason, "cannot record an Event on the Plugin: {err}");
    }
}
