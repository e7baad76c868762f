//! Test plugin `pinner` 1.0.0: pins every Deployment container to `example.com/app:v1`.
//! `pinner-v1`, `pinner-v2` and `pinner-v3` are one plugin at three versions: hot reload
//! swaps them (v3 reconciles Pods instead).

pub const VERSION: &str = "1.0.0";
pub const TARGET: &str = "example.com/app:v1";
pub const KIND: (&str, &str) = ("apps/v1", "Deployment");
pub const POD_SPEC: &[&str] = &["spec", "template", "spec"];

#[path = "../../pinner/pinner.rs"]
pub mod pinner;

kubeplug_sdk::export!(pinner::Pinner);
