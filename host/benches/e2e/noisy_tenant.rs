//! The tenants phase's noisy neighbour: one namespace misbehaving in every way issue 38
//! names, all at once, while the quiet tenants are measured beside it:
//! (a) its Deployments' images changed at [`FLOOD_FACTOR`] times the quiet tenants' whole
//!     rate, so its pinner has a change to answer every few milliseconds;
//! (b) a second Plugin (the hostile test guest, `{mode: loop}`) on the same Deployments,
//!     spending its whole call budget (the host's 1 s) on every call;
//! (c) its pinner writing as much as its PluginPolicy allows ([`WRITES_PER_SECOND`], less
//!     than the flood asks for);
//! (d) a third Plugin whose module ConfigMap is replaced every [`CHURN_EVERY`] by a module
//!     of another digest: a new revision, compiled again.
//!
//! `KUBEPLUG_E2E_NOISY` picks some of them (`flood`, `loop`, `churn`, comma-separated; the
//! default is all three; (c) comes with the flood), to see which one costs the quiet tenants.

use crate::harness::{self, Unpinner};
use crate::tenant_fixtures::{self as fx, PINNED_FIELDS};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The noisy tenant's namespace.
pub const NAMESPACE: &str = "noisy";
/// Its Deployments, changed round-robin by the flood.
const DEPLOYMENTS: usize = 50;
/// Its flood, against the quiet tenants' whole paced rate.
pub const FLOOD_FACTOR: usize = 10;
/// What its policy lets its Plugins write, per second and in a burst: less than the flood.
pub const WRITES_PER_SECOND: usize = 100;
/// How often its churning Plugin gets a new module.
pub const CHURN_EVERY: Duration = Duration::from_secs(2);
/// The image its pinners pin to (both the same, so they never undo each other's writes).
const IMAGE: &str = "nginx:noisy";

/// Which parts of its misbehaviour the noisy tenant shows (`KUBEPLUG_E2E_NOISY`).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    /// (a) and (c): the flood of changes, and its pinner writing at its policy's cap.
    pub flood: bool,
    /// (b): the looper spending its whole call budget.
    pub looper: bool,
    /// (d): the module churn.
    pub churn: bool,
}

impl Parts {
    /// From `KUBEPLUG_E2E_NOISY` (`flood,loop,churn` when unset).
    pub fn from_env() -> Parts {
        let parts =
            std::env::var("KUBEPLUG_E2E_NOISY").unwrap_or_else(|_| "flood,loop,churn".to_string());
        let has = |p: &str| parts.split(',').any(|x| x.trim() == p);
        Parts {
            flood: has("flood"),
            looper: has("loop"),
            churn: has("churn"),
        }
    }

    /// The Plugins the noisy tenant runs: its pinner, and the looper and churner if shown.
    pub fn plugins(&self) -> usize {
        1 + usize::from(self.looper) + usize::from(self.churn)
    }
}

/// Creates the noisy tenant on the sim: its policy, modules, Plugins and Deployments.
pub fn install(port: u16, parts: Parts) {
    let ns = NAMESPACE;
    let limits = json!({"writesPerSecond": WRITES_PER_SECOND, "writeBurst": WRITES_PER_SECOND});
    post(
        port,
        "/apis/kubeplug.dev/v1alpha1/pluginpolicies",
        fx::policy("noisy", &[ns.to_string()], Some(limits)),
    );
    let pinner = fx::module("image-pinner");
    post_in(port, "configmaps", fx::config_map(ns, "pinner", &pinner));
    post_in(
        port,
        "configmaps",
        fx::config_map(ns, "looper", &fx::module("hostile")),
    );
    post_in(port, "configmaps", fx::config_map(ns, "churn", &churned(0)));
    let config = json!({"image": IMAGE});
    for (shown, name, module, config, fields) in [
        (true, "pinner", "pinner", config.clone(), &PINNED_FIELDS[..]),
        (parts.churn, "churn", "churn", config, &PINNED_FIELDS[..]),
        (
            parts.looper,
            "looper",
            "looper",
            json!({"mode": "loop"}),
            &PINNED_FIELDS[1..],
        ),
    ] {
        if !shown {
            continue;
        }
        post_in(
            port,
            "plugins",
            fx::plugin(ns, name, module, config, fields),
        );
    }
    for i in 0..DEPLOYMENTS {
        post_in(port, "deployments", fx::deployment(ns, &name(i)));
    }
}

