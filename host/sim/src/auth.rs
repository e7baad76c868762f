//! A request's identity and its authorization, in the real server's filter order:
//! authentication (401 for an unknown bearer token; none at all is `system:anonymous`), then impersonation (each `impersonate`
//! asked of the authenticated caller, 403 when denied), then authorization of what the
//! request does as the user it acts as (403). With authorization off (the default) nothing is
//! checked: every request acts as the sim's administrator, or as whom it impersonates.

use super::access_review::{AlwaysAllow, Authorizer, Rbac};
use super::attributes::Attributes;
use super::authn::{MASTERS, UserInfo};
use super::errors::ApiError;
use super::impersonation;
use super::state::Shared;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Who a request acts as, and who sent it when that is someone else.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The user the request acts as (and is authorised as).
    pub user: Arc<UserInfo>,
    /// The authenticated user who impersonated [`Caller::user`], if any.
    pub impersonator: Option<Arc<UserInfo>>,
}

/// The 401 of a request without a known token.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Authenticates a request and applies its impersonation headers.
pub fn identify(shared: &Shared, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let authenticated = if shared.config.rbac {
        // As a real API server with anonymous authentication: credentials that do not
        // authenticate are a 401, none at all make the request `system:anonymous`'s (which is
        // also what kubectl sends over plain HTTP: client-go sends credentials only over TLS).
        match headers.contains_key(axum::http::header::AUTHORIZATION) {
            true => shared
                .tokens
                .authenticate(headers)
                .ok_or_else(unauthorized)?,
            false => Arc::new(UserInfo::anonymous()),
        }
    } else {
        shared.admin.clone()
    };
    let Some(requested) = impersonation::requested(headers)? else {
        return Ok(Caller {
            user: authenticated,
            impersonator: None,
        });
    };
    let (checks, user) = impersonation::checks(&requested);
    for check in &checks {
        authorize(shared, &authenticated, check)?;
    }
    tracing::debug!(user = %user.name, by = %authenticated.name, "impersonating");
    Ok(Caller {
        user: Arc::new(user),
        impersonator: Some(authenticated),
    })
}

/// The authorizer the sim answers with.
pub fn authorizer(shared: &Shared) -> Box<dyn Authorizer + '_> {
    if shared.config.rbac {
        Box::new(Rbac(&shared.store))
    } else {
        Box::new(AlwaysAllow)
    }
}

/// `Ok` when `user` may do `attrs`; the real server's 403 otherwise.
pub fn authorize(shared: &Shared, user: &UserInfo, attrs: &Attributes) -> Result<(), ApiError> {
    if !shared.config.rbac {
        return Ok(());
    }
    let decision = authorizer(shared).decide(user, attrs);
    if decision.allowed {
        return Ok(());
    }
    tracing::debug!(user = %user.name, verb = attrs.verb(), "forbidden");
    Err(attrs.forbidden(&user.name, &decision.reason))
}

/// Middleware of the sim's own endpoints (`/sim/*`): with authorization on, only
/// `system:masters` may use them (they change and reveal everything).
pub async fn sim_admin_only(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    if shared.config.rbac {
        let caller = match identify(&shared, request.headers()) {
            Ok(caller) => caller,
            Err(err) => return err.into_response(),
        };
        if !caller.user.in_group(MASTERS) {
            let attrs = Attributes::NonResource {
                verb: request.method().as_str().to_lowercase(),
                path: request.uri().path().to_string(),
            };
            return attrs.forbidden(&caller.user.name, "").into_response();
        }
    }
    next.run(request).await
}
