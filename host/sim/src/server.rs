//! HTTP routing: parses Kubernetes REST paths, records every request, applies injected
//! faults, and dispatches to list/watch/get/create/update/patch/delete; plus the admin
//! endpoints `/sim/faults` and `/sim/requests`.

use super::access_review::{self, Review};
use super::attributes::{Attributes, ResourceAttributes, name_from_field_selector};
use super::auth::{self, Caller};
use super::delete::DeleteOptions;
use super::discovery;
use super::errors::{ApiError, success_status};
use super::fault_schedule::{Fault, RequestInfo, Schedule};
use super::faults::{FaultRequest, injected_error};
use super::kinds::{ResourceKind, kinds_from_crd};
use super::list::{self, ListParams, encode_list, page};
use super::objects::Sub;
use super::patch::PatchType;
use super::protobuf;
use super::request_log::RequestRecord;
use super::response_faults;
use super::scale;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::table;
use super::watch::{self, WatchParams, render};
use super::watch_faults::WatchFault;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The router of one sim.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/sim/faults",
            get(faults_get).post(faults_post).delete(faults_delete),
        )
        .route("/sim/requests", get(requests_get).delete(requests_delete))
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            auth::sim_admin_only,
        ))
        .fallback(handle)
        .with_state(shared)
}

async fn faults_get(State(shared): State<Arc<Shared>>) -> Response {
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&shared.faults.state()).unwrap_or_default(),
    )
}

/// Changes the switches (a JSON [`FaultRequest`]) or sets a schedule (a JSON or YAML
/// document with `rules`, as `kubeplug sim --faults FILE` reads it).
async fn faults_post(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let value = serde_json::from_slice::<Value>(&body).or_else(|json_err| {
        std::str::from_utf8(&body)
            .ok()
            .and_then(|text| serde_saphyr::from_str::<Value>(text).ok())
            .ok_or(json_err)
    });
    let value = match value {
        Ok(value) => value,
        Err(e) => {
            return ApiError::bad_request(format!("invalid fault request: {e}")).into_response();
        }
    };
    if value.get("rules").is_some() {
        let set = Schedule::from_value(value).and_then(|s| shared.faults.set_schedule(s));
        return match set {
            Ok(()) => faults_get(State(shared)).await,
            Err(e) => ApiError::bad_request(format!("invalid fault schedule: {e}")).into_response(),
        };
    }
    match serde_json::from_value::<FaultRequest>(value) {
        Ok(request) => {
            tracing::info!(?request, "fault injection changed");
            shared.faults.apply(request);
            faults_get(State(shared)).await
        }
        Err(e) => ApiError::bad_request(format!("invalid fault request: {e}")).into_response(),
    }
}

async fn faults_delete(State(shared): State<Arc<Shared>>) -> Response {
    shared.faults.reset();
    faults_get(State(shared)).await
}

async fn requests_get(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let since = q.get("since").and_then(|s| s.parse().ok()).unwrap_or(0);
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&shared.log.since(since)).unwrap_or_default(),
    )
}