/// The noisy tenant's Deployment `i`.
fn name(i: usize) -> String {
    format!("n-{i:03}")
}

/// Whether a Deployment is the noisy tenant's.
pub fn is_noisy(name: &str) -> bool {
    name.starts_with("n-")
}

/// The churning Plugin's module number `n`: image-pinner under a digest of its own.
fn churned(n: usize) -> Vec<u8> {
    fx::with_custom_section(&fx::module("image-pinner"), format!("churn {n}").as_bytes())
}

/// POSTs `object` to the core or kubeplug API path of its kind in the noisy namespace.
fn post_in(port: u16, resource: &str, object: serde_json::Value) {
    let group = match resource {
        "configmaps" => "/api/v1",
        "deployments" => "/apis/apps/v1",
        _ => "/apis/kubeplug.dev/v1alpha1",
    };
    post(
        port,
        &format!("{group}/namespaces/{NAMESPACE}/{resource}"),
        object,
    );
}

fn post(port: u16, path: &str, object: serde_json::Value) {
    let status = harness::http_send(port, "POST", path, "application/json", &object.to_string());
    assert_eq!(status, Some(201), "POST {path}");
}

/// The noisy tenant's load, running on threads of its own until [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    flood_sent: Arc<AtomicUsize>,
    churned: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
}

/// What the noisy tenant did while the quiet tenants were measured beside it.
pub struct Done {
    pub flood_rate: f64,
    pub modules: usize,
}

impl Load {
    /// Starts the flood at `rate` changes per second (two writers) and the module churn,
    /// those of them `parts` shows.
    pub fn start(port: u16, rate: usize, parts: Parts) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flood_sent = Arc::new(AtomicUsize::new(0));
        let churned = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let mut threads = Vec::new();
        const WRITERS: usize = 2;
        for w in (0..WRITERS).filter(|_| parts.flood) {
            let (stop, sent) = (stop.clone(), flood_sent.clone());
            threads.push(std::thread::spawn(move || {
                flood(port, rate, (w, WRITERS), start, &stop, &sent)
            }));
        }
        if parts.churn {
            let (stop_churn, count) = (stop.clone(), churned.clone());
            threads.push(std::thread::spawn(move || churn(port, &stop_churn, &count)));
        }
        Load {
            stop,
            flood_sent,
            churned,
            threads,
            start,
        }
    }

    /// Stops the load; what it did.
    pub fn stop(self) -> Done {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.start.elapsed().as_secs_f64();
        for t in self.threads {
            t.join().expect("a noisy thread panicked");
        }
        Done {
            flood_rate: self.flood_sent.load(Ordering::Relaxed) as f64 / elapsed,
            modules: self.churned.load(Ordering::Relaxed),
        }
    }
}

/// Writer `w` of `writers`: unpins the noisy Deployments round-robin, its share of `rate`
/// changes per second paced from `start`, until `stop`.
fn flood(
    port: u16,
    rate: usize,
    (w, writers): (usize, usize),
    start: Instant,
    stop: &AtomicBool,
    sent: &AtomicUsize,
) {
    let mut unpinner = Unpinner::new(port);
    let period = Duration::from_secs(1) / rate.max(1) as u32;
    let mut i = w;
    while !stop.load(Ordering::Relaxed) {
        let due = start + period * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if unpinner.unpin_in(NAMESPACE, &name(i % DEPLOYMENTS)) {
            sent.fetch_add(1, Ordering::Relaxed);
        }
        i += writers;
    }
}

/// Replaces the churning Plugin's module every [`CHURN_EVERY`] until `stop`.
fn churn(port: u16, stop: &AtomicBool, count: &AtomicUsize) {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps/churn");
    let mut next = Instant::now();
    let mut n = 1;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next {
            let body = json!({"binaryData": {"plugin.wasm": k8s_openapi::ByteString(churned(n))}});
            let status = harness::http_send(
                port,
                "PATCH",
                &path,
                "application/merge-patch+json",
                &body.to_string(),
            );
            if status == Some(200) {
                count.fetch_add(1, Ordering::Relaxed);
            }
            n += 1;
            next += CHURN_EVERY;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
