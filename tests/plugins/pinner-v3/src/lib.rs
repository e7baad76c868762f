//! Test plugin `pinner` 3.0.0: the next version of `pinner-v2`, but reconciling Pods: pins
//! every Pod container to `example.com/app:v3`. Swapping it in restarts the plugin.

pub const VERSION: &str = "3.0.0";
pub const TARGET: &str = "example.com/app:v3";
pub const KIND: (&str, &str) = ("v1", "Pod");
pub const POD_SPEC: &[&str] = &["spec"];

#[path = "../../pinner/pinner.rs"]
pub mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
