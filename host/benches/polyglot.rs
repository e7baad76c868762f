//! Plugins in Python and TypeScript against the Rust plugin and native code: the same
//! image-pinner reconcile of a ~6 KB Deployment, by the Rust component, the TypeScript one
//! (componentize-js: StarlingMonkey, pre-initialised) and the Python one (componentize-py:
//! CPython, pre-initialised).
//!
//! Per plugin: first load (compile, in a child process of its own), cached load (from the
//! compile cache, in another), the resident memory a loaded plugin adds (in that child: after
//! the load, one fresh call and one warm sandbox), then in this process, interleaved: a call in
//! a fresh sandbox (what the controller does), a call in a warm sandbox, and instantiation
//! alone. Run with `make bench` (or `cargo bench -p kubeplug --bench polyglot` after
//! `make plugins`).

use kubeplug::contract::{ObjectRef, Reason, ReconcileRequest};
use kubeplug::plugin::{CallContext, Limits, NoObjects, PluginRuntime, RuntimeConfig};
use kubeplug_sdk::Reconciler;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 15;
const SAMPLE_TIME: Duration = Duration::from_millis(100);
const PLUGINS: [&str; 3] = ["image-pinner", "image-pinner-js", "image-pinner-py"];
/// Set in the child processes: `<plugin path>\t<cache dir>`.
const CHILD_ENV: &str = "KUBEPLUG_POLYGLOT_BENCH_CHILD";

fn plugin_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("KUBEPLUG_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    path
}

fn request() -> ReconcileRequest {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/deployment-6k.json"),
    )
    .expect("fixture");
    let value: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    ReconcileRequest {
        target: ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "checkout".into(),
        },
        object: Some(value.to_string().into()),
        previous: None,
        reason: Reason::Changed,
        attempt: 1,
        config: None,
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn runtime(cache: &Path) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        // Runtime components instantiate several core modules each: the pool's core-instance
        // slots (4 per component instance) ran out at 8.
        max_sandboxes: 32,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// In a child: load one plugin (compiling or from the cache), call it once in a fresh
/// sandbox, keep a warm one; print `load-seconds rss-added-bytes`.
fn child(spec: &str) {
    let (path, cache) = spec.split_once('\t').unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = runtime(Path::new(cache));
    let ctx = CallContext::new(Limits::default(), Arc::new(NoObjects));
    let before = rss_bytes();
    let started = Instant::now();
    let plugin = rt.block_on(runtime.load_file(Path::new(path))).unwrap();
    let load = started.elapsed().as_secs_f64();
    rt.block_on(plugin.reconcile(&request(), &ctx))
        .outcome
        .unwrap();
    let warm = rt.block_on(plugin.warm(&ctx)).unwrap();
    let added = rss_bytes().saturating_sub(before);
    black_box(warm);
    println!("{load} {added}");
}

