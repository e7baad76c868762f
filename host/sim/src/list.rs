//! List with selectors, `limit` and `continue` (tokens carry the resourceVersion of the first
//! page; a token older than the retained history answers 410 Expired), and a lagging list
//! (the state of an earlier resourceVersion) when a fault asks for one.

use super::errors::ApiError;
use super::kinds::ResourceKind;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::watch::render;
use serde::{Deserialize, Serialize};

/// Parameters of one list request.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0 = none).
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Token {
    rv: u64,
    ns: String,
    name: String,
}

fn decode(token: &str) -> Result<Token, ApiError> {
    let bytes =
        hex::decode(token).map_err(|_| ApiError::bad_request("continue key is not valid"))?;
    serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("continue key is not valid"))
}

fn encode(token: &Token) -> String {
    hex::encode(serde_json::to_vec(token).unwrap_or_default())
}

/// One page of a list: the items and the list metadata (`resourceVersion`, `continue`).
pub struct Page {
    /// Matching objects in key order.
    pub items: Vec<std::sync::Arc<serde_json::Value>>,
    /// `ListMeta`.
    pub meta: serde_json::Value,
}

/// Reads one page of a list.
pub fn page(shared: &Shared, kind: &ResourceKind, params: &ListParams) -> Result<Page, ApiError> {
    let resource = kind.storage_name();
    let after = match params.continue_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => {
            let token = decode(token)?;
            if token.rv < shared.store.compacted_rv() {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            Some(token)
        }
        None => None,
    };
    let after_key = after.as_ref().map(|t| (t.ns.clone(), t.name.clone()));
    let limit = params.limit.filter(|l| *l > 0);
    let (items, next, rv) = shared.store.list(
        &resource,
        params.namespace.as_deref(),
        after_key.as_ref(),
        limit,
        |o| params.fields.matches(o) && params.labels.matches(o),
    );
    let list_rv = after.as_ref().map_or(rv, |t| t.rv);
    let continue_token = next.map(|(ns, name)| {
        encode(&Token {
            rv: list_rv,
            ns,
            name,
        })
    });
    let mut meta = serde_json::json!({"resourceVersion": list_rv.to_string()});
    if let Some(token) = continue_token {
        meta["continue"] = serde_json::Value::String(token);
    }
    Ok(Page { items, meta })
}

/// The whole list as it was `revisions` resourceVersions ago (an injected lagging cache):
/// selectors apply, `limit` and `continue` do not, and it goes back no further than the
/// sim's event history.
pub fn stale(shared: &Shared, kind: &ResourceKind, params: &ListParams, revisions: u64) -> Page {
    let target = shared.store.current_rv().saturating_sub(revisions);
    let (items, rv) = shared.store.list_at(
        &kind.storage_name(),
        params.namespace.as_deref(),
        target,
        |o| params.fields.matches(o) && params.labels.matches(o),
    );
    Page {
        items,
        meta: serde_json::json!({"resourceVersion": rv.to_string()}),
    }
}

/// Encodes a page as a `<Kind>List`.
pub fn encode_list(kind: &ResourceKind, page: &Page) -> Vec<u8> {
    let (items, meta) = (&page.items, &page.meta);
    let mut out = Vec::with_capacity(items.len() * 1024 + 256);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            kind.list_kind(),
            kind.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&render(kind, item));
    }
    out.extend_from_slice(b"]}");
    out
}
