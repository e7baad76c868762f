//! Test plugin `pinner` 2.0.0: pins every Deployment container to `example.com/app:v2`.
//! `pinner-v1`, `pinner-v2` and `pinner-v3` are one plugin at three versions: hot reload
//! swaps them (v3 reconciles Pods instead).

/// The version this build declares.
pub const VERSION: &str = "2.0.0";
/// The image every container is pinned to.
pub const TARGET: &str = "example.com/app:v2";
/// The kind it reconciles (apiVersion, kind).
pub const KIND: (&str, &str) = ("apps/v1", "Deployment");
/// Where the pod spec sits in that kind's object.
pub const POD_SPEC: &[&str] = &["spec", "template", "spec"];

/// The reconciler the three versions share.
#[path = "../../pinner/pinner.rs"]
pub mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
