//! kubeplug's end-to-end tests, in one test binary (one link of wasmtime and kube instead of
//! one per file): `kubeplug eval`, the live stream and the dashboard; the controller, policy,
//! hot reload and custom-resource controllers against the embedded API server; the host's
//! memory after a memory bomb. The tests share one process, so none reads anything
//! process-wide: log lines are captured per test (by the test's tokio runtime, see
//! `common::cluster`), and the two that measure the resident set run in a process of their
//! own (`common::run_alone`). The sandbox, the TypeScript and Python plugins and the replicas
//! keep binaries of their own; host/Cargo.toml and the README's "Tests" section say why.

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod controller;
mod crd_controllers;
mod dashboard;
mod eval;
mod oci;
mod oci_sign;
mod plugin_objects;
mod policy;
mod prometheus;
mod registry;
mod registry_hostile;
mod reload;
mod sandbox_memory;
mod sdk_packages;
mod stream;
mod test_faults;
mod why;

/// The log capture keeps the tests of this binary apart: the lines written on another test's
/// runtime (by its tasks and its blocking calls) are that test's, and not this one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_test_reads_the_log_lines_of_its_own_runtime_only() {
    use common::cluster::{capture_logs, log_lines_with};
    capture_logs();
    let seen_by_other = std::thread::spawn(|| {
        let other = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        other.block_on(async {
            tokio::spawn(async { tracing::info!("a line of the other test's task") })
                .await
                .unwrap();
            tokio::task::spawn_blocking(|| {
                tracing::info!("a line of the other test's blocking call")
            })
            .await
            .unwrap();
            log_lines_with("a line of the other test's")
        })
    })
    .join()
    .unwrap();
    assert_eq!(seen_by_other.len(), 2, "{seen_by_other:?}");
    tokio::spawn(async { tracing::info!("a line of this test's task") })
        .await
        .unwrap();
    tokio::task::spawn_blocking(|| tracing::info!("a line of this test's blocking call"))
        .await
        .unwrap();
    tracing::info!("a line of this test's own code");
    let mine = log_lines_with("a line of");
    assert_eq!(mine.len(), 3, "{mine:?}");
    assert!(mine.iter().all(|l| l.contains("this test's")), "{mine:?}");
}
