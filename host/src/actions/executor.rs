//! Executes exactly one write action through an [`ApiWriter`], one function per verb, so
//! that any kind works. Patches and creates carry the field manager `kubeplug/<plugin>`;
//! patches and deletes carry the [fence](super::fence)'s resourceVersion when given one, and
//! a 409 Conflict on such a write is [`ActionError::Conflict`].
//! What to do with a call's actions as a whole (the policy, dry-run, the budget, stopping
//! after a failure) is the [pipeline](super::pipeline)'s.

use super::event::{self, EventSpec};
use super::fence;
use super::outcome::{ActionError, Sent};
use super::target::{RequestTarget, request_target};
use super::writer::{ApiRequest, ApiWriter, WriteError, Written};
use crate::cluster::Principal;
use crate::contract::{Action, ObjectRef, PatchType, Scope};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;
use std::sync::Arc;

/// Sends write actions to the API server behind an [`ApiWriter`].
pub struct Executor {
    writer: Arc<dyn ApiWriter>,
    host_name: String,
}

impl Executor {
    /// An executor writing through `writer`, reporting events from `host_name` (this host's
    /// name, the Events' `reportingInstance`).
    pub fn new(writer: Arc<dyn ApiWriter>, host_name: impl Into<String>) -> Self {
        Executor {
            writer,
            host_name: host_name.into(),
        }
    }

    /// The writer this executor sends through (the pipeline asks it for kinds' scopes).
    pub fn writer(&self) -> &Arc<dyn ApiWriter> {
        &self.writer
    }

    fn field_manager(plugin: &str) -> String {
        format!("kubeplug/{plugin}")
    }

    /// Executes one write of `plugin` on a kind of `scope` (from discovery), sent as `who`
    /// when given (impersonated: the API server checks that principal's rights) or else as
    /// the host; a patch or delete carries `fenced_at` as its resourceVersion precondition
    /// when given (creates and events ignore it: they are not fenced). Logs and requeues are
    /// not writes: the pipeline handles them.
    pub async fn execute(
        &self,
        plugin: &str,
        who: Option<&Principal>,
        action: &Action,
        scope: Scope,
        fenced_at: Option<&str>,
    ) -> Result<Sent, ActionError> {
        let target = request_target(action, scope)?.ok_or(ActionError::NotAWrite)?;
        let sent = match action {
            Action::Patch {
                patch_type, body, ..
            } => {
                let body = match fenced_at {
                    Some(rv) => fence::patch_body(*patch_type, body, rv),
                    None => std::borrow::Cow::Borrowed(body),
                };
                self.patch(plugin, who, &target, *patch_type, &body).await
            }
            Action::Delete { .. } => self.delete(who, &target, fenced_at).await,
            Action::Create { .. } | Action::Event { .. } => {
                return self.execute_unfenced(plugin, who, action, &target).await;
            }
            Action::Log { .. } | Action::RequeueAfter { .. } => return Err(ActionError::NotAWrite),
        };
        match (sent, fenced_at) {
            (Err(ActionError::Write(WriteError::Api(kube::Error::Api(e)))), Some(rv))
                if e.code == 409 && e.reason == "Conflict" =>
            {
                Err(ActionError::Conflict {
                    fenced_at: rv.to_string(),
                    source: WriteError::Api(kube::Error::Api(e)),
                })
            }
            (sent, _) => sent,
        }
    }