async fn requests_delete(State(shared): State<Arc<Shared>>) -> Response {
    shared.log.clear();
    StatusCode::NO_CONTENT.into_response()
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn value_response(code: StatusCode, value: &Value) -> Response {
    json_response(code, serde_json::to_vec(value).unwrap_or_default())
}

/// What a path addresses.
enum Target {
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    OpenApiRoot,
    OpenApi(String, String),
    Resource(ResourceRequest),
    /// An access review (answered, never stored), in a namespace for the local one.
    Review(Review, Option<String>),
    /// A ServiceAccount's `token` subresource (TokenRequest): namespace and name.
    Token(String, String),
}

struct ResourceRequest {
    kind: Arc<ResourceKind>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_target(shared: &Shared, path: &str) -> Result<Target, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Target::Version),
        ["healthz" | "readyz" | "livez", ..] => return Ok(Target::Health),
        ["api"] => return Ok(Target::CoreVersions),
        ["apis"] => return Ok(Target::Groups),
        ["apis", g] => return Ok(Target::Group(g.to_string())),
        ["api", v] => return Ok(Target::Resources(String::new(), v.to_string())),
        ["apis", g, v] => return Ok(Target::Resources(g.to_string(), v.to_string())),
        ["openapi", "v3"] => return Ok(Target::OpenApiRoot),
        ["openapi", "v3", "api", v] => return Ok(Target::OpenApi(String::new(), v.to_string())),
        ["openapi", "v3", "apis", g, v] => {
            return Ok(Target::OpenApi(g.to_string(), v.to_string()));
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            name,
            "token",
        ] => {
            return Ok(Target::Token(ns.to_string(), name.to_string()));
        }
        ["apis", g, v, plural]
            if access_review::find(g, v, plural).is_some_and(|r| !r.namespaced) =>
        {
            return Ok(Target::Review(
                access_review::find(g, v, plural).ok_or_else(|| ApiError::no_route(path))?,
                None,
            ));
        }
        ["apis", g, v, "namespaces", ns, plural]
            if access_review::find(g, v, plural).is_some_and(|r| r.namespaced) =>
        {
            return Ok(Target::Review(
                access_review::find(g, v, plural).ok_or_else(|| ApiError::no_route(path))?,
                Some(ns.to_string()),
            ));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    let registry = shared.registry();
    let namespaced = match rest {
        ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => registry
            .by_path(group, version, plural)
            .filter(|k| k.namespaced)
            .map(|k| (k, Some(ns.to_string()), tail.first(), tail.get(1))),
        _ => None,
    };
    let (kind, namespace, name, sub) = match namespaced {
        Some(found) => found,
        None => match rest {
            [plural, tail @ ..] if tail.len() <= 2 => {
                let kind = registry
                    .by_path(group, version, plural)
                    .ok_or_else(|| ApiError::no_route(path))?;
                (kind, None, tail.first(), tail.get(1))
            }
            _ => return Err(ApiError::no_route(path)),
        },
    };
    if kind.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::no_route(path));
    }
    if let Some(sub) = sub {
        let ok = (*sub == "status" && kind.status_subresource)
            || (*sub == "scale" && kind.scale_subresource);
        if !ok {
            return Err(ApiError::no_route(path));
        }
    }
    Ok(Target::Resource(ResourceRequest {
        kind,
        namespace,
        name: name.map(|s| s.to_string()),
        subresource: sub.map(|s| s.to_string()),
    }))
}

