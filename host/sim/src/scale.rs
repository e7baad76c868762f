//! The `scale` subresource of Deployments (`autoscaling/v1` `Scale`): get, update and patch
//! map onto `spec.replicas`.

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::objects::Sub;
use super::patch::{self, PatchType};
use super::state::Shared;
use super::store::object_rv;
use serde_json::{Value, json};
use std::sync::Arc;

/// The Scale view of a Deployment.
pub fn to_scale(object: &Value) -> Value {
    let selector = object["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let meta = &object["metadata"];
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

fn replicas_of(scale: &Value) -> Result<i64, ApiError> {
    let replicas = scale["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiError::invalid("Scale.autoscaling \"\" is invalid: spec.replicas: Required value")
    })?;
    if replicas < 0 {
        return Err(ApiError::invalid(format!(
            "Scale.autoscaling is invalid: spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
        )));
    }
    Ok(replicas)
}

fn set_replicas(
    shared: &Shared,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
    replicas: i64,
    rv: Option<u64>,
    manager: &str,
) -> Result<Arc<Value>, ApiError> {
    let current = shared.get_object(kind, ns, name)?;
    if rv.is_some_and(|rv| rv != object_rv(&current)) {
        return Err(ApiError::conflict(&kind.resource_name(), name));
    }
    let mut body = (*current).clone();
    body["spec"]["replicas"] = json!(replicas);
    if rv.is_none() {
        body["metadata"]["resourceVersion"] = Value::String(String::new());
    }
    shared.update(kind, ns, name, body, Sub::Main, manager)
}

/// PUT `.../scale`.
pub fn update(
    shared: &Shared,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
    body: &Value,
    manager: &str,
) -> Result<Value, ApiError> {
    let replicas = replicas_of(body)?;
    let rv = body["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok());
    Ok(to_scale(&*set_replicas(
        shared, kind, ns, name, replicas, rv, manager,
    )?))
}

/// PATCH `.../scale` (merge, JSON or strategic).
pub fn patch(
    shared: &Shared,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
    body: &[u8],
    patch_type: PatchType,
    manager: &str,
) -> Result<Value, ApiError> {
    if patch_type == PatchType::Apply {
        return Err(ApiError::unsupported_media_type(
            "server-side apply is not supported on the scale subresource",
        ));
    }
    let current = to_scale(&*shared.get_object(kind, ns, name)?);
    let patched = patch::patch(&current, body, patch_type, true)?;
    let replicas = replicas_of(&patched)?;
    let rv = patched["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok());
    Ok(to_scale(&*set_replicas(
        shared, kind, ns, name, replicas, rv, manager,
    )?))
}
