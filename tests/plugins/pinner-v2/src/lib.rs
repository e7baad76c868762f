//! Test plugin `pinner` 2.0.0: pins every Deployment container to `example.com/app:v2`.
//! The next version of `pinner-v1`: hot reload swaps them.

const VERSION: &str = "2.0.0";
const TARGET: &str = "example.com/app:v2";

#[path = "../../pinner/pinner.rs"]
mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
