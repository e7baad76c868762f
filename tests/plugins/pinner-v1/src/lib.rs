//! Test plugin `pinner` 1.0.0: pins every Deployment container to `example.com/app:v1`.
//! `pinner-v2` is the same plugin at its next version (another image): hot reload swaps them.

const VERSION: &str = "1.0.0";
const TARGET: &str = "example.com/app:v1";

#[path = "../../pinner/pinner.rs"]
mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
