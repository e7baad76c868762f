//! Sends a call's actions to the API server in order, through the dynamic API, so that any
//! kind works. Patches and creates carry the field manager `kubeplug/<plugin>`. The first
//! failure stops the call (the rest are skipped and retried with the key): plugins are
//! idempotent, so a retry redoes what is still needed.

use super::event::{self, EventSpec};
use super::outcome::{ActionRecord, ActionResult, ApiFailure, Execution};
use super::target::{RequestTarget, TargetError, path_segment, request_target};
use crate::cluster::KindRegistry;
use crate::contract::{Action, PatchType, Scope};
use crate::policy::kind_of;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
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

    /// Where `action` goes: its request target on its kind's scope (from discovery), and the
    /// kind's resource. `None` for logs and requeues.
    async fn resolve(
        &self,
        action: &Action,
    ) -> Result<Option<(RequestTarget, ApiResource)>, ExecError> {
        let Some(kind) = kind_of(action) else {
            return Ok(None);
        };
        let resolved = self.kinds.resolve(&kind).await?;
        let scope = Scope::from_namespaced(resolved.namespaced);
        Ok(request_target(action, scope)?.map(|t| (t, resolved.resource)))
    }

    /// The API of `target`'s collection: namespaced exactly when the target names a
    /// namespace (the scope was checked when the target was made), the namespace escaped
    /// as a path segment.
    fn api(
        &self,
        target: &RequestTarget,
        resource: &ApiResource,
    ) -> Result<Api<DynamicObject>, ExecError> {
        let client = self.kinds.client().clone();
        Ok(match &target.namespace {
            Some(ns) => Api::namespaced_with(client, &path_segment(ns)?, resource),
            None => Api::all_with(client, resource),
        })
    }

    /// The registry that resolves kinds (and their scopes) for this executor.
    pub fn kinds(&self) -> &Arc<KindRegistry> {
        &self.kinds
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
    ) -> Result<Done, ExecError> {
        let target = self.resolve(action).await?;
        // The object name as one escaped path segment (kube does not escape it).
        let name = |t: &RequestTarget| -> Result<String, ExecError> {
            Ok(path_segment(t.name.as_deref().unwrap_or_default())?.into_owned())
        };
        match (action, target) {
            (
                Action::Patch {
                    patch_type, body, ..
                },
                Some((target, resource)),
            ) => {
                let api: Api<DynamicObject> = self.api(&target, &resource)?;
                let name = name(&target)?;
                let manager = Self::field_manager(plugin);
                let params = match patch_type {
                    PatchType::Apply => PatchParams::apply(&manager).force(),
                    _ => PatchParams {
                        field_manager: Some(manager),
                        ..Default::default()
                    },
                };
                let sub = target
                    .subresource
                    .as_deref()
                    .map(path_segment)
                    .transpose()?;
                let patch: Patch<&Value> = match patch_type {
                    PatchType::Merge => Patch::Merge(body),
                    PatchType::Strategic => Patch::Strategic(body),
                    PatchType::Apply => Patch::Apply(body),
                    PatchType::Json => {
                        let ops: json_patch::Patch = serde_json::from_value(body.clone())
                            .map_err(kube::Error::SerdeError)?;
                        let ops = Patch::<()>::Json(ops);
                        let result = match sub.as_deref() {
                            Some(sub) => api.patch_subresource(sub, &name, &params, &ops).await,
                            None => api.patch(&name, &params, &ops).await,
                        };
                        return gone_is_done(
                            result.map(|o| o.metadata.resource_version),
                            "object is gone",
                        );
                    }
                };
                let result = match sub.as_deref() {
                    Some(sub) => api.patch_subresource(sub, &name, &params, &patch).await,
                    None => api.patch(&name, &params, &patch).await,
                };
                gone_is_done(
                    result.map(|o| o.metadata.resource_version),
                    "object is gone",
                )
            }
            (Action::Create { manifest }, Some((target, resource))) => {
                let object: DynamicObject =
                    serde_json::from_value(manifest.clone()).map_err(kube::Error::SerdeError)?;
                let api: Api<DynamicObject> = self.api(&target, &resource)?;
                let params = PostParams {
                    field_manager: Some(Self::field_manager(plugin)),
                    ..Default::default()
                };
                match api.create(&params, &object).await {
                    Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                        Ok(Done::Already("object already exists".into()))
                    }
                    other => Ok(other.map(|o| Done::Ok(o.metadata.resource_version))?),
                }
            }
            (Action::Delete { .. }, Some((target, resource))) => {
                let api: Api<DynamicObject> = self.api(&target, &resource)?;
                gone_is_done(
                    api.delete(&name(&target)?, &DeleteParams::background())
                        .await
                        .map(|_| None),
                    "object is gone",
                )
            }
            (
                Action::Event {
                    regarding,
                    event_type,
                    reason,
                    message,
                    event_action,
                },
                Some((target, _)),
            ) => {
                let spec = EventSpec {
                    regarding,
                    event_type: *event_type,
                    reason,
                    message,
                    action: event_action,
                };
                let event = event::build(&spec, plugin, &self.instance);
                if event.metadata.namespace != target.namespace {
                    return Err(ExecError::Mismatch);
                }
                let ns = target.namespace.as_deref().ok_or(ExecError::Mismatch)?;
                let api: Api<k8s_openapi::api::events::v1::Event> =
                    Api::namespaced(self.kinds.client().clone(), &path_segment(ns)?);
                api.create(&PostParams::default(), &event)
                    .await
                    .map(|_| Done::Ok(None))
                    .map_err(ExecError::from)
            }
            (Action::Log { level, message }, _) => {
                crate::telemetry::plugin_log(plugin, key, *level, message);
                Ok(Done::Ok(None))
            }
            (Action::RequeueAfter { after_ms }, _) => {
                let delay = Duration::from_millis(*after_ms);
                execution.requeue_after =
                    Some(execution.requeue_after.map_or(delay, |d| d.min(delay)));
                Ok(Done::Ok(None))
            }
            (_, None) => Err(ExecError::Mismatch),
        }
    }
}

/// Why one action could not be executed.
#[derive(Debug, thiserror::Error)]
enum ExecError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("refused before sending: {0}")]
    Target(#[from] TargetError),
    #[error("refused before sending: the request does not match the action")]
    Mismatch,
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
fn gone_is_done(result: Result<Option<String>, kube::Error>, why: &str) -> Result<Done, ExecError> {
    match result {
        Ok(rv) => Ok(Done::Ok(rv)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Done::Already(why.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// Conflicts, throttling, server errors and transport failures are worth retrying;
/// requests the server judged invalid or forbidden are not, until the object changes.
/// Actions refused before sending never are.
fn classify(err: &ExecError) -> ApiFailure {
    let transient = match err {
        ExecError::Api(kube::Error::Api(e)) => {
            !matches!(e.code, 400 | 401 | 403 | 404 | 405 | 415 | 422)
        }
        ExecError::Api(
            kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) | kube::Error::Discovery(_),
        ) => false,
        ExecError::Api(_) => true,
        ExecError::Target(_) | ExecError::Mismatch => false,
    };
    ApiFailure {
        transient,
        message: err.to_string(),
    }
}