fn verb(method: &Method, req: &ResourceRequest, query: &HashMap<String, String>) -> &'static str {
    let watch = query.get("watch").is_some_and(|w| w == "1" || w == "true");
    match (method.as_str(), req.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut record = RequestRecord {
        // Microseconds: request logs time what clients do (a change to the patch it caused).
        time: jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string(),
        method: method.to_string(),
        verb: "other".into(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or_default().to_string(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .chars()
            .take(256)
            .collect(),
        ..RequestRecord::default()
    };
    let response = match auth::identify(&shared, &headers) {
        Err(e) => e.into_response(),
        Ok(caller) => {
            record.user = caller.user.name.clone();
            record.impersonator = caller.impersonator.as_ref().map(|u| u.name.clone());
            match Query::<HashMap<String, String>>::try_from_uri(&uri) {
                Ok(Query(query)) => {
                    match dispatch(
                        &shared,
                        &caller,
                        &method,
                        &uri,
                        &query,
                        &headers,
                        body,
                        &mut record,
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(e) => e.into_response(),
                    }
                }
                Err(e) => ApiError::bad_request(format!("invalid query: {e}")).into_response(),
            }
        }
    };
    record.status = response.status().as_u16();
    tracing::debug!(verb = %record.verb, path = %record.path, status = record.status, "request");
    shared.log.push(record);
    response
}

fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// A write's body: JSON, or protobuf when the `Content-Type` says so (kubectl's typed commands).
fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if protobuf::is_protobuf(content_type) {
        return protobuf::decode(body);
    }
    parse_json(body)
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(value)
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query.get(name).is_some_and(|v| v == "true" || v == "1")
}

#[allow(clippy::too_many_arguments)]
async fn dispatch(
    shared: &Arc<Shared>,
    caller: &Caller,
    method: &Method,
    uri: &Uri,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
    record: &mut RequestRecord,
) -> Result<Response, ApiError> {
    let req = match parse_target(shared, uri.path())? {
        Target::Resource(req) => req,
        Target::Review(review, namespace) => {
            record.verb = "create".into();
            record.group = review.group.into();
            record.resource = review.plural.into();
            record.namespace = namespace.clone();
            return review_response(shared, caller, method, headers, &body, review, namespace);
        }
        Target::Token(namespace, name) => {
            record.verb = "create".into();
            record.resource = "serviceaccounts".into();
            record.subresource = Some("token".into());
            record.namespace = Some(namespace.clone());
            record.name = Some(name.clone());
            return token_response(shared, caller, method, headers, &body, &namespace, &name);
        }
        discovery_target => {
            record.verb = "discovery".into();
            let attrs = Attributes::NonResource {
                verb: method.as_str().to_lowercase(),
                path: uri.path().to_string(),
            };
            auth::authorize(shared, &caller.user, &attrs)?;
            return discovery_response(shared, method, uri, headers, discovery_target);
        }
    };
    let kind = req.kind.clone();
    let verb = verb(method, &req, query);
    auth::authorize(
        shared,
        &caller.user,
        &Attributes::Resource(resource_attributes(&req, verb, query)),
    )?;
    let manager = field_manager(query, headers);
    record.verb = verb.into();
    record.group = kind.group.clone();
    record.resource = kind.plural.clone();
    record.namespace = req.namespace.clone();
    record.name = req.name.clone();
    record.subresource = req.subresource.clone();
    record.field_manager = query.get("fieldManager").cloned();
    let write = matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    );
    if write {
        // Nothing changed until the write is served (a refused or faulted one changes nothing).
        record.changed = Some(false);
    }
    if shared.config.record_write_bodies && write {
        record.body = serde_json::from_slice(&body).ok();
    }
    let patch_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(PatchType::from_content_type);
    if verb == "patch" {
        record.patch_type = patch_type.map(|p| p.as_str().to_string());
    }

    if query.get("dryRun").is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the kubeplug sim API server",
        ));
    }
    let latency = shared.faults.latency();
    if latency > Duration::ZERO {
        tokio::time::sleep(latency).await;
    }
    shared
        .faults
        .wait_if_held(verb, &kind.plural, &record.user_agent)
        .await;
    let decided = shared.faults.decide(&RequestInfo {
        verb,
        resource: &kind.plural,
        group: &kind.group,
        kind: &kind.kind,
        namespace: req.namespace.as_deref(),
        user_agent: &record.user_agent,
        continued: verb == "list" && query.get("continue").is_some_and(|c| !c.is_empty()),
    });
    let mut injected = Injected::default();
    if let Some((said, fault)) = decided {
        record.fault = Some(said);
        match fault {
            Fault::Error {
                status,
                retry_after_seconds,
            } => return Err(injected_error(status, retry_after_seconds)),
            Fault::Conflict {} => {
                return Err(ApiError::conflict(
                    &kind.resource_name(),
                    req.name.as_deref().unwrap_or_default(),
                ));
            }
            Fault::GoneWatch {} => {
                let rv = query.get("resourceVersion").map_or("", String::as_str);
                return Err(ApiError::gone(format!(
                    "too old resource version: {rv} (injected fault)"
                )));
            }
            Fault::GoneContinue {} => {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter. (injected fault)",
                ));
            }
            Fault::Latency { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Fault::Timeout { ms } => {
                return Ok(response_faults::timed_out(Duration::from_millis(ms)).await);
            }
            Fault::StaleList { revisions } => injected.stale_revisions = Some(revisions),
            Fault::GoneWatchEvent {} => injected.watch = Some(watch::Injected::GoneEvent),
            Fault::CloseWatch { after_events } => {
                injected.watch = Some(watch::Injected::Stream(WatchFault::Close(after_events)));
            }
            Fault::StallWatch { after_events } => {
                injected.watch = Some(watch::Injected::Stream(WatchFault::Stall(after_events)));
            }
            Fault::DelayEvents { ms } => {
                injected.watch = Some(watch::Injected::Stream(WatchFault::Delay(
                    Duration::from_millis(ms),
                )));
            }
            Fault::Reset { after_events } if verb == "watch" => {
                injected.watch = Some(watch::Injected::Stream(WatchFault::Reset(after_events)));
            }
            Fault::Reset { .. } => injected.cut_body = true,
        }
    }

    let warnings = field_validation(query, &kind, verb, patch_type, &body)?;
    let mut changed = false;
    let mut response = dispatch_verb(
        shared,
        method,
        query,
        headers,
        body,
        &req,
        verb,
        &manager,
        patch_type,
        injected,
        &mut changed,
    )
    .await?;
    if write {
        record.changed = Some(changed);
    }
    if injected.cut_body {
        response = response_faults::cut_mid_body(response).await;
    }
    for warning in warnings {
        // RFC 7234 warning text: a quoted string, its quotes and backslashes escaped.
        let text = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append("warning", value);
        }
    }
    Ok(response)
}

