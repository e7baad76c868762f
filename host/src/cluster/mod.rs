//! Cluster access: label selectors today; watches and the shared cache build on it.

pub mod selector;