fn run_child(path: &Path, cache: &Path) -> (f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(
            CHILD_ENV,
            format!("{}\t{}", path.display(), cache.display()),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut parts = text.split_whitespace();
    (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    )
}

/// Runs `f` repeatedly for about `SAMPLE_TIME` and returns the mean time per call.
fn sample(iters: &mut u64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..*iters {
        f();
    }
    let per_call = start.elapsed().as_secs_f64() / *iters as f64;
    *iters = ((SAMPLE_TIME.as_secs_f64() / per_call) as u64).clamp(3, 1_000_000);
    per_call
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let caches = tempfile::tempdir().unwrap();
    let request = request();
    let native_request = || kubeplug_sdk::Request {
        target: kubeplug_sdk::ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "checkout".into(),
        },
        object: request.object.as_deref().map(str::to_string),
        previous: None,
        reason: kubeplug_sdk::Reason::Changed,
        attempt: 1,
        config: None,
    };

    // Loads and memory, each in a process of its own.
    let mut loads = Vec::new();
    for name in PLUGINS {
        let path = plugin_path(name);
        let cache = caches.path().join(name);
        let size = std::fs::metadata(&path).unwrap().len();
        let (compile, _) = run_child(&path, &cache);
        let (cached, rss) = run_child(&path, &cache);
        loads.push((name, size, compile, cached, rss));
    }

    // Calls, interleaved across plugins.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = runtime(&caches.path().join("calls"));
    let ctx = CallContext::new(Limits::default(), Arc::new(NoObjects));
    let plugins: Vec<_> = PLUGINS
        .iter()
        .map(|n| rt.block_on(runtime.load_file(&plugin_path(n))).unwrap())
        .collect();
    let mut warms: Vec<_> = plugins
        .iter()
        .map(|p| rt.block_on(p.warm(&ctx)).unwrap())
        .collect();
    // The same answer from every variant before timing anything.
    let native = image_pinner::ImagePinner::reconcile(native_request()).unwrap();
    assert_eq!(native.len(), 2, "one patch and one log line");
    for (p, w) in plugins.iter().zip(warms.iter_mut()) {
        let fresh = rt.block_on(p.reconcile(&request, &ctx)).outcome.unwrap();
        assert_eq!(
            fresh.len(),
            2,
            "{}: one patch and one log line",
            p.declared_name()
        );
        assert_eq!(rt.block_on(w.reconcile(&request)).outcome.unwrap(), fresh);
    }
    let mut iters = vec![[10u64; 3]; PLUGINS.len()];
    let mut warm_resets = vec![0u64; PLUGINS.len()];
    let mut times = vec![[const { Vec::new() }; 3]; PLUGINS.len()];
    let (mut n_iters, mut n_times) = (100, Vec::new());
    for _ in 0..SAMPLES {
        n_times.push(sample(&mut n_iters, || {
            black_box(image_pinner::ImagePinner::reconcile(black_box(native_request())).unwrap());
        }));
        for (i, p) in plugins.iter().enumerate() {
            times[i][0].push(sample(&mut iters[i][0], || {
                black_box(
                    rt.block_on(p.reconcile(black_box(&request), &ctx))
                        .outcome
                        .unwrap(),
                );
            }));
            let w = &mut warms[i];
            let resets = &mut warm_resets[i];
            times[i][1].push(sample(&mut iters[i][1], || {
                // A reused sandbox keeps what the guest's runtime allocated: once it hits
                // the memory limit it is replaced, as a worker would reset it after a trap.
                match rt.block_on(w.reconcile(black_box(&request))).outcome {
                    Ok(actions) => {
                        black_box(actions);
                    }
                    Err(_) => {
                        *w = rt.block_on(p.warm(&ctx)).unwrap();
                        *resets += 1;
                    }
                }
            }));
            times[i][2].push(sample(&mut iters[i][2], || {
                black_box(rt.block_on(p.warm(&ctx)).unwrap());
            }));
        }
    }
    let native = median(n_times);
    println!(
        "image-pinner in Rust, TypeScript and Python: loads in processes of their own, calls \
         (median of {SAMPLES} interleaved samples) on a {} byte Deployment",
        request.object.as_deref().map_or(0, str::len)
    );
    println!(
        "{:<16} {:>9} {:>11} {:>10} {:>9} {:>12} {:>9} {:>11} {:>9}",
        "plugin",
        "size MB",
        "compile ms",
        "cached ms",
        "RSS MB",
        "fresh µs",
        "× native",
        "warm µs",
        "inst. µs"
    );
    println!(
        "{:<16} {:>9} {:>11} {:>10} {:>9} {:>12.1} {:>9.2} {:>11.1} {:>9}",
        "native",
        "-",
        "-",
        "-",
        "-",
        native * 1e6,
        1.0,
        native * 1e6,
        "-"
    );
    for (i, (name, size, compile, cached, rss)) in loads.into_iter().enumerate() {
        let [fresh, warm, inst] = times[i].clone().map(median);
        println!(
            "{:<16} {:>9.1} {:>11.0} {:>10.1} {:>9.1} {:>12.1} {:>9.0} {:>11.1} {:>9.1}",
            name,
            size as f64 / 1e6,
            compile * 1e3,
            cached * 1e3,
            rss as f64 / (1 << 20) as f64,
            fresh * 1e6,
            fresh / native,
            warm * 1e6,
            inst * 1e6
        );
    }
    for (name, resets) in PLUGINS.iter().zip(&warm_resets) {
        let calls: u64 = iters.iter().map(|i| i[1]).sum::<u64>() / PLUGINS.len() as u64;
        println!(
            "{name}: warm sandbox replaced {resets} times at its memory limit (about {calls} warm calls per sample)"
        );
    }
}
