//! The logic both `pinner` test plugins share: pin the image of every container of a
//! Deployment to the crate's `TARGET` with one strategic merge patch; nothing when all match.
//! The crate root defines `TARGET` and `VERSION`.

use kubeplug_sdk::{Action, Error, Metadata, Reconciler, Request};
use serde_json::{Value, json};

/// The pinner reconciler.
pub struct Pinner;

impl Reconciler for Pinner {
    fn metadata() -> Metadata {
        Metadata::new("pinner", crate::VERSION)
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let Some(object) = req.object::<Value>()? else {
            return Ok(Vec::new());
        };
        let containers = object
            .pointer("/spec/template/spec/containers")
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
        let body = json!({"spec": {"template": {"spec": {"containers": fixes}}}});
        Ok(vec![Action::strategic_patch(&req.target, body)])
    }
}
