//! Typed custom resources: a spec/status struct pair is enough to read the object, name it
//! and patch its status.
//!
//! kube's `CustomResource` derive would also generate the CRD's schema, but it brings
//! kube-core and schemars (with their proc-macros) into every plugin build; the CRD manifest
//! is written by hand next to the plugin instead, and this is all the plugin needs at run time.
//!
//! ```
//! use kubeplug_sdk::{CustomResource, custom_kind};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize)]
//! #[serde(rename_all = "camelCase")]
//! pub struct WidgetSpec { pub size: i32 }
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
//! pub struct WidgetStatus { pub ready: bool }
//!
//! custom_kind!(WidgetSpec, status = WidgetStatus,
//!              group = "example.com", version = "v1", kind = "Widget", plural = "widgets");
//! pub type Widget = CustomResource<WidgetSpec>;
//! # fn main() {}
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The spec type of a custom kind, with the kind's identity. Implement it with
/// [`custom_kind!`](crate::custom_kind).
pub trait CustomKind: Serialize + DeserializeOwned + Default + Clone {
    /// The API group, for example `samplecontroller.k8s.io`.
    const GROUP: &'static str;
    /// The version, for example `v1alpha1`.
    const VERSION: &'static str;
    /// `group/version`.
    const API_VERSION: &'static str;
    /// The kind, for example `Foo`.
    const KIND: &'static str;
    /// The plural resource name, for example `foos`.
    const PLURAL: &'static str;
    /// The status type (what the status subresource holds).
    type Status: Serialize + DeserializeOwned + Default + Clone + PartialEq;
}

/// Implements [`CustomKind`] for a spec type (namespaced kinds).
#[macro_export]
macro_rules! custom_kind {
    ($spec:ty, status = $status:ty, group = $group:literal, version = $version:literal,
     kind = $kind:literal, plural = $plural:literal) => {
        impl $crate::CustomKind for $spec {
            const GROUP: &'static str = $group;
            const VERSION: &'static str = $version;
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const KIND: &'static str = $kind;
            const PLURAL: &'static str = $plural;
            type Status = $status;
        }
    };
}

/// One object of a custom kind: metadata, spec and (absent until first written) status.
///
/// It implements k8s-openapi's `Resource` and `Metadata`, so everything in this SDK that
/// takes a Kubernetes type takes it too (`KindRef::of`, `ObjectRef::to`, owner references,
/// `Metadata::reconciles`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(bound(deserialize = "S: CustomKind", serialize = "S: CustomKind"))]
pub struct CustomResource<S: CustomKind> {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: S,
    /// The observed state; `None` until a controller first writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<S::Status>,
}

impl<S: CustomKind> k8s_openapi::Resource for CustomResource<S> {
    const API_VERSION: &'static str = S::API_VERSION;
    const GROUP: &'static str = S::GROUP;
    const KIND: &'static str = S::KIND;
    const VERSION: &'static str = S::VERSION;
    const URL_PATH_SEGMENT: &'static str = S::PLURAL;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl<S: CustomKind> k8s_openapi::Metadata for CustomResource<S> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<S: CustomKind> CustomResource<S> {
    /// The current status, or the default one when none was written yet.
    pub fn status_or_default(&self) -> S::Status {
        self.status.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KindRef, ObjectRef};
    use serde_json::json;

    #[derive(Clone, Debug, Default, Deserialize, Serialize)]
    #[serde(rename_all = "camelCase")]
    struct WidgetSpec {
        size: i32,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    struct WidgetStatus {
        ready: bool,
    }

    crate::custom_kind!(
        WidgetSpec,
        status = WidgetStatus,
        group = "example.com",
        version = "v1",
        kind = "Widget",
        plural = "widgets"
    );

    type Widget = CustomResource<WidgetSpec>;

    #[test]
    fn reads_spec_and_status_and_names_its_kind() {
        let w: Widget = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u1"},
            "spec": {"size": 3}, "status": {"ready": true}
        }))
        .unwrap();
        assert_eq!(w.spec.size, 3);
        assert_eq!(w.status, Some(WidgetStatus { ready: true }));
        let k = KindRef::of::<Widget>();
        assert_eq!(
            (k.api_version.as_str(), k.kind.as_str()),
            ("example.com/v1", "Widget")
        );
        let r = ObjectRef::to(&w);
        assert_eq!((r.kind.as_str(), r.key()), ("Widget", "ns/w".to_string()));
    }

    #[test]
    fn missing_spec_and_status_default() {
        let w: Widget = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
        assert_eq!(w.spec.size, 0);
        assert!(w.status.is_none());
        assert_eq!(w.status_or_default(), WidgetStatus::default());
        assert!(serde_json::to_value(&w).unwrap().get("status").is_none());
    }
}
