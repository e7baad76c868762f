//! Status writes through the status subresource.

use crate::{Action, CustomKind, CustomResource, ObjectRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde_json::json;

/// A JSON merge patch of `object`'s status subresource setting `status` (its fields that
/// serialize as `null` are removed from the stored status).
pub fn status_patch<K, S>(object: &K, status: &S) -> Result<Action, crate::Error>
where
    K: Resource + Metadata<Ty = ObjectMeta>,
    S: Serialize,
{
    let body = json!({"status": serde_json::to_value(status)?});
    Ok(Action::status_patch(&ObjectRef::to(object), body))
}

impl<S: CustomKind> CustomResource<S> {
    /// The status patch that makes the stored status `status`, or `None` when it already is
    /// (so a converged object is not written again).
    pub fn update_status(&self, status: S::Status) -> Result<Option<Action>, crate::Error> {
        if self.status.as_ref() == Some(&status) {
            return Ok(None);
        }
        status_patch(self, &status).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Action, CustomResource};
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    #[derive(Clone, Debug, Default, Deserialize, Serialize)]
    struct GadgetSpec {}

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct GadgetStatus {
        ready_count: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    }

    crate::custom_kind!(
        GadgetSpec,
        status = GadgetStatus,
        group = "example.com",
        version = "v1",
        kind = "Gadget",
        plural = "gadgets"
    );

    #[test]
    fn patches_the_status_subresource_only_when_it_differs() {
        let g: CustomResource<GadgetSpec> = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ns"}, "status": {"readyCount": 1}
        }))
        .unwrap();
        let same = GadgetStatus {
            ready_count: 1,
            note: None,
        };
        assert!(g.update_status(same).unwrap().is_none());
        let next = GadgetStatus {
            ready_count: 2,
            note: None,
        };
        let Some(Action::Patch(p)) = g.update_status(next).unwrap() else {
            panic!("expected a patch");
        };
        assert_eq!(p.subresource.as_deref(), Some("status"));
        assert_eq!(p.patch_type, crate::PatchType::Merge);
        assert_eq!(p.target.kind, "Gadget");
        assert_eq!(p.target.api_version, "example.com/v1");
        let body: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_eq!(body, json!({"status": {"readyCount": 2}}));
    }
}
