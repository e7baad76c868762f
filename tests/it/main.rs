//! kubeplug's end-to-end tests that run the `kubeplug` binary or a host with its status
//! server, in one test binary (one link of wasmtime and kube instead of one per file):
//! `kubeplug eval`, the live stream and the dashboard. The controller-level tests
//! (`controller`, `policy`, `reload`, `crd_controllers`), the sandbox, its memory, the
//! TypeScript and Python plugins, and the replicas keep binaries of their own; see the
//! README's "Tests" section for why.

#[path = "../common/mod.rs"]
mod common;

mod dashboard;
mod eval;
mod stream;
