//! The host's memory after a guest exhausts its own: measured in a process of its own
//! ([`common::run_alone`]), so that no other test (compiling plugins, say) moves the resident
//! set meanwhile.

use crate::common;

use common::sandbox::{call, hostile, runtime, still_behaves};
use kubeplug::plugin::CallError;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// [`unbounded_allocation_is_out_of_memory_and_memory_comes_back`] in a process of its own.
#[test]
fn unbounded_allocation_is_out_of_memory_and_memory_comes_back_alone() {
    common::run_alone(
        "sandbox_memory::unbounded_allocation_is_out_of_memory_and_memory_comes_back",
    );
}

#[ignore = "measures the process's resident set: run alone by the test of the same name + _alone"]
#[tokio::test]
async fn unbounded_allocation_is_out_of_memory_and_memory_comes_back() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    still_behaves(&p).await;
    let mut before = 0;
    for round in 0..4 {
        // The first round warms the pooled slot; the rest must not grow the host.
        if round == 1 {
            before = rss_bytes();
        }
        match call(&p, r#"{"mode": "alloc"}"#).await.outcome {
            Err(CallError::OutOfMemory { limit, requested }) => {
                assert_eq!(limit, 64 << 20);
                assert!(requested > limit);
            }
            other => panic!("expected out of memory, got {other:?}"),
        }
    }
    let after = rss_bytes();
    // Each call touched 64 MiB; the slot keeps at most its first pages resident.
    assert!(
        after < before + (16 << 20),
        "RSS grew from {before} to {after} bytes"
    );
    still_behaves(&p).await;
}
