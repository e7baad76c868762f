//! The dashboard in a real browser: headless Chromium loads `/` from a running host (the
//! binary, with change-logger and image-pinner on the embedded API server) after a
//! Deployment was scaled, and the rendered page must show the plugin table and the
//! `Replicas changed: 1 -> 3` line of the live stream, with no content security policy
//! violation on the console (the policy allows scripts, styles and connections from the
//! page's own origin only, which must cover its WebSocket). A screenshot is kept in
//! `target/test-artifacts/dashboard.png`. `make test` installs Chromium; where it is absent
//! (no Debian packages) the test says so and skips, except under `CI=true`, where it fails. Without a browser, the policy itself is
//! checked as the server sends it.

use crate::common;

use common::host_process::HostProcess;
use common::plugin;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(|name| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

fn patch_replicas(api: &str, replicas: u32) {
    let (status, body) = common::http(
        api,
        "PATCH",
        "/apis/apps/v1/namespaces/demo/deployments/web",
        &["Content-Type: application/merge-patch+json"],
        &format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#),
    );
    assert_eq!(status, 200, "{body}");
}

/// The DOM after the page ran for a few seconds of virtual time, and the browser's log
/// (console messages included).
fn dump_dom(browser: &Path, url: &str, profile: &Path) -> (String, String) {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=8000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One GET over a fresh connection: the response head (status line and headers) and body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.to_string(), body.to_string())
}

/// The value of header `name` in a response head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The policy the page is served with: no inline script or style, connections to its own
/// origin only; its script and stylesheet come from the same origin, typed and not sniffed.
#[test]
fn the_page_runs_only_its_own_script_and_connects_only_to_its_own_origin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        plugin("change-logger"),
        dir.path().join("change-logger.wasm"),
    )
    .unwrap();
    let mut host = HostProcess::start(dir.path(), &["--listen", "127.0.0.1:0"]);
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    let (head, page) = get(&status, "/");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let policy = header(&head, "content-security-policy").expect("a content security policy");
    let directive = |name: &str| {
        policy
            .split(';')
            .map(str::trim)
            .find_map(|d| d.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in {policy}"))
    };
    assert_eq!(directive("script-src"), "'self'", "{policy}");
    assert_eq!(directive("connect-src"), "'self'", "{policy}");
    assert_eq!(directive("style-src"), "'self'", "{policy}");
    assert_eq!(directive("default-src"), "'none'", "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert!(page.contains(r#"<script src="/dashboard.js">"#), "{page}");
    for (path, kind) in [
        ("/dashboard.js", "text/javascript"),
        ("/dashboard.css", "text/css"),
    ] {
        let (head, body) = get(&status, path);
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert!(
            header(&head, "content-type").is_some_and(|t| t.starts_with(kind)),
            "{path}: {head}"
        );
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"));
        assert!(body.len() > 500, "{path}: {body}");
    }
    host.stop();
}

#[test]
fn the_dashboard_shows_the_plugins_and_a_live_change_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no chromium on PATH and CI=true: `make test` installs the Debian package"
        );
        eprintln!("skipped: no chromium on PATH (make test installs the Debian package)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in ["change-logger", "image-pinner"] {
        std::fs::copy(plugin(name), dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    let mut host = HostProcess::start(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--policies",
            policies.to_str().unwrap(),
        ],
    );
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    let api = host
        .logged("embedded API server at", "at ")
        .trim_start_matches("http://")
        .to_string();
    // change-logger must have seen web at one replica first, or the scale is its first sight
    // of web ("added - Replicas: 3") rather than a change.
    let first_sight = "Deployment web added - Replicas: 1";
    assert!(
        host.seen.contains(first_sight) || host.saw_within(first_sight, WAIT),
        "{}",
        host.seen
    );
    patch_replicas(&api, 3);
    assert!(
        host.saw_within("Replicas changed: 1 -> 3", WAIT),
        "{}",
        host.seen
    );

    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{status}/");
    let start = Instant::now();
    let (dom, console) = loop {
        let (dom, console) = dump_dom(&browser, &url, profile.path());
        if dom.contains("Replicas changed: 1 -\u{3e} 3")
            || dom.contains("Replicas changed: 1 -&gt; 3")
        {
            break (dom, console);
        }
        assert!(
            start.elapsed() < WAIT,
            "the page never showed the change:\n{dom}\n{console}"
        );
    };
    // The policy let the page run its script, load its style and open its WebSocket
    // (`connect-src 'self'` covers ws: on the same host and port in Chromium).
    assert!(
        !console.contains("Content Security Policy"),
        "a policy violation: {console}"
    );
    assert!(
        dom.contains(r#"<span id="status" class="up">connected</span>"#),
        "the WebSocket is open: {dom}"
    );
    let table = dom
        .split("id=\"plugins\"")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .expect("the plugins table");
    for plugin in ["change-logger", "image-pinner"] {
        assert!(table.contains(plugin), "{plugin} in the table: {table}");
    }
    assert!(table.contains("enforce"), "{table}");

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        shot.metadata().is_ok_and(|m| m.len() > 1000),
        "a screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    host.stop();
}
