//! Server-side apply requests: checks the configuration, runs [`super::patch::apply`] and
//! words conflicts like the real server.

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::objects::{Sub, meta_str, part, sub_name};
use super::patch::apply::{ApplyRequest, Conflict, apply};
use super::state::Shared;
use serde_json::{Value, json};
use std::sync::Arc;

impl Shared {
    pub(super) fn check_applied(name: &str, config: &Value) -> Result<(), ApiError> {
        let api_version = config.get("apiVersion").and_then(Value::as_str);
        let k = config.get("kind").and_then(Value::as_str);
        if api_version.is_none() || k.is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply configuration",
            ));
        }
        if meta_str(config, "name").is_some_and(|n| n != name) || meta_str(config, "name").is_none()
        {
            return Err(ApiError::bad_request(format!(
                "metadata.name of the apply configuration must be {name:?}"
            )));
        }
        Ok(())
    }

    pub(super) fn apply_to(
        &self,
        kind: &ResourceKind,
        live: Option<&Value>,
        config: &Value,
        sub: Sub,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApiError> {
        let name = live
            .and_then(|l| meta_str(l, "name"))
            .or_else(|| meta_str(config, "name"))
            .unwrap_or_default()
            .to_string();
        Self::check_applied(&name, config)?;
        let api_version = kind.api_version();
        let request = ApplyRequest {
            manager,
            force,
            builtin: kind.builtin,
            part: part(kind, sub),
            api_version: &api_version,
            subresource: sub_name(sub),
        };
        apply(live, config, request).map_err(|conflicts| {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", c.who()), "field": c.field}))
                .collect();
            ApiError::new(409, "Conflict", conflict_message(&conflicts))
            .with_details(json!({"name": name, "group": kind.group, "kind": kind.plural, "causes": causes}))
        })
    }

    pub(super) fn apply_create(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        config: &Value,
        manager: &str,
    ) -> Result<Arc<Value>, ApiError> {
        Self::check_applied(name, config)?;
        let mut body = self.apply_to(kind, None, config, Sub::Main, manager, false)?;
        if kind.namespaced {
            body["metadata"]["namespace"] = Value::String(ns.to_string());
        }
        self.create(
            kind,
            if kind.namespaced { Some(ns) } else { None },
            body,
            manager,
            true,
        )
    }
}

/// The real server's wording: `Apply failed with 1 conflict: conflict with "a": .spec.x`, or
/// for several, one `conflicts with "a":` block per manager listing `- .spec.x` lines.
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.who(),
            c.field
        );
    }
    let mut managers: Vec<String> = Vec::new();
    for c in conflicts {
        if !managers.contains(&c.who()) {
            managers.push(c.who());
        }
    }
    let blocks: Vec<String> = managers
        .iter()
        .map(|who| {
            let fields: Vec<String> = conflicts
                .iter()
                .filter(|c| c.who() == *who)
                .map(|c| format!("- {}", c.field))
                .collect();
            format!("conflicts with {who}:\n{}", fields.join("\n"))
        })
        .collect();
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        blocks.join("\n")
    )
}
