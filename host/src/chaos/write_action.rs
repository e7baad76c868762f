//! A host's write, read back from the sim's request log as the plugin action that caused it,
//! so the host's own policy checker can judge it: which plugin sent it (the field manager
//! `kubeplug/<plugin>` of patches and creates, the `reportingController` of Events; deletes
//! carry neither) and the action with the plugin's body (the host's fence, a
//! `metadata.resourceVersion` it adds after its policy check, taken out again).

use crate::contract::{Action, EventType, ObjectRef, PatchType, Scope};
use kubeplug_sim::RequestRecord;
use serde_json::Value;

/// The prefix of the field manager (and Event `reportingController`) naming a plugin.
const MANAGER_PREFIX: &str = "kubeplug/";

/// A write as its plugin asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteAction {
    /// The plugin that sent it, when the request names one.
    pub plugin: Option<String>,
    /// The action.
    pub action: Action,
    /// Where the request went: namespaced when its path names a namespace.
    pub scope: Scope,
}

/// The action behind `record`, a host write; an error sentence when it cannot be one.
pub fn from_record(record: &RequestRecord) -> Result<WriteAction, String> {
    let scope = match record.namespace {
        Some(_) => Scope::Namespaced,
        None => Scope::Cluster,
    };
    let body = record.body.clone().unwrap_or(Value::Null);
    let manager = record
        .field_manager
        .as_deref()
        .and_then(|m| m.strip_prefix(MANAGER_PREFIX))
        .map(str::to_string);
    let target = || ObjectRef {
        api_version: api_version(record),
        kind: kind_of(&record.resource),
        namespace: record.namespace.clone(),
        name: record.name.clone().unwrap_or_default(),
    };
    let (plugin, action) = match record.verb.as_str() {
        "create" if record.group == "events.k8s.io" && record.resource == "events" => {
            let reporter = body["reportingController"]
                .as_str()
                .and_then(|c| c.strip_prefix(MANAGER_PREFIX))
                .map(str::to_string);
            (manager.or(reporter), event(&body)?)
        }
        "create" => {
            let mut manifest = body;
            if manifest["metadata"]["namespace"].is_null()
                && let (Some(ns), Some(meta)) =
                    (&record.namespace, manifest["metadata"].as_object_mut())
            {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            }
            (manager, Action::Create { manifest })
        }
        "patch" => {
            let patch_type = [
                PatchType::Merge,
                PatchType::Json,
                PatchType::Strategic,
                PatchType::Apply,
            ]
            .into_iter()
            .find(|t| Some(t.as_str()) == record.patch_type.as_deref())
            .ok_or_else(|| format!("a patch of unknown type {:?}", record.patch_type))?;
            let action = Action::Patch {
                target: target(),
                patch_type,
                subresource: record.subresource.clone(),
                body: unfenced(patch_type, body),
            };
            (manager, action)
        }
        "delete" => (manager, Action::Delete { target: target() }),
        verb => return Err(format!("a {verb}, which no plugin action sends")),
    };
    Ok(WriteAction {
        plugin,
        action,
        scope,
    })
}

/// `group/version` (or `version` for the core group) from the request path.
fn api_version(record: &RequestRecord) -> String {
    let mut parts = record.path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("api"), Some(version), _) => version.to_string(),
        (Some("apis"), Some(group), Some(version)) => format!("{group}/{version}"),
        _ => String::new(),
    }
}

/// The kinds of the chaos workload by plural; any other resource keeps its plural, which no
/// chaos policy grants.
fn kind_of(resource: &str) -> String {
    match resource {
        "deployments" => "Deployment",
        "pods" => "Pod",
        "foos" => "Foo",
        "customclusters" => "Customcluster",
        other => other,
    }
    .to_string()
}

/// An `events.k8s.io/v1` Event as the event action that made it.
fn event(body: &Value) -> Result<Action, String> {
    let r = &body["regarding"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if !r.is_object() {
        return Err("an Event about nothing".into());
    }
    Ok(Action::Event {
        regarding: ObjectRef {
            api_version: s(&r["apiVersion"]),
            kind: s(&r["kind"]),
            namespace: r["namespace"].as_str().map(str::to_string),
            name: s(&r["name"]),
        },
        event_type: match body["type"].as_str() {
            Some("Warning") => EventType::Warning,
            _ => EventType::Normal,
        },
        reason: s(&body["reason"]),
        message: s(&body["note"]),
        event_action: s(&body["action"]),
    })
}

/// The patch without the host's fence: `metadata.resourceVersion` in a merge, strategic or
/// apply body (and a `metadata` left empty by it), the last operation of a JSON patch when
/// it sets `/metadata/resourceVersion` (see `actions::fence`).
fn unfenced(patch_type: PatchType, mut body: Value) -> Value {
    match patch_type {
        PatchType::Json => {
            if let Some(ops) = body.as_array_mut()
                && ops
                    .last()
                    .is_some_and(|op| op["path"] == "/metadata/resourceVersion")
            {
                ops.pop();
            }
        }
        PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
            if let Some(object) = body.as_object_mut()
                && let Some(Value::Object(meta)) = object.get_mut("metadata")
            {
                meta.remove("resourceVersion");
                if meta.is_empty() {
                    object.remove("metadata");
                }
            }
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(verb: &str, path: &str, body: Value) -> RequestRecord {
        RequestRecord {
            verb: verb.into(),
            path: path.into(),
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: Some("demo".into()),
            name: Some("web".into()),
            patch_type: Some("strategic".into()),
            field_manager: Some("kubeplug/image-pinner".into()),
            body: Some(body),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn a_fenced_patch_reads_back_as_the_plugins_patch() {
        let body = json!({"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 2}});
        let w = from_record(&record(
            "patch",
            "/apis/apps/v1/namespaces/demo/deployments/web",
            body,
        ))
        .unwrap();
        assert_eq!(w.plugin.as_deref(), Some("image-pinner"));
        assert_eq!(w.scope, Scope::Namespaced);
        let Action::Patch { target, body, .. } = w.action else {
            panic!("{:?}", w.action)
        };
        assert_eq!(body, json!({"spec": {"replicas": 2}}));
        assert_eq!(
            (target.api_version.as_str(), target.kind.as_str()),
            ("apps/v1", "Deployment")
        );
    }

    #[test]
    fn an_event_names_its_plugin_and_a_delete_none() {
        let mut r = record(
            "create",
            "/apis/events.k8s.io/v1/namespaces/demo/events",
            json!({"reportingController": "kubeplug/change-logger",
                   "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"}}),
        );
        r.group = "events.k8s.io".into();
        r.resource = "events".into();
        r.field_manager = None;
        let w = from_record(&r).unwrap();
        assert_eq!(w.plugin.as_deref(), Some("change-logger"));
        assert!(matches!(w.action, Action::Event { .. }));
        let mut d = record("delete", "/api/v1/namespaces/demo/pods/p", Value::Null);
        d.field_manager = None;
        assert_eq!(from_record(&d).unwrap().plugin, None);
        assert!(from_record(&record("update", "/x", Value::Null)).is_err());
    }
}