/// What a scheduled fault changes in how a request is served (errors answer before it).
#[derive(Debug, Clone, Copy, Default)]
struct Injected {
    /// The watch's fault.
    watch: Option<watch::Injected>,
    /// Serve the list as of this many resourceVersions ago.
    stale_revisions: Option<u64>,
    /// Abort the connection half-way through the answer's body.
    cut_body: bool,
}

/// What a resource request asks, for authorization: a Namespace's own name is its namespace
/// too, and a list or watch of one name (`fieldSelector=metadata.name=N`) is asked for that
/// name, as the real server's request-info factory does.
fn resource_attributes(
    req: &ResourceRequest,
    verb: &str,
    query: &HashMap<String, String>,
) -> ResourceAttributes {
    let mut name = req.name.clone().unwrap_or_default();
    if name.is_empty()
        && matches!(verb, "list" | "watch")
        && let Some(selected) = query
            .get("fieldSelector")
            .and_then(|s| name_from_field_selector(s))
    {
        name = selected;
    }
    let namespace = match &req.namespace {
        Some(ns) => ns.clone(),
        None if req.kind.group.is_empty() && req.kind.plural == "namespaces" => name.clone(),
        None => String::new(),
    };
    ResourceAttributes {
        verb: verb.into(),
        group: req.kind.group.clone(),
        resource: req.kind.plural.clone(),
        subresource: req.subresource.clone().unwrap_or_default(),
        namespace,
        name,
    }
}

/// Answers an access review: the caller must be allowed to `create` it; its answer is
/// returned with 201 and nothing is stored.
fn review_response(
    shared: &Shared,
    caller: &Caller,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    review: Review,
    namespace: Option<String>,
) -> Result<Response, ApiError> {
    let attrs = Attributes::Resource(ResourceAttributes {
        verb: if method == Method::POST {
            "create".into()
        } else {
            method.as_str().to_lowercase()
        },
        group: review.group.into(),
        resource: review.plural.into(),
        namespace: namespace.clone().unwrap_or_default(),
        ..ResourceAttributes::default()
    });
    auth::authorize(shared, &caller.user, &attrs)?;
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "method {method} not allowed: {} only accepts create",
            review.plural
        )));
    }
    let body = parse_body(headers, body)?;
    let answered = access_review::answer(
        review,
        namespace.as_deref(),
        &caller.user,
        body,
        &*auth::authorizer(shared),
    )?;
    Ok(value_response(StatusCode::CREATED, &answered))
}

/// Answers a TokenRequest (`kubectl create token NAME -n NS`): the caller must be allowed to
/// `create` `serviceaccounts/token`, and the ServiceAccount must exist; the token is a new
/// bearer token of the sim for that ServiceAccount (its expiry is reported, not enforced:
/// README).
#[allow(clippy::too_many_arguments)]
fn token_response(
    shared: &Shared,
    caller: &Caller,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    namespace: &str,
    name: &str,
) -> Result<Response, ApiError> {
    let attrs = Attributes::Resource(ResourceAttributes {
        verb: super::attributes::resource_verb(method.as_str(), true, false).into(),
        resource: "serviceaccounts".into(),
        subresource: "token".into(),
        namespace: namespace.into(),
        name: name.into(),
        ..ResourceAttributes::default()
    });
    auth::authorize(shared, &caller.user, &attrs)?;
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "method {method} not allowed: serviceaccounts/token only accepts create"
        )));
    }
    if shared
        .store
        .get("serviceaccounts", namespace, name)
        .is_none()
    {
        return Err(ApiError::not_found("serviceaccounts", name));
    }
    let request = if body.is_empty() {
        json!({})
    } else {
        parse_body(headers, body)?
    };
    let user = super::authn::service_account_user(namespace, name);
    let groups = super::authn::service_account_groups(namespace);
    let token = shared.tokens.issue(super::authn::UserInfo {
        name: user,
        groups,
        ..Default::default()
    });
    let mut spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec.is_object() {
        spec = json!({});
    }
    // The real server's bounds: 10 minutes to 2^32 seconds, one hour by default.
    let seconds = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(3600)
        .clamp(600, 1 << 32);
    spec["expirationSeconds"] = json!(seconds);
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let answer = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok(value_response(StatusCode::CREATED, &answer))
}

