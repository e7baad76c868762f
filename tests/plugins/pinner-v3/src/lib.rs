//! Test plugin `pinner` 3.0.0: the next version of `pinner-v2`, but reconciling Pods: pins
//! every Pod container to `example.com/app:v3`. Swapping it in restarts the plugin.

const VERSION: &str = "3.0.0";
const TARGET: &str = "example.com/app:v3";
const KIND: (&str, &str) = ("v1", "Pod");
const POD_SPEC: &[&str] = &["spec"];

#[path = "../../pinner/pinner.rs"]
mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
