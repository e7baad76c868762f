//! PATCH bodies: merge patch and JSON patch through the `json-patch` crate, strategic merge
//! patch and server-side apply implemented here (no maintained crate exists for them).

pub mod apply;
pub mod fields;
pub mod keys;
pub mod strategic;

use super::errors::ApiError;
use serde_json::Value;

pub use kubeplug_vocab::PatchType;

/// Applies a merge, JSON or strategic patch to a copy of `current`.
pub fn patch(
    current: &Value,
    body: &[u8],
    patch_type: PatchType,
    builtin: bool,
) -> Result<Value, ApiError> {
    match patch_type {
        PatchType::Merge => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding merge patch: {e}")))?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            let mut doc = current.clone();
            json_patch::merge(&mut doc, &patch);
            Ok(doc)
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
            let mut doc = current.clone();
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::invalid(format!("the JSON patch could not be applied: {e}"))
            })?;
            Ok(doc)
        }
        PatchType::Strategic => {
            if !builtin {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            let patch: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("error decoding strategic merge patch: {e}"))
            })?;
            strategic::merge(current, &patch, builtin)
                .map_err(|e| ApiError::bad_request(e.to_string()))
        }
        PatchType::Apply => Err(ApiError::internal(
            "server-side apply is handled separately",
        )),
    }
}

/// Parses an apply body (YAML or JSON).
pub fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("apply body is not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}
