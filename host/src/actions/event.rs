//! Kubernetes Events (events.k8s.io/v1) for plugin event actions.

use crate::contract::event_fields;
use crate::contract::{EventType, ObjectRef};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

/// What an event says, from a plugin's event action.
pub(crate) struct EventSpec<'a> {
    pub regarding: &'a ObjectRef,
    pub event_type: EventType,
    pub reason: &'a str,
    pub message: &'a str,
    pub action: &'a str,
}

/// Builds the Event, reported by `kubeplug/<plugin>` from the host named `host_name`.
pub(crate) fn build(spec: &EventSpec<'_>, plugin: &str, host_name: &str) -> Event {
    let note = event_fields::note(spec.message).into_owned();
    let r = spec.regarding;
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", r.name)),
            // A cluster-scoped object's events go where the checker and the request target
            // say they go.
            namespace: Some(
                r.namespace
                    .clone()
                    .unwrap_or_else(|| super::target::CLUSTER_EVENT_NAMESPACE.into()),
            ),
            ..Default::default()
        },
        event_time: Some(MicroTime(jiff::Timestamp::now())),
        reporting_controller: Some(format!("kubeplug/{plugin}")),
        reporting_instance: Some(host_name.to_string()),
        action: Some(spec.action.to_string()),
        reason: Some(spec.reason.to_string()),
        note: Some(note),
        type_: Some(match spec.event_type {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        regarding: Some(ObjectReference {
            api_version: Some(r.api_version.clone()),
            kind: Some(r.kind.clone()),
            namespace: r.namespace.clone(),
            name: Some(r.name.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_plugin_and_truncates_long_notes() {
        let target = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let message = "é".repeat(1000);
        let spec = EventSpec {
            regarding: &target,
            event_type: EventType::Warning,
            reason: "Pinned",
            message: &message,
            action: "Patch",
        };
        let e = build(&spec, "image-pinner", "host-1");
        assert_eq!(
            e.reporting_controller.as_deref(),
            Some("kubeplug/image-pinner")
        );
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.metadata.generate_name.as_deref(), Some("web."));
        let note = e.note.unwrap();
        assert!(note.len() <= event_fields::MAX_NOTE_BYTES);
        assert!(note.ends_with(event_fields::NOTE_CUT_MARKER));
    }
}
