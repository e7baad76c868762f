//! Plugins from an OCI registry (issue 26, item 7): pull + verify + compile of the Rust,
//! TypeScript and Python image-pinners, cold (empty module cache, empty compile cache) and
//! cached (both warm: what a restart does), and what the registry sends on that second start.
//!
//! The bench starts its own Debian `docker-registry` on 127.0.0.1 (as the tests'
//! fixture does; without the package it says so and exits 0), pushes each module, signs it
//! with a generated key, and starts each plugin as a Plugin object with a verification config
//! does: the tag resolved, its signatures verified (which proves the credentials may read the
//! repository), `transfer::pull_with` of that digest (the module cache answers a pinned one),
//! then `PluginRuntime::load_bytes` with a compile cache. Each start gets a new registry
//! client and a new runtime (no compiled code shared in process). Starts are interleaved
//! across languages; median and min of `KUBEPLUG_OCI_BENCH_RUNS` (default 5) each.
//!
//! Bytes on the second start are counted by a small TCP proxy in front of the registry: per
//! request (HTTP/1.1, no pipelining, so a response's bytes follow its request), the bytes the
//! registry sent. `cargo bench -p kubeplug --bench oci` after `make plugins`.

use kubeplug::oci::keys::SigningKey;
use kubeplug::oci::verification::{self, VerificationConfig};
use kubeplug::oci::{OciRef, Registries, RegistryArgs, signature, transfer};
use kubeplug::plugin::{CacheOutcome, PluginRuntime, RuntimeConfig};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PLUGINS: [(&str, &str); 3] = [
    ("rust", "image-pinner"),
    ("ts", "image-pinner-js"),
    ("py", "image-pinner-py"),
];

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

/// A `docker-registry serve` on 127.0.0.1 with a temporary folder, stopped when dropped.
struct Registry {
    child: Child,
    addr: String,
    _root: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts one, or `None` when `docker-registry` is not installed.
    fn start() -> Option<Registry> {
        if Command::new("docker-registry")
            .arg("--version")
            .output()
            .is_err()
        {
            return None;
        }
        for _ in 0..5 {
            let root = tempfile::tempdir().unwrap();
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr = format!("127.0.0.1:{port}");
            let config = root.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\nhttp: {{addr: \"{addr}\"}}\n",
                    root.path().join("data").display()
                ),
            )
            .unwrap();
            let mut child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut up = false;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile
                }
                if answers_v2(&addr) {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if up {
                return Some(Registry {
                    child,
                    addr,
                    _root: root,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("docker-registry did not start");
    }
}

/// Whether `GET /v2/` at `addr` answers 200.
fn answers_v2(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && &head[9..12] == b"200"
}

/// One request seen by the proxy and the bytes the registry sent for it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    response_bytes: u64,
}

/// A request as it is recorded: its response's bytes grow while it streams.
struct Recording {
    method: String,
    path: String,
    response_bytes: Arc<AtomicU64>,
}

/// A TCP proxy in front of the registry that records every request (method, path) and the
/// bytes of its response. Only header-only requests (pulls: GET, HEAD) are parsed: pushes go
/// to the registry directly.
struct CountingProxy {
    addr: String,
    seen: Arc<Mutex<Vec<Recording>>>,
}

impl CountingProxy {
    fn start(upstream: String) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let all = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let all = all.clone();
                std::thread::spawn(move || relay(client, server, all));
            }
        });
        CountingProxy { addr, seen }
    }

    /// The requests since the last call, with their responses' bytes so far.
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
            .into_iter()
            .map(|r| Seen {
                method: r.method,
                path: r.path,
                response_bytes: r.response_bytes.load(Ordering::SeqCst),
            })
            .collect()
    }
}