/// `fieldValidation` for custom kinds with a schema, as the real server applies it to the
/// fields the schema does not declare (which are pruned in any case): `Strict` (kubectl's
/// default) refuses the write with 400, `Warn` (the default) answers with a `Warning` header
/// per field, `Ignore` says nothing. Built-in kinds are not checked (README).
fn field_validation(
    query: &HashMap<String, String>,
    kind: &ResourceKind,
    verb: &str,
    patch_type: Option<PatchType>,
    body: &[u8],
) -> Result<Vec<String>, ApiError> {
    let directive = query.get("fieldValidation").map_or("Warn", String::as_str);
    if !matches!(directive, "Strict" | "Warn" | "Ignore" | "") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", not {directive:?}"
        )));
    }
    if kind.builtin || kind.schema.is_none() || matches!(directive, "Ignore" | "") {
        return Ok(Vec::new());
    }
    let parsed = match (verb, patch_type) {
        ("create" | "update", _) => serde_json::from_slice::<Value>(body).ok(),
        ("patch", Some(PatchType::Merge)) => serde_json::from_slice::<Value>(body).ok(),
        ("patch", Some(PatchType::Apply)) => super::patch::parse_apply_body(body).ok(),
        _ => None,
    };
    let unknown = parsed.map_or_else(Vec::new, |b| super::schema::unknown_fields(kind, &b));
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let shown: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    if directive == "Strict" {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {fields}",
            kind = kind.kind,
            version = kind.version,
            fields = shown.join(", ")
        )));
    }
    Ok(shown)
}

