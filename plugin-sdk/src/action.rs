//! Builders for the actions a plugin returns.

use crate::bindings::kubeplug::plugin::types::{Event, LogEntry, Patch};
use crate::{Action, EventType, LogLevel, ObjectRef, PatchType};
use serde_json::Value;
use std::time::Duration;

impl Action {
    /// A patch of the given type on `target`.
    pub fn patch(target: &ObjectRef, patch_type: PatchType, body: &Value) -> Self {
        Action::Patch(Patch {
            target: target.clone(),
            patch_type,
            body: body.to_string(),
            subresource: None,
        })
    }

    /// A JSON merge patch (RFC 7386).
    pub fn merge_patch(target: &ObjectRef, body: Value) -> Self {
        Self::patch(target, PatchType::Merge, &body)
    }

    /// A JSON patch (RFC 6902): `body` is the array of operations.
    pub fn json_patch(target: &ObjectRef, body: Value) -> Self {
        Self::patch(target, PatchType::Json, &body)
    }

    /// A strategic merge patch: list items merge by their keys (containers by name, …).
    pub fn strategic_patch(target: &ObjectRef, body: Value) -> Self {
        Self::patch(target, PatchType::Strategic, &body)
    }

    /// A server-side apply of `body` (a partial manifest with apiVersion and kind), owned by
    /// the plugin's field manager.
    pub fn apply(target: &ObjectRef, body: Value) -> Self {
        Self::patch(target, PatchType::Apply, &body)
    }

    /// A JSON merge patch of the `status` subresource.
    pub fn status_patch(target: &ObjectRef, body: Value) -> Self {
        Self::patch(target, PatchType::Merge, &body).on_subresource("status")
    }

    /// Moves a patch to a subresource (`status`, `scale`); other actions are left unchanged.
    pub fn on_subresource(mut self, subresource: &str) -> Self {
        if let Action::Patch(p) = &mut self {
            p.subresource = Some(subresource.to_string());
        }
        self
    }

    /// Creates the object described by `manifest` (apiVersion, kind and metadata.name set).
    pub fn create(manifest: &Value) -> Self {
        Action::Create(manifest.to_string())
    }

    /// Deletes `target`.
    pub fn delete(target: &ObjectRef) -> Self {
        Action::Delete(target.clone())
    }

    /// A Kubernetes Event about `regarding`. `reason` must be CamelCase (1–128 ASCII letters
    /// and digits, e.g. `ImagePinned`) or the host refuses the call; a message longer than
    /// 1 KiB is cut.
    pub fn event(
        regarding: &ObjectRef,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Action::Event(Event {
            regarding: regarding.clone(),
            event_type,
            reason: reason.to_string(),
            message: message.into(),
            action: String::new(),
        })
    }

    /// A log line at `level`.
    pub fn log(level: LogLevel, message: impl Into<String>) -> Self {
        Action::Log(LogEntry {
            level,
            message: message.into(),
        })
    }

    /// A log line at info level.
    pub fn info(message: impl Into<String>) -> Self {
        Self::log(LogLevel::Info, message)
    }

    /// A log line at warn level.
    pub fn warn(message: impl Into<String>) -> Self {
        Self::log(LogLevel::Warn, message)
    }

    /// Reconcile this key again after `delay` (rounded down to milliseconds).
    pub fn requeue_after(delay: Duration) -> Self {
        Action::RequeueAfter(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
    }
}
