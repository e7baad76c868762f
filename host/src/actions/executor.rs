//! Sends a call's actions to the API server in order, through the dynamic API, so that any
//! kind works. Patches and creates carry the field manager `kubeplug/<plugin>`. The first
//! failure stops the call (the rest are skipped and retried with the key): plugins are
//! idempotent, so a retry redoes what is still needed.

use super::event::{self, EventSpec};
use super::outcome::{ActionRecord, ActionResult, ApiFailure, Execution};
use crate::cluster::KindRegistry;
use crate::contract::{Action, ObjectRef, PatchType};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Executes actions against the cluster behind a [`KindRegistry`].
pub struct Executor {
    kinds: Arc<KindRegistry>,
    instance: String,
}

/// What a single action came to, before it is recorded.
enum Done {
    /// Accepted; for writes that return the object, its new resourceVersion.
    Ok(Option<String>),
    Already(String),
}

impl Executor {
    /// An executor reporting events as `instance` (for example the host name).
    pub fn new(kinds: Arc<KindRegistry>, instance: impl Into<String>) -> Self {
        Executor {
            kinds,
            instance: instance.into(),
        }
    }

    fn field_manager(plugin: &str) -> String {
        format!("kubeplug/{plugin}")
    }

    async fn api_for(&self, target: &ObjectRef) -> Result<Api<DynamicObject>, kube::Error> {
        let kind = self.kinds.resolve(&target.kind_ref()).await?;
        let client = self.kinds.client().clone();
        Ok(match (&target.namespace, kind.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &kind.resource),
            _ => Api::all_with(client, &kind.resource),
        })
    }

    /// Executes `actions` of `plugin`'s call for `key`, in order, stopping at the first failure.
    pub async fn execute(&self, plugin: &str, key: &str, actions: &[Action]) -> Execution {
        let mut execution = Execution::default();
        let mut failed = false;
        for action in actions {
            let target = match action {
                Action::Patch { target, .. } | Action::Delete { target } => target.to_string(),
                Action::Event { regarding, .. } => regarding.to_string(),
                Action::Create { manifest } => describe_manifest(manifest),
                Action::Log { .. } | Action::RequeueAfter { .. } => key.to_string(),
            };
            let mut resource_version = None;
            let result = if failed {
                ActionResult::Skipped
            } else {
                match self.execute_one(plugin, key, action, &mut execution).await {
                    Ok(Done::Ok(rv)) => {
                        resource_version = rv;
                        ActionResult::Executed
                    }
                    Ok(Done::Already(why)) => ActionResult::AlreadyDone(why),
                    Err(err) => {
                        failed = true;
                        ActionResult::Failed(classify(&err))
                    }
                }
            };
            match &result {
                ActionResult::Failed(f) => {
                    tracing::warn!(plugin, key, action = action.kind(), %target, transient = f.transient, "action failed: {}", f.message)
                }
                ActionResult::Skipped => {}
                _ => {
                    tracing::debug!(plugin, key, action = action.kind(), %target, ?result, "action done")
                }
            }
            execution.records.push(ActionRecord {
                action: action.kind(),
                target,
                result,
                resource_version,
            });
        }
        execution
    }

    async fn execute_one(
        &self,
        plugin: &str,
        key: &str,
        action: &Action,
        execution: &mut Execution,
    ) -> Result<Done, kube::Error> {
        match action {
            Action::Patch {
                target,
                patch_type,
                subresource,
                body,
            } => {
                let api = self.api_for(target).await?;
                let manager = Self::field_manager(plugin);
                let params = match patch_type {
                    PatchType::Apply => PatchParams::apply(&manager).force(),
                    _ => PatchParams {
                        field_manager: Some(manager),
                        ..Default::default()
                    },
                };
                let patch: Patch<&Value> = match patch_type {
                    PatchType::Merge => Patch::Merge(body),
                    PatchType::Strategic => Patch::Strategic(body),
                    PatchType::Apply => Patch::Apply(body),
                    PatchType::Json => {
                        let ops: json_patch::Patch = serde_json::from_value(body.clone())
                            .map_err(kube::Error::SerdeError)?;
                        let result = match subresource.as_deref() {
                            Some(sub) => {
                                api.patch_subresource(
                                    sub,
                                    &target.name,
                                    &params,
                                    &Patch::<()>::Json(ops),
                                )
                                .await
                            }
                            None => {
                                api.patch(&target.name, &params, &Patch::<()>::Json(ops))
                                    .await
                            }
                        };
                        return gone_is_done(
                            result.map(|o| o.metadata.resource_version),
                            "object is gone",
                        );
                    }
                };
                let result = match subresource.as_deref() {
                    Some(sub) => {
                        api.patch_subresource(sub, &target.name, &params, &patch)
                            .await
                    }
                    None => api.patch(&target.name, &params, &patch).await,
                };
                gone_is_done(
                    result.map(|o| o.metadata.resource_version),
                    "object is gone",
                )
            }
            Action::Create { manifest } => {
                let object: DynamicObject =
                    serde_json::from_value(manifest.clone()).map_err(kube::Error::SerdeError)?;
                let target = ObjectRef {
                    api_version: str_at(manifest, "/apiVersion"),
                    kind: str_at(manifest, "/kind"),
                    namespace: manifest
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    name: str_at(manifest, "/metadata/name"),
                };
                let api = self.api_for(&target).await?;
                let params = PostParams {
                    field_manager: Some(Self::field_manager(plugin)),
                    ..Default::default()
                };
                match api.create(&params, &object).await {
                    Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                        Ok(Done::Already("object already exists".into()))
                    }
                    other => other.map(|o| Done::Ok(o.metadata.resource_version)),
                }
            }
            Action::Delete { target } => {
                let api = self.api_for(target).await?;
                gone_is_done(
                    api.delete(&target.name, &DeleteParams::background())
                        .await
                        .map(|_| None),
                    "object is gone",
                )
            }
            Action::Event {
                regarding,
                event_type,
                reason,
                message,
                event_action,
            } => {
                let spec = EventSpec {
                    regarding,
                    event_type: *event_type,
                    reason,
                    message,
                    action: event_action,
                };
                let event = event::build(&spec, plugin, &self.instance);
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<k8s_openapi::api::events::v1::Event> =
                    Api::namespaced(self.kinds.client().clone(), &ns);
                api.create(&PostParams::default(), &event)
                    .await
                    .map(|_| Done::Ok(None))
            }
            Action::Log { level, message } => {
                crate::telemetry::plugin_log(plugin, key, *level, message);
                Ok(Done::Ok(None))
            }
            Action::RequeueAfter { after_ms } => {
                let delay = Duration::from_millis(*after_ms);
                execution.requeue_after =
                    Some(execution.requeue_after.map_or(delay, |d| d.min(delay)));
                Ok(Done::Ok(None))
            }
        }
    }
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn describe_manifest(m: &Value) -> String {
    let ns = m.pointer("/metadata/namespace").and_then(Value::as_str);
    let name = str_at(m, "/metadata/name");
    match ns {
        Some(ns) => format!("{} {ns}/{name}", str_at(m, "/kind")),
        None => format!("{} {name}", str_at(m, "/kind")),
    }
}

/// NotFound on a patch or delete means the object is already gone: not an error.
fn gone_is_done(
    result: Result<Option<String>, kube::Error>,
    why: &str,
) -> Result<Done, kube::Error> {
    match result {
        Ok(rv) => Ok(Done::Ok(rv)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Done::Already(why.to_string())),
        Err(e) => Err(e),
    }
}

/// Conflicts, throttling, server errors and transport failures are worth retrying;
/// requests the server judged invalid or forbidden are not, until the object changes.
fn classify(err: &kube::Error) -> ApiFailure {
    let transient = match err {
        kube::Error::Api(e) => !matches!(e.code, 400 | 401 | 403 | 404 | 405 | 415 | 422),
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    };
    ApiFailure {
        transient,
        message: err.to_string(),
    }
}
