//! Test plugin `pinner` 3.0.0: the next version of `pinner-v2`, but reconciling Pods: pins
//! every Pod container to `example.com/app:v3`. Swapping it in restarts the plugin.

/// The version this build declares.
pub const VERSION: &str = "3.0.0";
/// The image every container is pinned to.
pub const TARGET: &str = "example.com/app:v3";
/// The kind it reconciles (apiVersion, kind).
pub const KIND: (&str, &str) = ("v1", "Pod");
/// Where the pod spec sits in that kind's object.
pub const POD_SPEC: &[&str] = &["spec"];

/// The reconciler the three versions share.
#[path = "../../pinner/pinner.rs"]
pub mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