/// Relays one connection both ways, recording each request before it is forwarded and
/// adding each response chunk to the connection's latest request before forwarding it.
fn relay(client: TcpStream, server: TcpStream, all: Arc<Mutex<Vec<Recording>>>) {
    let current: Arc<Mutex<Option<Arc<AtomicU64>>>> = Arc::new(Mutex::new(None));
    let (mut c_read, mut c_write) = (client.try_clone().unwrap(), client);
    let (mut s_read, mut s_write) = (server.try_clone().unwrap(), server);
    let latest = current.clone();
    let up = std::thread::spawn(move || {
        let mut pending = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match c_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = pending.drain(..end + 4).collect();
                let line = String::from_utf8_lossy(&head);
                let mut words = line.split_whitespace();
                let counter = Arc::new(AtomicU64::new(0));
                all.lock().unwrap().push(Recording {
                    method: words.next().unwrap_or("").to_string(),
                    path: words.next().unwrap_or("").to_string(),
                    response_bytes: counter.clone(),
                });
                *latest.lock().unwrap() = Some(counter);
            }
            if s_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = s_write.shutdown(Shutdown::Write);
    });
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match s_read.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(counter) = &*current.lock().unwrap() {
            counter.fetch_add(n as u64, Ordering::SeqCst);
        }
        if c_write.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = c_write.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// Registry flags for `addr` (plain HTTP) with the module cache in `cache`.
fn registries(addr: &str, cache: &Path) -> Registries {
    Registries::new(&RegistryArgs {
        insecure_registry: vec![addr.to_string()],
        module_cache: Some(cache.to_path_buf()),
        max_module_mib: 64,
        ..RegistryArgs::default()
    })
    .unwrap()
}

fn runtime(cache: &Path) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        max_sandboxes: 32,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// One start's times (seconds) and what the caches did.
#[derive(Debug, Clone, Copy)]
struct Start {
    verify: f64,
    pull: f64,
    compile: f64,
    module_cached: bool,
    outcome: CacheOutcome,
}

impl Start {
    fn total(&self) -> f64 {
        self.verify + self.pull + self.compile
    }
}

/// A Plugin object's start: resolve the tag, verify its signatures, pull the digest, compile (or load precompiled). The registry client and the runtime are new (a
/// new process would build them before the first pull) and built outside the timed part.
async fn start(addr: &str, tag: &OciRef, config: &VerificationConfig, caches: &Path) -> Start {
    let reg = registries(addr, &caches.join("oci"));
    let runtime = runtime(&caches.join("compiled"));
    let auth = reg.access();
    let t0 = Instant::now();
    let pinned = verification::resolve(&reg, tag, &auth).await.unwrap();
    verification::verify_with(&reg, &pinned, config, &auth)
        .await
        .unwrap();
    let t1 = Instant::now();
    let pulled = transfer::pull_with(&reg, &pinned, &auth).await.unwrap();
    let t2 = Instant::now();
    let plugin = runtime
        .load_bytes(&pulled.pinned.to_string(), pulled.bytes)
        .await
        .unwrap();
    let t3 = Instant::now();
    Start {
        verify: (t1 - t0).as_secs_f64(),
        pull: (t2 - t1).as_secs_f64(),
        compile: (t3 - t2).as_secs_f64(),
        module_cached: pulled.cached,
        outcome: plugin.cache_outcome(),
    }
}