    /// The writes that carry no precondition: creates and events.
    async fn execute_unfenced(
        &self,
        plugin: &str,
        who: Option<&Principal>,
        action: &Action,
        target: &RequestTarget,
    ) -> Result<Sent, ActionError> {
        match action {
            Action::Create { manifest } => self.create(plugin, who, target, manifest).await,
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
                self.event(plugin, who, target, &spec).await
            }
            Action::Patch { .. }
            | Action::Delete { .. }
            | Action::Log { .. }
            | Action::RequeueAfter { .. } => Err(ActionError::NotAWrite),
        }
    }

    /// A patch of any type, of the object or its subresource; NotFound means it is gone.
    async fn patch(
        &self,
        plugin: &str,
        who: Option<&Principal>,
        target: &RequestTarget,
        patch_type: PatchType,
        body: &Value,
    ) -> Result<Sent, ActionError> {
        let manager = Self::field_manager(plugin);
        let params = match patch_type {
            PatchType::Apply => PatchParams::apply(&manager).force(),
            _ => PatchParams {
                field_manager: Some(manager),
                ..Default::default()
            },
        };
        let patch = match patch_type {
            PatchType::Merge => Patch::Merge(body.clone()),
            PatchType::Strategic => Patch::Strategic(body.clone()),
            PatchType::Apply => Patch::Apply(body.clone()),
            PatchType::Json => {
                Patch::Json(serde_json::from_value(body.clone()).map_err(|source| {
                    ActionError::Body {
                        what: "the JSON patch",
                        source,
                    }
                })?)
            }
        };
        let sent = self
            .writer
            .send(target, ApiRequest::Patch { params, patch }, who)
            .await;
        gone_is_done(sent)
    }

    /// A create from a manifest; AlreadyExists means there is nothing to do.
    async fn create(
        &self,
        plugin: &str,
        who: Option<&Principal>,
        target: &RequestTarget,
        manifest: &Value,
    ) -> Result<Sent, ActionError> {
        let object: Box<DynamicObject> =
            serde_json::from_value(manifest.clone()).map_err(|source| ActionError::Body {
                what: "the manifest",
                source,
            })?;
        let params = PostParams {
            field_manager: Some(Self::field_manager(plugin)),
            ..Default::default()
        };
        match self
            .writer
            .send(target, ApiRequest::Create { params, object }, who)
            .await
        {
            Err(WriteError::Api(kube::Error::Api(e)))
                if e.code == 409 && e.reason == "AlreadyExists" =>
            {
                Ok(Sent::already("object already exists"))
            }
            other => Ok(Sent::executed(other?)),
        }
    }

    /// A delete with background propagation, with `fenced_at` as its precondition if given;
    /// NotFound means it is gone.
    async fn delete(
        &self,
        who: Option<&Principal>,
        target: &RequestTarget,
        fenced_at: Option<&str>,
    ) -> Result<Sent, ActionError> {
        let params = fence::delete_params(fenced_at);
        gone_is_done(
            self.writer
                .send(target, ApiRequest::Delete { params }, who)
                .await,
        )
    }

    /// An `events.k8s.io/v1` Event about the object, in the namespace the target names.
    async fn event(
        &self,
        plugin: &str,
        who: Option<&Principal>,
        target: &RequestTarget,
        spec: &EventSpec<'_>,
    ) -> Result<Sent, ActionError> {
        let event = event::build(spec, plugin, &self.host_name);
        if event.metadata.namespace != target.namespace {
            return Err(WriteError::Mismatch.into());
        }
        self.writer
            .send(target, ApiRequest::Event(Box::new(event)), who)
            .await?;
        Ok(Sent::executed(Written::default()))
    }
}

/// NotFound on a patch or delete means the object is already gone: not an error.
fn gone_is_done(result: Result<Written, WriteError>) -> Result<Sent, ActionError> {
    match result {
        Ok(written) => Ok(Sent::executed(written)),
        Err(WriteError::Api(kube::Error::Api(e))) if e.code == 404 => {
            Ok(Sent::already("object is gone"))
        }
        Err(e) => Err(e.into()),
    }
}

/// The object an action acts on, as audit records and logs name it.
pub(crate) fn describe(action: &Action, key: &str) -> String {
    match action {
        Action::Patch { target, .. } | Action::Delete { target } => target.to_string(),
        Action::Event { regarding, .. } => regarding.to_string(),
        Action::Create { manifest } => describe_manifest(manifest),
        Action::Log { .. } | Action::RequeueAfter { .. } => key.to_string(),
    }
}

/// The object a write leaves changed: the patched, created or deleted one (`None` for an
/// event, a log or a requeue).
pub(crate) fn written_object(action: &Action) -> Option<ObjectRef> {
    match action {
        Action::Patch { target, .. } | Action::Delete { target } => Some(target.clone()),
        Action::Create { manifest } => Some(super::target::manifest_ref(manifest)),
        Action::Event { .. } | Action::Log { .. } | Action::RequeueAfter { .. } => None,
    }
}

fn describe_manifest(m: &Value) -> String {
    let r = super::target::manifest_ref(m);
    match &r.namespace {
        Some(ns) => format!("{} {ns}/{}", r.kind, r.name),
        None => format!("{} {}", r.kind, r.name),
    }
}
