//! The sandbox against hostile guests: each misbehaviour is contained with a typed error or a
//! denied operation, and a well-behaved plugin keeps working in the same process afterwards.

mod common;

use common::sandbox::{call, ctx, hostile, messages, request, runtime, still_behaves};
use common::{plugin, test_plugin};
use kubeplug::cluster::CacheObjects;
use kubeplug::cluster::{CacheWriter, CachedObject, ObjKey};
use kubeplug::contract::KindRef;
use kubeplug::plugin::{
    CacheOutcome, CallContext, CallError, CompileCache, DROP_REPORT_INTERVAL, Limits, LoadError,
    LogRateConfig, MAX_ERROR_BYTES, MAX_LOG_LINE_BYTES, ObjectSource,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Calls run on the runtime's own threads: a guest spinning until its deadline must yield
/// at every epoch tick, or it would hold the thread (here the only one) for its whole
/// timeout, and with it every watch, write and HTTP answer of the host.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_guest_yields_the_runtime_thread_until_it_times_out() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let spinning = Arc::new(AtomicBool::new(true));
    let turns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let other = tokio::spawn({
        let (spinning, turns) = (spinning.clone(), turns.clone());
        async move {
            while spinning.load(Ordering::SeqCst) {
                turns.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        }
    });
    // Let the other task start before the guest does.
    tokio::task::yield_now().await;
    let before = turns.load(Ordering::SeqCst);
    let report = p
        .reconcile(&request(r#"{"mode": "loop"}"#), &ctx(limits))
        .await;
    let during = turns.load(Ordering::SeqCst) - before;
    spinning.store(false, Ordering::SeqCst);
    other.await.unwrap();
    assert!(
        matches!(report.outcome, Err(CallError::Timeout { .. })),
        "{:?}",
        report.outcome
    );
    // 300 ms of 5 ms ticks: about 60 yields; none at all without them.
    assert!(
        during >= 10,
        "the other task ran {during} times while the guest spun"
    );
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
    // SAFETY: the variable is this test's own, and Rust's reads and writes of the environment
    // take std's lock; nothing in this test binary reads it from C code (getenv) meanwhile.
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
async fn plugins_loaded_from_the_same_bytes_share_their_code() {
    let rt = runtime(None);
    let path = plugin("image-pinner");
    // Loaded at once, as a plugins directory is at start: one compiles, the other shares.
    let (a, b) = tokio::join!(rt.load_file(&path), rt.load_file(&path));
    let mut outcomes = [a.unwrap().cache_outcome(), b.unwrap().cache_outcome()];
    outcomes.sort_by_key(|o| *o == CacheOutcome::Shared);
    assert_eq!(outcomes, [CacheOutcome::Uncached, CacheOutcome::Shared]);
    // Once no plugin holds the code, it is gone: the next load compiles again.
    let again = rt.load_file(&path).await.unwrap();
    assert_eq!(again.cache_outcome(), CacheOutcome::Uncached);
    let other = rt.load_file(&plugin("change-logger")).await.unwrap();
    assert_eq!(other.cache_outcome(), CacheOutcome::Uncached);
    assert_eq!(
        rt.load_file(&path).await.unwrap().cache_outcome(),
        CacheOutcome::Shared
    );
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

// ---- Issue 11: imports past the deadline, unbounded metadata, logs as a weapon ----

// Everything the host logs on this thread while the guard lives, as text (the shared
// writer of `tests/common`).
use common::cluster::Capture as CapturedLog;

impl CapturedLog {
    /// Captures the host's events (any level) emitted on the current thread.
    fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let log = CapturedLog::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("kubeplug=trace"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (log, tracing::subscriber::set_default(subscriber))
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn limits_ms(ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(ms),
        ..Limits::default()
    }
}

#[test]
fn a_plugin_that_outlives_its_runtime_still_times_out() {
    let (tx, rx) = std::sync::mpsc::channel();
    // On its own thread: without the fix the guest spins forever and the call never ends.
    std::thread::spawn(move || {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = tokio.block_on(async {
            let rt = runtime(None);
            let p = hostile(&rt).await;
            drop(rt);
            p.reconcile(&request(r#"{"mode": "loop"}"#), &ctx(limits_ms(200)))
                .await
                .outcome
        });
        let _ = tx.send(outcome);
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a CPU-bound call on a plugin whose runtime was dropped never ended");
    assert!(
        matches!(outcome, Err(CallError::Timeout { .. })),
        "{outcome:?}"
    );
}

fn deployment(i: usize, rv: u64) -> CachedObject {
    let name = format!("d{i}");
    CachedObject {
        key: ObjKey::new(Some("default"), &name),
        json: format!(r#"{{"metadata":{{"name":"{name}","namespace":"default"}}}}"#).into(),
        resource_version: rv.to_string(),
        labels: [("app".to_string(), "web".to_string())].into(),
        controller: None,
        manager: None,
    }
}

#[tokio::test]
async fn a_huge_selector_is_refused_at_once_and_never_holds_up_the_cache() {
    let mut writer = CacheWriter::new(KindRef::deployment());
    for i in 0..100 {
        writer.upsert(deployment(i, 1));
    }
    let cache = writer.reader();
    // The watch's side: keeps writing, and records its slowest write.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut rv = 2;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                writer.upsert(deployment(rv as usize % 100, rv));
                slowest = slowest.max(started.elapsed());
                rv += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            slowest
        })
    };
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let objects = Arc::new(CacheObjects::new([cache.clone()]));
    let limits = limits_ms(1000);
    let started = Instant::now();
    let report = p
        .reconcile(
            &request(
                r#"{"mode": "huge-selector", "count": 1000000, "apiVersion": "apps/v1", "kind": "Deployment"}"#,
            ),
            &CallContext::new(limits, objects.clone()),
        )
        .await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let slowest_write = writer.join().unwrap();
    match report.outcome {
        Err(CallError::Permanent(m)) => {
            assert!(
                m.starts_with("list refused: ")
                    && m.contains(
                        "label selector of 8888889 bytes is longer than the limit of 4096"
                    ),
                "{m}"
            );
            assert!(m.len() < 1024, "{} bytes", m.len());
        }
        other => panic!("expected the list to be refused, got {other:?}"),
    }
    eprintln!("huge selector: call {took:?}, slowest cache write {slowest_write:?}");
    assert!(took < limits.timeout * 10, "the call took {took:?}");
    assert!(
        slowest_write < Duration::from_secs(1),
        "a cache write waited {slowest_write:?}"
    );
    // A selector inside the bounds still works.
    let report = p
        .reconcile(
            &request(
                r#"{"mode": "huge-selector", "count": 64, "apiVersion": "apps/v1", "kind": "Deployment"}"#,
            ),
            &CallContext::new(limits, objects),
        )
        .await;
    assert_eq!(messages(&report), ["listed 100"]);
}

/// Objects that take far longer to read than a call may last.
struct SlowObjects;

impl ObjectSource for SlowObjects {
    fn get(&self, _: &KindRef, _: Option<&str>, _: &str) -> Result<Option<Arc<str>>, String> {
        std::thread::sleep(Duration::from_secs(3));
        Ok(None)
    }

    fn list(&self, _: &KindRef, _: Option<&str>, _: Option<&str>) -> Result<Vec<Arc<str>>, String> {
        std::thread::sleep(Duration::from_secs(3));
        Ok(vec![])
    }
}

#[tokio::test]
async fn a_slow_host_read_cannot_hold_the_call_past_its_deadline() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let limits = limits_ms(200);
    let started = Instant::now();
    let report = p
        .reconcile(
            &request(r#"{"mode": "host-list", "apiVersion": "v1", "kind": "Pod"}"#),
            &CallContext::new(limits, Arc::new(SlowObjects)),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(
        report.outcome.unwrap_err(),
        CallError::Timeout {
            limit: limits.timeout
        }
    );
    assert!(took < Duration::from_millis(2000), "the call took {took:?}");
    still_behaves(&p).await;
}

#[tokio::test]
async fn log_floods_are_bounded_per_call_and_across_calls() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let (log, _guard) = CapturedLog::start();
    let flood = r#"{"mode": "flood-log", "count": 200, "bytes": 1048576}"#;
    let report = call(&p, flood).await;
    assert!(report.outcome.is_ok(), "{:?}", report.outcome);
    // 200 MiB offered; one call keeps at most its 64 KiB room, 4 KiB a line.
    let one_call = log.len();
    assert!(one_call < 128 << 10, "one call wrote {one_call} bytes");
    assert_eq!(report.dropped_logs, 200 - 16);
    assert!(
        report
            .logs
            .iter()
            .all(|l| l.message.len() <= MAX_LOG_LINE_BYTES)
    );
    assert!(
        report
            .logs
            .last()
            .unwrap()
            .message
            .starts_with("(184 log lines dropped"),
        "{:?}",
        report.logs.last()
    );
    let reported = || log.text().matches("plugin log lines dropped").count();
    assert_eq!(reported(), 1);
    // Across calls, the plugin's log rate holds: burst plus rate over the elapsed time.
    let started = Instant::now();
    for _ in 0..10 {
        call(&p, flood).await;
    }
    let rate = LogRateConfig::default();
    let allowed = rate.burst_bytes as f64
        + rate.bytes_per_second as f64 * started.elapsed().as_secs_f64()
        + (64 << 10) as f64;
    let total = log.len() as f64;
    assert!(
        total < allowed * 1.25,
        "11 calls wrote {total} bytes, the rate allows about {allowed}"
    );
    assert!(p.dropped_logs() >= 10 * 184);
    // Every call drops lines, but the host warns about them once an interval, not per call.
    let intervals = started.elapsed().as_secs_f64() / DROP_REPORT_INTERVAL.as_secs_f64();
    assert!(
        reported() <= 2 + intervals as usize,
        "{} warnings about drops for 11 calls in {:?}",
        reported(),
        started.elapsed()
    );
}

#[tokio::test]
async fn plugin_text_cannot_forge_host_log_lines_or_drive_a_terminal() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let (log, _guard) = CapturedLog::start();
    let report = call(&p, r#"{"mode": "forge-log"}"#).await;
    assert!(report.outcome.is_ok(), "{:?}", report.outcome);
    let text = log.text();
    assert!(!text.is_empty());
    for line in text.lines() {
        assert!(
            !line.starts_with("2026-11-23T00:00:00"),
            "forged line: {line}"
        );
        assert!(
            !line.contains(['\u{1b}', '\r', '\u{9b}']),
            "raw control characters: {line:?}"
        );
    }
    // The import's message is one escaped line; stdout and stderr are split into lines,
    // each one a plugin event of its own, never a bare host line.
    assert_eq!(
        text.matches("innocent\\n2026-11-23T00:00:00.000000Z ERROR kubeplug::controller: FORGED")
            .count(),
        1,
        "{text}"
    );
    for line in text.lines().filter(|l| l.contains("FORGED")) {
        assert!(
            line.contains(" kubeplug::plugin: ") && line.ends_with("key=\"default/web\""),
            "{line}"
        );
    }
}

#[tokio::test]
async fn a_huge_plugin_error_is_capped_where_it_enters_the_host() {
    let rt = runtime(None);
    let p = hostile(&rt).await;
    let report = call(&p, r#"{"mode": "huge-error", "bytes": 41943040}"#).await;
    match report.outcome {
        Err(err @ CallError::Transient(_)) => {
            let CallError::Transient(m) = &err else {
                unreachable!()
            };
            assert!(m.len() <= MAX_ERROR_BYTES, "kept {} bytes", m.len());
            assert!(m.ends_with("…(truncated)"));
            assert!(err.to_string().len() < 2048, "{}", err.to_string().len());
        }
        other => panic!("expected a transient error, got {other:?}"),
    }
    still_behaves(&p).await;
}

/// The hostile-meta plugin with its metadata variant rewritten.
fn hostile_meta(variant: &str) -> Vec<u8> {
    const MARKER: &[u8] = b"KUBEPLUG-META-VARIANT:";
    let mut wasm = std::fs::read(test_plugin("hostile-meta")).unwrap();
    let at = wasm
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .expect("variant marker in hostile-meta.wasm")
        + MARKER.len();
    let field = &mut wasm[at..at + 26];
    field.fill(b' ');
    field[..variant.len()].copy_from_slice(variant.as_bytes());
    wasm
}

#[tokio::test]
async fn hostile_metadata_is_refused_with_short_escaped_errors() {
    let rt = runtime(None);
    let ok = rt
        .load_bytes("behave.wasm", hostile_meta("behave"))
        .await
        .unwrap();
    assert_eq!(ok.metadata().name, "hostile-meta");
    for (variant, expected) in [
        ("huge-name", "(10485760 bytes) must be a DNS label"),
        ("huge-version", "(41943040 bytes) must be 1-128 bytes"),
        (
            "many-owns",
            "declares 100000 owned kinds, more than the limit of 16",
        ),
        ("forged-kind", "reconciled kind: kind "),
    ] {
        match rt
            .load_bytes(&format!("{variant}.wasm"), hostile_meta(variant))
            .await
        {
            Err(err @ LoadError::InvalidMetadata { .. }) => {
                let text = err.to_string();
                assert!(text.contains(expected), "{variant}: {text}");
                assert!(text.len() < 1024, "{variant}: {} bytes", text.len());
                assert!(!text.contains(['\n', '\u{1b}']), "{variant}: {text:?}");
            }
            other => panic!("{variant}: expected invalid metadata, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_log_flood_at_load_is_bounded() {
    let rt = runtime(None);
    let (log, _guard) = CapturedLog::start();
    let p = rt
        .load_bytes("flood.wasm", hostile_meta("flood-log"))
        .await
        .unwrap();
    assert!(log.len() < 128 << 10, "loading wrote {} bytes", log.len());
    assert_eq!(p.dropped_logs(), 300 - 16);
}