/// Serves one resource request once its faults and field validation passed; sets `changed`
/// when a write changed what is stored. An update or patch changed it when the object it
/// answers is newer than the store was as the write began (a no-op answers the old object).
#[allow(clippy::too_many_arguments)]
async fn dispatch_verb(
    shared: &Arc<Shared>,
    method: &Method,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
    req: &ResourceRequest,
    verb: &str,
    manager: &str,
    patch_type: Option<PatchType>,
    injected: Injected,
    changed: &mut bool,
) -> Result<Response, ApiError> {
    let before = shared.store.current_rv();
    let newer = |object: &Value| {
        object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<u64>().ok())
            .is_some_and(|rv| rv > before)
    };
    let kind = req.kind.clone();
    let manager = manager.to_string();
    let ns = req.namespace.clone().unwrap_or_default();
    let name = req.name.clone().unwrap_or_default();
    let sub = match req.subresource.as_deref() {
        Some("status") => Sub::Status,
        _ => Sub::Main,
    };
    let is_scale = req.subresource.as_deref() == Some("scale");
    match verb {
        "get" => {
            let object = shared.get_object(&kind, &ns, &name)?;
            if is_scale {
                return Ok(value_response(StatusCode::OK, &scale::to_scale(&object)));
            }
            if table::wants_table(headers) && sub == Sub::Main {
                let meta =
                    serde_json::json!({"resourceVersion": object["metadata"]["resourceVersion"]});
                return Ok(value_response(
                    StatusCode::OK,
                    &table::table(&kind, &[object], meta),
                ));
            }
            Ok(json_response(StatusCode::OK, render(&kind, &object)))
        }
        "list" => {
            let params = ListParams {
                namespace: req.namespace.clone(),
                labels: LabelSelector::parse(
                    query.get("labelSelector").map_or("", String::as_str),
                )?,
                fields: FieldSelector::parse_for(
                    &kind,
                    query.get("fieldSelector").map_or("", String::as_str),
                )?,
                limit: match query.get("limit") {
                    Some(l) => Some(
                        l.parse()
                            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
                    ),
                    None => None,
                },
                continue_token: query.get("continue").cloned(),
            };
            let page = match injected.stale_revisions {
                Some(revisions) => list::stale(shared, &kind, &params, revisions),
                None => page(shared, &kind, &params)?,
            };
            if table::wants_table(headers) {
                let table = table::table(&kind, &page.items, page.meta);
                return Ok(value_response(StatusCode::OK, &table));
            }
            Ok(json_response(StatusCode::OK, encode_list(&kind, &page)))
        }
        "watch" => {
            let resource_version = match query.get("resourceVersion").map(String::as_str) {
                None | Some("") | Some("0") => None,
                Some(rv) => Some(rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?),
            };
            let timeout = match query.get("timeoutSeconds") {
                Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
                })?)),
                None => None,
            };
            let params = WatchParams {
                resource_version,
                namespace: req.namespace.clone(),
                labels: LabelSelector::parse(
                    query.get("labelSelector").map_or("", String::as_str),
                )?,
                fields: FieldSelector::parse_for(
                    &kind,
                    query.get("fieldSelector").map_or("", String::as_str),
                )?,
                timeout,
                bookmarks: flag(query, "allowWatchBookmarks"),
                send_initial_events: flag(query, "sendInitialEvents"),
                table: table::wants_table(headers),
            };
            Ok(watch::start(shared, kind, params, injected.watch))
        }
        "create" => {
            if req.name.is_some() {
                return Err(ApiError::method_not_allowed(
                    "POST is not allowed on a named object",
                ));
            }
            let body = parse_body(headers, &body)?;
            if is_crd(&kind) {
                // A CRD whose kinds cannot be served is refused, as the real server's
                // validation refuses it, instead of being stored and ignored.
                kinds_from_crd(&body)?;
            }
            let created = shared.create(&kind, req.namespace.as_deref(), body, &manager, false)?;
            *changed = true;
            if is_crd(&kind) {
                register_crd(shared, &created);
            }
            Ok(json_response(StatusCode::CREATED, render(&kind, &created)))
        }
        "update" => {
            let body = parse_body(headers, &body)?;
            if is_scale {
                let scale = scale::update(shared, &kind, &ns, &name, &body, &manager)?;
                *changed = newer(&scale);
                return Ok(value_response(StatusCode::OK, &scale));
            }
            if is_crd(&kind) && sub == Sub::Main {
                kinds_from_crd(&body)?;
            }
            let updated = shared.update(&kind, &ns, &name, body, sub, &manager)?;
            *changed = newer(&updated);
            if is_crd(&kind) {
                register_crd(shared, &updated);
            }
            Ok(json_response(StatusCode::OK, render(&kind, &updated)))
        }
        "patch" => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch_type = patch_type.ok_or_else(|| {
                ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format ({content_type}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                ))
            })?;
            if is_scale {
                let scale = scale::patch(shared, &kind, &ns, &name, &body, patch_type, &manager)?;
                *changed = newer(&scale);
                return Ok(value_response(StatusCode::OK, &scale));
            }
            if patch_type == PatchType::Apply
                && query.get("fieldManager").is_none_or(|m| m.is_empty())
            {
                return Err(ApiError::invalid(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            let force = flag(query, "force");
            let (object, created) =
                shared.patch(&kind, &ns, &name, &body, patch_type, sub, &manager, force)?;
            *changed = created || newer(&object);
            if is_crd(&kind) {
                register_crd(shared, &object);
            }
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, render(&kind, &object)))
        }
        "delete" => {
            let opts = delete_options(query, headers, &body)?;
            let object = shared.delete(&kind, &ns, &name, &opts)?;
            *changed = true;
            Ok(json_response(StatusCode::OK, render(&kind, &object)))
        }
        "deletecollection" => {
            let opts = delete_options(query, headers, &body)?;
            let labels =
                LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let fields = FieldSelector::parse_for(
                &kind,
                query.get("fieldSelector").map_or("", String::as_str),
            )?;
            let (items, _, _) = shared.store.list(
                &kind.storage_name(),
                req.namespace.as_deref(),
                None,
                None,
                |o| labels.matches(o) && fields.matches(o),
            );
            let mut deleted = 0usize;
            for item in items {
                let (ns, name) = super::store::key_of(&item);
                match shared.delete(&kind, &ns, &name, &opts) {
                    Ok(_) => {
                        deleted += 1;
                        *changed = true;
                    }
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(value_response(
                StatusCode::OK,
                &success_status(
                    serde_json::json!({"kind": kind.plural, "group": kind.group, "deleted": deleted}),
                ),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "method {method} not allowed"
        ))),
    }
}