/// (module, total) bytes and the requests of: a Plugin object's start, `pull_checked` of
/// the pinned reference, a pinned `transfer::pull`.
type Second = (
    (u64, u64),
    Vec<Seen>,
    (u64, u64),
    Vec<Seen>,
    (u64, u64),
    Vec<Seen>,
);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Module bytes (responses to requests for the module's blob) and total response bytes.
fn bytes_of(seen: &[Seen], module_hex: &str) -> (u64, u64) {
    let module = seen
        .iter()
        .filter(|s| s.path.ends_with(&format!("/blobs/sha256:{module_hex}")))
        .map(|s| s.response_bytes)
        .sum();
    (module, seen.iter().map(|s| s.response_bytes).sum())
}

fn describe(seen: &[Seen]) -> String {
    seen.iter()
        .map(|s| {
            let short = s
                .path
                .rsplit_once('/')
                .map(|(kind, last)| {
                    let kind = kind.rsplit('/').next().unwrap_or("");
                    format!("{kind}/{}", &last[..last.len().min(24)])
                })
                .unwrap_or_default();
            format!("{} {short} ({} B)", s.method, s.response_bytes)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let runs: usize = std::env::var("KUBEPLUG_OCI_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(5);
    let Some(registry) = Registry::start() else {
        println!(
            "oci bench skipped: no docker-registry on PATH (apt-get install docker-registry, or `make test-deps`)"
        );
        return;
    };
    let proxy = CountingProxy::start(registry.addr.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let load_before = loadavg();

    // Push and sign each module directly at the registry; every start goes through the proxy.
    let key = SigningKey::generate();
    let config = VerificationConfig::single_key(&key.public(), BTreeMap::new());
    let scratch = tempfile::tempdir().unwrap();
    let direct = registries(&registry.addr, &scratch.path().join("push"));
    let mut images = Vec::new();
    for (lang, name) in PLUGINS {
        let bytes = std::fs::read(plugin_path(name)).unwrap();
        let at_registry =
            OciRef::parse(&format!("oci://{}/bench/{name}:v1", registry.addr)).unwrap();
        let digest = rt
            .block_on(transfer::push(&direct, &at_registry, &bytes))
            .unwrap();
        rt.block_on(signature::sign(
            &direct,
            &at_registry.pinned(&digest),
            &key,
            &BTreeMap::new(),
        ))
        .unwrap();
        let tag = OciRef::parse(&format!("oci://{}/bench/{name}:v1", proxy.addr)).unwrap();
        let module_hex = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        images.push((lang, name, bytes.len(), tag, digest, module_hex));
    }
    proxy.take();

    // Cold and cached starts, interleaved across languages.
    let mut cold = vec![Vec::new(); PLUGINS.len()];
    let mut cached = vec![Vec::new(); PLUGINS.len()];
    let mut last_caches = Vec::new();
    for run in 0..runs {
        for (i, (_, _, _, tag, _, _)) in images.iter().enumerate() {
            let caches = tempfile::tempdir().unwrap();
            cold[i].push(rt.block_on(start(&proxy.addr, tag, &config, caches.path())));
            cached[i].push(rt.block_on(start(&proxy.addr, tag, &config, caches.path())));
            proxy.take();
            if run + 1 == runs {
                last_caches.push(caches);
            }
        }
    }

    // The second start's requests, both caches warm: as a Plugin object (resolve, verify,
    // pull), pull_checked of the pinned reference alone (an unverified Plugin), and a pinned pull.
    let mut second: Vec<Second> = Vec::new();
    for (i, (_, _, _, tag, digest, module_hex)) in images.iter().enumerate() {
        let caches = last_caches[i].path();
        proxy.take();
        rt.block_on(start(&proxy.addr, tag, &config, caches));
        let plugin_object = proxy.take();
        let reg = registries(&proxy.addr, &caches.join("oci"));
        let pinned = tag.pinned(digest);
        let checked = rt
            .block_on(transfer::pull_checked(&reg, &pinned, &reg.access()))
            .unwrap();
        let checked_seen = proxy.take();
        let pulled = rt.block_on(transfer::pull(&reg, &pinned)).unwrap();
        let pinned_seen = proxy.take();
        assert!(checked.cached && pulled.cached, "module cache missed");
        second.push((
            bytes_of(&plugin_object, module_hex),
            plugin_object,
            bytes_of(&checked_seen, module_hex),
            checked_seen,
            bytes_of(&pinned_seen, module_hex),
            pinned_seen,
        ));
    }
    let load_after = loadavg();

    println!(
        "OCI pull + verify + compile, {runs} runs each (interleaved), docker-registry on 127.0.0.1 behind a counting proxy; load average {load_before} before, {load_after} after"
    );
    println!(
        "{:<5} {:>9} {:>26} {:>26} {:>8} {:>20} {:>20}",
        "lang",
        "size MB",
        "cold ms median/min",
        "cached ms median/min",
        "ratio",
        "cold v/p/c ms",
        "cached v/p/c ms"
    );
    let mut cold_ms = Vec::new();
    let mut cached_ms = Vec::new();
    let mut ratios = Vec::new();
    let mut surprises = Vec::new();
    for (i, (lang, name, size, ..)) in images.iter().enumerate() {
        let totals = |v: &[Start]| v.iter().map(Start::total).collect::<Vec<_>>();
        let phase = |v: &[Start], f: fn(&Start) -> f64| median(v.iter().map(f).collect());
        let (c, w) = (totals(&cold[i]), totals(&cached[i]));
        let (cm, wm) = (median(c.clone()), median(w.clone()));
        println!(
            "{:<5} {:>9.1} {:>26} {:>26} {:>8.3} {:>20} {:>20}",
            lang,
            *size as f64 / 1e6,
            format!("{:.1} / {:.1}", cm * 1e3, min(&c) * 1e3),
            format!("{:.1} / {:.1}", wm * 1e3, min(&w) * 1e3),
            wm / cm,
            format!(
                "{:.1}/{:.1}/{:.1}",
                phase(&cold[i], |s| s.verify) * 1e3,
                phase(&cold[i], |s| s.pull) * 1e3,
                phase(&cold[i], |s| s.compile) * 1e3
            ),
            format!(
                "{:.1}/{:.1}/{:.1}",
                phase(&cached[i], |s| s.verify) * 1e3,
                phase(&cached[i], |s| s.pull) * 1e3,
                phase(&cached[i], |s| s.compile) * 1e3
            ),
        );
        cold_ms.push(cm * 1e3);
        cached_ms.push(wm * 1e3);
        ratios.push(wm / cm);
        for s in &cold[i] {
            if s.module_cached || s.outcome != CacheOutcome::Miss {
                surprises.push(format!(
                    "{name} cold: module from cache {}, compile {:?} (expected a download and Miss)",
                    s.module_cached, s.outcome
                ));
            }
        }
        for s in &cached[i] {
            if !s.module_cached || s.outcome != CacheOutcome::Hit {
                surprises.push(format!(
                    "{name} cached: module from cache {}, compile {:?} (expected the cache and Hit)",
                    s.module_cached, s.outcome
                ));
            }
        }
    }
    println!("(v/p/c: resolve + verify signatures / pull / load_bytes, medians)");
    for ((lang, ..), (po, po_seen, ch, ch_seen, pin, pin_seen)) in images.iter().zip(&second) {
        println!(
            "{lang} second start: Plugin object (resolve, verify, pull) {} requests, {} module bytes, {} total bytes [{}]; pull_checked alone {} requests, {} module bytes, {} total bytes [{}]; pinned pull {} requests, {} total bytes",
            po_seen.len(),
            po.0,
            po.1,
            describe(po_seen),
            ch_seen.len(),
            ch.0,
            ch.1,
            describe(ch_seen),
            pin_seen.len(),
            pin.1,
        );
    }
    for s in &surprises {
        println!("NOTE: {s}");
    }
    let sum = |f: fn(&Second) -> u64| second.iter().map(f).sum::<u64>();
    let ms = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "oci: cold pull+verify+compile rust / ts / py {} ms, cached {} ms (cached/cold ratio {}), second start {} module bytes, {} total bytes in {} requests (Plugin objects: resolve, verify, pull; pull_checked alone {} module bytes, {} total bytes in {} requests; pinned pull {} requests), load {}",
        ms(&cold_ms),
        ms(&cached_ms),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(" / "),
        sum(|s| s.0.0),
        sum(|s| s.0.1),
        sum(|s| s.1.len() as u64),
        sum(|s| s.2.0),
        sum(|s| s.2.1),
        sum(|s| s.3.len() as u64),
        sum(|s| s.5.len() as u64),
        load_after
    );
}
