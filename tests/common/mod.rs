//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

pub mod cluster;
pub mod host_process;
pub mod sandbox;

use std::path::{Path, PathBuf};

fn dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(default)
    })
}

fn find(dir: PathBuf, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the plugins first with `make plugins` (or run `make test`)",
        path.display()
    );
    path
}

/// A reference plugin from `plugins/`, built by `make plugins`.
pub fn plugin(name: &str) -> PathBuf {
    find(dir("KUBEPLUG_PLUGIN_DIR", "plugins"), name)
}

/// A test plugin from `tests/plugins/`, built by `make plugins`.
pub fn test_plugin(name: &str) -> PathBuf {
    find(dir("KUBEPLUG_TEST_PLUGIN_DIR", "test-plugins"), name)
}

/// A fixture file from `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Runs the ignored test `name` (its path in this test binary, `module::test`) alone, in a
/// new process of this same binary, and fails with that run's output unless it ran and
/// passed. For tests that measure their process (its resident set), which the other tests
/// running beside them in one process would move; they stay in the one binary (linked once)
/// and still get a process of their own.
pub fn run_alone(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, run alone:\n{stdout}\n{stderr}"
    );
    print!("{stdout}");
}

/// One HTTP/1.1 request over a fresh connection to `addr`: status and body. `Host` is `addr`
/// (what the status server's Host allow-list accepts) unless `headers` name one.
pub fn http(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// A `kubeplug chaos` run of `schedules` schedules of `seed` with the Rust seed plugins: the
/// hosts are this build's `kubeplug` binary, plugins from `make plugins`, compiled modules
/// kept in the tests' compile cache.
pub fn chaos_config(seed: u64, schedules: u64) -> kubeplug::chaos::ChaosConfig {
    kubeplug::chaos::ChaosConfig {
        seed,
        schedules,
        plugins: plugin("image-pinner").parent().unwrap().to_path_buf(),
        compile_cache: Some(compile_cache()),
        settle: std::time::Duration::from_secs(20),
        plugin_sets: kubeplug::chaos::PluginChoice::Rust,
        binary: env!("CARGO_BIN_EXE_kubeplug").into(),
        ..kubeplug::chaos::ChaosConfig::default()
    }
}

/// Whether `program probe…` runs and succeeds; when not, says the test skips and how to
/// install it (`install`), and fails under CI=true, where a missing dependency is an error.
pub fn tool(program: &str, probe: &[&str], install: &str) -> bool {
    let found = std::process::Command::new(program)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no {program} on PATH and CI=true: {install}"
        );
        eprintln!("skipped: no {program} on PATH ({install})");
    }
    found
}

/// Whether kubectl is on PATH (see [`tool`]).
pub fn has_kubectl() -> bool {
    tool("kubectl", &["version", "--client"], "install kubectl 1.32")
}

/// A free port on 127.0.0.1, as `127.0.0.1:PORT`, for a server a test starts.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `kubectl --kubeconfig KUBECONFIG ARGS`, its stdout; fails the test when it fails.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The compile cache the tests share (target/test-compile-cache): a module is compiled once
/// per build of the host, not once per test (a Python or TypeScript component takes tens of
/// seconds). Tests of the cache itself use their own.
pub fn compile_cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-compile-cache")
}