/// Answers a discovery or health request.
fn discovery_response(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    target: Target,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "method {method} not allowed on {}",
            uri.path()
        )));
    }
    let not_found = || ApiError::no_route(uri.path());
    let value = match target {
        Target::Version => discovery::version(),
        Target::Health => return Ok((StatusCode::OK, "ok").into_response()),
        Target::CoreVersions => discovery::core_versions(&shared_address(headers)),
        Target::Groups => discovery::groups(&shared.registry()),
        Target::Group(g) => discovery::group(&shared.registry(), &g).ok_or_else(not_found)?,
        Target::Resources(g, v) => {
            discovery::resources(&shared.registry(), &g, &v).ok_or_else(not_found)?
        }
        Target::OpenApiRoot => discovery::openapi_root(&shared.registry()),
        Target::OpenApi(g, v) => {
            discovery::openapi(&shared.registry(), &g, &v).ok_or_else(not_found)?
        }
        Target::Resource(_) | Target::Review(..) | Target::Token(..) => return Err(not_found()),
    };
    Ok(value_response(StatusCode::OK, &value))
}

fn shared_address(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string()
}

fn delete_options(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let mut opts = DeleteOptions {
        propagation: query.get("propagationPolicy").cloned(),
        ..DeleteOptions::default()
    };
    if !body.is_empty() {
        let value = parse_body(headers, body)?;
        if let Some(p) = value.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation = Some(p.to_string());
        }
        if value.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            opts.propagation = Some("Orphan".into());
        }
        opts.resource_version = value
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.uid = value
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    if let Some(p) = &opts.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(format!(
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{p}\""
        )));
    }
    Ok(opts)
}

fn is_crd(kind: &ResourceKind) -> bool {
    kind.group == "apiextensions.k8s.io" && kind.kind == "CustomResourceDefinition"
}

/// A CRD created or changed over the API (or loaded by the library) registers its kinds at
/// once, with its current printer columns and schema, and its status says so as the real
/// server's does once the names are served (`NamesAccepted` and `Established` true,
/// `acceptedNames`, `storedVersions`), so `kubectl wait --for condition=established` returns.
pub(crate) fn register_crd(shared: &Shared, crd: &Value) {
    match kinds_from_crd(crd) {
        Ok(kinds) => {
            {
                let mut registry = shared.registry.write().unwrap_or_else(|p| p.into_inner());
                for kind in kinds {
                    tracing::info!(group = %kind.group, version = %kind.version, plural = %kind.plural, "registered custom kind");
                    registry.register(kind);
                }
            }
            establish(shared, crd);
        }
        Err(err) => tracing::warn!(%err, "created CRD could not be registered"),
    }
}

/// Writes a registered CRD's status (through `/status`, as the apiextensions controllers
/// do); a no-op when it already says so.
fn establish(shared: &Shared, crd: &Value) {
    let Some(name) = crd["metadata"]["name"].as_str() else {
        return;
    };
    let Ok(kind) = shared.kind("customresourcedefinitions.apiextensions.k8s.io") else {
        return;
    };
    let result = shared.modify_part(&kind, "", name, "kube-apiserver", Sub::Status, |o| {
        let before = o.get("status").cloned();
        let mut names = o["spec"]["names"].clone();
        if names.is_object() {
            if names.get("singular").is_none() {
                names["singular"] =
                    json!(names["kind"].as_str().unwrap_or_default().to_lowercase());
            }
            if names.get("listKind").is_none() {
                names["listKind"] = json!(format!(
                    "{}List",
                    names["kind"].as_str().unwrap_or_default()
                ));
            }
        }
        let storage: Vec<Value> = o["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["storage"] == true)
            .map(|v| v["name"].clone())
            .collect();
        let status = o
            .as_object_mut()
            .map(|m| m.entry("status").or_insert_with(|| json!({})));
        let Some(status) = status else {
            return false;
        };
        if !status.is_object() {
            *status = json!({});
        }
        status["acceptedNames"] = names;
        let mut stored: Vec<Value> = status["storedVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for v in storage {
            if !stored.contains(&v) {
                stored.push(v);
            }
        }
        status["storedVersions"] = Value::Array(stored);
        let now = super::patch::fields::now();
        let mut conditions: Vec<Value> =
            status["conditions"].as_array().cloned().unwrap_or_default();
        for (type_, reason, message) in [
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            (
                "Established",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ] {
            let holds = conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True");
            if !holds {
                conditions.retain(|c| c["type"] != type_);
                conditions.push(json!({"type": type_, "status": "True", "reason": reason,
                    "message": message, "lastTransitionTime": now}));
            }
        }
        status["conditions"] = Value::Array(conditions);
        o.get("status") != before.as_ref()
    });
    if let Err(err) = result {
        tracing::warn!(%err, crd = name, "could not write the CRD's status");
    }
}
