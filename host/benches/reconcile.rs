//! One image-pinner reconcile of a realistic ~6 KB Deployment: compiled natively, through the
//! runtime with a fresh sandbox per call (what the controller does), and in a warm sandbox;
//! plus instantiation alone, the per-call cost the cache avoids by serialising once, and a
//! load of the plugin's bytes while its compiled code is shared (hash, link, metadata call):
//! what waking an unloaded idle Plugin would cost at least, on top of its call.
//!
//! Samples of the three variants are interleaved, so the machine's speed changes hit all of
//! them alike; the ratios to native are what to compare between machines.
//! Run with `make bench` (or `cargo bench -p kubeplug --bench reconcile` after `make plugins`).
//! `RECONCILE_BENCH_ONLY=native|fresh|warm|instantiate` runs one variant for about 20 s
//! instead, for a profiler (`perf record -g`).

use kubeplug::contract::{ObjectRef, Reason, ReconcileRequest};
use kubeplug::plugin::{CallContext, Limits, NoObjects, PluginRuntime, RuntimeConfig};
use kubeplug_sdk::Reconciler;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SAMPLES: usize = 41;
const SAMPLE_TIME: Duration = Duration::from_millis(60);

fn plugin_path() -> PathBuf {
    let dir = std::env::var_os("KUBEPLUG_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"));
    let path = dir.join("image-pinner.wasm");
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    path
}

/// Runs `f` repeatedly for about `SAMPLE_TIME` and returns the mean time per call.
fn sample(iters: &mut u64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..*iters {
        f();
    }
    let took = start.elapsed();
    let per_call = took.as_secs_f64() / *iters as f64;
    // Aim the next sample at SAMPLE_TIME.
    *iters = ((SAMPLE_TIME.as_secs_f64() / per_call) as u64).clamp(10, 1_000_000);
    per_call
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let object: Arc<str> = {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/deployment-6k.json"),
        )
        .expect("fixture");
        let value: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
        value.to_string().into()
    };
    let target = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some("shop".into()),
        name: "checkout".into(),
    };
    let request = ReconcileRequest {
        target: target.clone(),
        object: Some(object.clone()),
        previous: None,
        reason: Reason::Changed,
        attempt: 1,
        config: None,
    };
    let native_request = || kubeplug_sdk::Request {
        target: kubeplug_sdk::ObjectRef {
            api_version: target.api_version.clone(),
            kind: target.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        },
        object: Some(object.to_string()),
        previous: None,
        reason: kubeplug_sdk::Reason::Changed,
        attempt: 1,
        config: None,
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: None,
        max_sandboxes: 8,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let bytes = std::fs::read(plugin_path()).expect("the plugin's bytes");
    let plugin = rt
        .block_on(runtime.load_bytes("image-pinner", bytes.clone()))
        .unwrap();
    let ctx = CallContext::new(Limits::default(), Arc::new(NoObjects));
    let mut warm = rt.block_on(plugin.warm(&ctx)).unwrap();

    // Same answer from all three, before timing anything.
    let native = image_pinner::ImagePinner::reconcile(native_request()).unwrap();
    let fresh = rt
        .block_on(plugin.reconcile(&request, &ctx))
        .outcome
        .unwrap();
    let reused = rt.block_on(warm.reconcile(&request)).outcome.unwrap();
    assert_eq!(native.len(), 2, "one patch and one log line");
    assert_eq!(fresh.len(), native.len());
    assert_eq!(reused, fresh);

    if let Ok(only) = std::env::var("RECONCILE_BENCH_ONLY") {
        let mut one: Box<dyn FnMut()> = match only.as_str() {
            "native" => Box::new(|| {
                black_box(image_pinner::ImagePinner::reconcile(native_request()).unwrap());
            }),
            "fresh" => Box::new(|| {
                black_box(
                    rt.block_on(plugin.reconcile(&request, &ctx))
                        .outcome
                        .unwrap(),
                );
            }),
            "warm" => Box::new(|| {
                black_box(rt.block_on(warm.reconcile(&request)).outcome.unwrap());
            }),
            "instantiate" => Box::new(|| {
                black_box(rt.block_on(plugin.warm(&ctx)).unwrap());
            }),
            other => panic!("RECONCILE_BENCH_ONLY={other}: native, fresh, warm or instantiate"),
        };
        let (start, mut calls) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(20) {
            one();
            calls += 1;
        }
        println!(
            "{only}: {calls} calls, {:.1} µs per call",
            start.elapsed().as_secs_f64() * 1e6 / calls as f64
        );
        return;
    }

    // What the cache saves: objects are serialised once per watch event, not once per call.
    let value: serde_json::Value = serde_json::from_str(&object).unwrap();
    let (mut n_iters, mut f_iters, mut w_iters, mut i_iters, mut s_iters, mut l_iters) =
        (100, 100, 100, 100, 100, 10);
    let (mut n, mut f, mut w, mut i, mut ser, mut l) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for _ in 0..SAMPLES {
        // `plugin` stays loaded, so each load finds the compiled code on the shelf.
        l.push(sample(&mut l_iters, || {
            black_box(
                rt.block_on(runtime.load_bytes("image-pinner", bytes.clone()))
                    .unwrap(),
            );
        }));
        ser.push(sample(&mut s_iters, || {
            black_box(serde_json::to_string(black_box(&value)).unwrap());
        }));
        i.push(sample(&mut i_iters, || {
            black_box(rt.block_on(plugin.warm(&ctx)).unwrap());
        }));
        n.push(sample(&mut n_iters, || {
            black_box(image_pinner::ImagePinner::reconcile(black_box(native_request())).unwrap());
        }));
        f.push(sample(&mut f_iters, || {
            black_box(
                rt.block_on(plugin.reconcile(black_box(&request), &ctx))
                    .outcome
                    .unwrap(),
            );
        }));
        w.push(sample(&mut w_iters, || {
            black_box(
                rt.block_on(warm.reconcile(black_box(&request)))
                    .outcome
                    .unwrap(),
            );
        }));
    }
    let (n, f, w, i, ser, l) = (
        median(n),
        median(f),
        median(w),
        median(i),
        median(ser),
        median(l),
    );
    println!(
        "image-pinner reconcile, {} byte Deployment, median of {SAMPLES} interleaved samples",
        object.len()
    );
    println!("{:<28} {:>10} {:>8}", "variant", "µs/call", "× native");
    for (name, t) in [
        ("native (same Rust code)", n),
        ("wasm, fresh sandbox", f),
        ("wasm, warm sandbox", w),
        ("instantiation alone", i),
        ("re-serialising the object", ser),
        ("load, compiled code shared", l),
    ] {
        println!("{name:<28} {:>10.1} {:>8.2}", t * 1e6, t / n);
    }
}
