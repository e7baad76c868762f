//! Kubernetes `Status` errors: every failure the sim returns is a `meta/v1 Status` object with
//! the HTTP code, `reason` and message a real API server would use, so clients map them the
//! same way (`kube::Error::Api`, `kubectl` messages).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An API error, rendered as a Kubernetes `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`, `AlreadyExists`, `Conflict`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Optional `Status.details`.
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429 and some 5xx).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Builds an error with the given code, reason and message.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object (`deployments.apps "web" not found`).
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "kind": resource_plural(resource), "group": resource_group(resource)}))
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"))
            .with_details(json!({"name": name, "kind": resource_plural(resource), "group": resource_group(resource)}))
    }

    /// 409 Conflict on a stale `resourceVersion`.
    pub fn conflict(resource: &str, name: &str) -> Self {
        Self::conflict_because(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict for `cause` (a delete precondition that failed, say), worded as the real
    /// server words it: `Operation cannot be fulfilled on <resource> "<name>": <cause>`.
    pub fn conflict_because(resource: &str, name: &str, cause: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {cause}"),
        )
        .with_details(json!({"name": name, "kind": resource_plural(resource), "group": resource_group(resource)}))
    }

    /// 410 Gone with reason `Expired` (too old resourceVersion or expired continue token).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// Attaches `Status.details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

fn resource_plural(resource: &str) -> &str {
    resource.split('.').next().unwrap_or(resource)
}

fn resource_group(resource: &str) -> &str {
    resource.split_once('.').map(|(_, g)| g).unwrap_or("")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut response = (code, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A successful `Status` (used by delete when the object is not returned).
pub fn success_status(details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// A label selector that does not parse is a 400, as on a real API server.
impl From<crate::selector::SelectorError> for ApiError {
    fn from(err: crate::selector::SelectorError) -> Self {
        ApiError::bad_request(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_shape() {
        let status = ApiError::not_found("deployments.apps", "web").status();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["details"]["group"], "apps");
        assert_eq!(status["message"], "deployments.apps \"web\" not found");
    }
}
