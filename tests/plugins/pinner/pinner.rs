//! The logic the `pinner` test plugins share: pin the image of every container of the object
//! to the crate's `TARGET` with one strategic merge patch; nothing when all match. The crate
//! root defines `VERSION`, `TARGET`, the reconciled `KIND` (apiVersion, kind) and `POD_SPEC`,
//! the path of the pod spec within that kind.

use kubeplug_sdk::{Action, Error, KindRef, Metadata, Reconciler, Request};
use serde_json::{Value, json};

/// The pinner reconciler.
pub struct Pinner;

impl Reconciler for Pinner {
    fn metadata() -> Metadata {
        let (api_version, kind) = crate::KIND;
        Metadata::new("pinner", crate::VERSION).reconciles_kind(KindRef::new(api_version, kind))
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let Some(object) = req.object::<Value>()? else {
            return Ok(Vec::new());
        };
        let pod_spec: String = crate::POD_SPEC.iter().map(|p| format!("/{p}")).collect();
        let containers = object
            .pointer(&format!("{pod_spec}/containers"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let fixes: Vec<Value> = containers
            .iter()
            .filter(|c| c["image"].as_str() != Some(crate::TARGET))
            .map(|c| json!({"name": c["name"], "image": crate::TARGET}))
            .collect();
        if fixes.is_empty() {
            return Ok(Vec::new());
        }
        let body = crate::POD_SPEC.iter().rev().fold(
            json!({"containers": fixes}),
            |inner, key| json!({*key: inner}),
        );
        Ok(vec![Action::strategic_patch(&req.target, body)])
    }
}
