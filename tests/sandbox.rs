//! The sandbox against hostile guests: each misbehaviour is contained with a typed error or a
//! denied operation, and a well-behaved plugin keeps working in the same process afterwards.

mod common;

use common::sandbox::{call, ctx, hostile, messages, request, runtime, still_behaves};
use common::{plugin, test_plugin};
use kubeplug::plugin::{CacheOutcome, CallError, CompileCache, Limits, LoadError};
use std::time::{Duration, Instant};

#[tokio::test]
async fn infinite_loop_times_out_close_to_the_deadline() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let started = Instant::now();
    let report = p
        .reconcile(&request(r#"{"mode": "loop"}"#), &ctx(limits))
        .await;
    let took = started.elapsed();
    assert_eq!(
        report.outcome.unwrap_err(),
        CallError::Timeout {
            limit: limits.timeout
        }
    );
    assert!(
        took >= Duration::from_millis(200),
        "stopped early: {took:?}"
    );
    assert!(took < Duration::from_millis(1500), "stopped late: {took:?}");
    still_behaves(&p).await;
}

#[tokio::test]
async fn sleeping_in_a_host_call_times_out_too() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let started = Instant::now();
    let report = p
        .reconcile(&request(r#"{"mode": "sleep"}"#), &ctx(limits))
        .await;
    assert!(
        matches!(report.outcome, Err(CallError::Timeout { .. })),
        "{:?}",
        report.outcome
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn panics_carry_the_guest_message() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    match call(&p, r#"{"mode": "panic"}"#).await.outcome {
        Err(CallError::Panic { message }) => {
            assert!(
                message.starts_with("hostile plugin panicked on purpose (at "),
                "{message}"
            )
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    still_behaves(&p).await;
}

#[tokio::test]
async fn deep_recursion_is_a_stack_overflow() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    assert_eq!(
        call(&p, r#"{"mode": "recurse"}"#)
            .await
            .outcome
            .unwrap_err(),
        CallError::StackOverflow
    );
    match call(&p, r#"{"mode": "recurse-in-memory"}"#).await.outcome {
        Err(CallError::Trap { message }) => {
            assert!(message.contains("stack overflow"), "{message}")
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    still_behaves(&p).await;
}

#[tokio::test]
async fn too_many_actions_are_refused() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    match call(&p, r#"{"mode": "many-actions", "count": 5000}"#)
        .await
        .outcome
    {
        Err(CallError::InvalidOutput(v)) => assert_eq!(
            v.to_string(),
            "returned 5000 actions, more than the limit of 1000"
        ),
        other => panic!("expected too many actions, got {other:?}"),
    }
    // A million cannot even be built inside the memory limit.
    let million = call(&p, r#"{"mode": "many-actions", "count": 1000000}"#).await;
    assert!(
        matches!(
            million.outcome,
            Err(CallError::OutOfMemory { .. } | CallError::InvalidOutput(_))
        ),
        "{:?}",
        million.outcome
    );
    still_behaves(&p).await;
}

#[tokio::test]
async fn huge_log_messages_are_refused() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let big = call(&p, r#"{"mode": "big-log", "bytes": 100000000}"#).await;
    assert!(
        matches!(big.outcome, Err(CallError::OutOfMemory { .. })),
        "{:?}",
        big.outcome
    );
    match call(&p, r#"{"mode": "big-log", "bytes": 5000000}"#)
        .await
        .outcome
    {
        Err(CallError::InvalidOutput(v)) => assert!(
            v.to_string().contains("more than the limit of 4194304"),
            "{v}"
        ),
        other => panic!("expected output too large, got {other:?}"),
    }
    still_behaves(&p).await;
}

#[tokio::test]
async fn invalid_patch_json_is_invalid_output() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    match call(&p, r#"{"mode": "bad-patch"}"#).await.outcome {
        Err(e @ CallError::InvalidOutput(_)) => {
            assert!(
                e.to_string().contains("action 0 (patch): invalid JSON"),
                "{e}"
            );
            assert!(!e.is_transient());
        }
        other => panic!("expected invalid output, got {other:?}"),
    }
}

#[tokio::test]
async fn no_files_no_environment_no_arguments() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let lines = messages(&call(&p, r#"{"mode": "files"}"#).await);
    assert_eq!(lines.len(), 4, "{lines:?}");
    for line in &lines {
        assert!(line.contains(": denied: "), "escaped the sandbox: {line}");
    }
    assert!(!std::path::Path::new("/tmp/kubeplug-escape").exists());
    unsafe { std::env::set_var("KUBEPLUG_SECRET", "hunter2") };
    let lines = messages(&call(&p, r#"{"mode": "env"}"#).await);
    assert_eq!(lines, ["env vars: 0", "args: 0"]);
}

#[tokio::test]
async fn no_sockets() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let lines = messages(&call(&p, &format!(r#"{{"mode": "socket", "addr": "{addr}"}}"#)).await);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        assert!(line.contains(": denied: "), "escaped the sandbox: {line}");
    }
    assert!(
        listener.accept().is_err(),
        "the plugin reached the host's listener"
    );
    still_behaves(&p).await;
}

#[tokio::test]
async fn stdout_and_stderr_are_captured_and_attributed() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let report = call(&p, r#"{"mode": "stdout"}"#).await;
    assert!(report.outcome.is_ok());
    let logs: Vec<_> = report
        .logs
        .iter()
        .map(|l| (format!("{:?}", l.source), l.message.as_str()))
        .collect();
    assert_eq!(
        logs,
        [
            ("Stdout".to_string(), "hello from the plugin's stdout"),
            ("Stderr".to_string(), "hello from the plugin's stderr")
        ]
    );
}

#[tokio::test]
async fn transient_and_permanent_errors_are_told_apart() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let t = call(&p, r#"{"mode": "transient"}"#)
        .await
        .outcome
        .unwrap_err();
    assert_eq!(t, CallError::Transient("try again later".into()));
    assert!(t.is_transient());
    let perm = call(&p, r#"{"mode": "nonsense"}"#)
        .await
        .outcome
        .unwrap_err();
    assert!(matches!(perm, CallError::Permanent(_)) && !perm.is_transient());
}

#[tokio::test]
async fn load_errors_are_typed() {
    let rt = runtime(None);
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "not wasm at all").unwrap();
    assert!(matches!(
        rt.load_file(&text).await,
        Err(LoadError::NotWasm { .. })
    ));
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    assert!(matches!(
        rt.load_file(&core).await,
        Err(LoadError::NotAComponent { .. })
    ));
    match rt.load_file(&test_plugin("future-contract")).await {
        Err(LoadError::ContractMismatch {
            found, supported, ..
        }) => {
            assert_eq!((found.as_str(), supported.as_str()), ("9.9.0", "0.1.0"))
        }
        other => panic!("expected a contract mismatch, got {other:?}"),
    }
    assert!(matches!(
        rt.load_file(&dir.path().join("missing.wasm")).await,
        Err(LoadError::Read { .. })
    ));
}

#[tokio::test]
async fn precompiled_cache_is_used_and_keyed_by_engine() {
    let dir = tempfile::tempdir().unwrap();
    let path = plugin("image-pinner");
    let first = runtime(Some(dir.path())).load_file(&path).await.unwrap();
    assert_eq!(first.cache_outcome(), CacheOutcome::Miss);
    let second = runtime(Some(dir.path())).load_file(&path).await.unwrap();
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);
    assert_eq!(first.digest(), second.digest());
    // An engine with other settings must not load the first engine's artifact.
    let wasm = std::fs::read(&path).unwrap();
    let engine = |fuel: bool| {
        let mut c = wasmtime::Config::new();
        c.consume_fuel(fuel);
        wasmtime::Engine::new(&c).unwrap()
    };
    let (plain, fueled) = (engine(false), engine(true));
    let cache_of = |e: &wasmtime::Engine| CompileCache::new(dir.path(), e);
    let outcome = |e: &wasmtime::Engine| {
        cache_of(e)
            .load_or_compile(e, first.digest(), &wasm)
            .unwrap()
            .1
    };
    assert_eq!(outcome(&plain), CacheOutcome::Miss);
    assert_eq!(outcome(&fueled), CacheOutcome::Miss);
    assert_eq!(outcome(&plain), CacheOutcome::Hit);
    assert_eq!(outcome(&fueled), CacheOutcome::Hit);
    let entries = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(entries, 3, "one artifact per engine configuration");
    // A corrupt artifact is replaced, not trusted.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(e.unwrap().path(), b"garbage").unwrap();
    }
    let again = runtime(Some(dir.path())).load_file(&path).await.unwrap();
    assert_eq!(again.cache_outcome(), CacheOutcome::Miss);
}

#[tokio::test]
async fn reference_plugins_describe_themselves() {
    let rt = runtime(None);
    let pinner = rt.load_file(&plugin("image-pinner")).await.unwrap();
    assert_eq!(pinner.metadata().name, "image-pinner");
    assert_eq!(
        pinner.metadata().reconciles.to_string(),
        "apps/v1/Deployment"
    );
    assert!(!pinner.metadata().wants_previous);
    let logger = rt.load_file(&plugin("change-logger")).await.unwrap();
    assert!(logger.metadata().wants_previous);
}
