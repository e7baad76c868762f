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
    // Each of web's lines links to its per-object view.
    assert!(
        dom.contains(r##"href="#why=Deployment%2Fdemo%2Fweb""##),
        "a why link: {dom}"
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

    // The per-object view: web's reconciles from the decision ledger, with the scale that
    // queued change-logger's and the fields it changed.
    let why = format!("http://{status}/#why=Deployment%2Fdemo%2Fweb");
    let start = Instant::now();
    let view = loop {
        let (dom, console) = dump_dom(&browser, &why, profile.path());
        let view = dom
            .split("id=\"why-view\"")
            .nth(1)
            .and_then(|rest| rest.split("</section>").next())
            .unwrap_or("")
            .to_string();
        if view.contains("/spec/replicas") && view.contains("change-logger") {
            break view;
        }
        assert!(
            start.elapsed() < WAIT,
            "the why view never showed the scale:\n{dom}\n{console}"
        );
    };
    assert!(!view.starts_with(" hidden"), "{view}");
    assert!(view.contains("Deployment demo/web"), "{view}");
    assert!(
        view.contains("patch Deployment demo/web → executed"),
        "image-pinner's patch: {view}"
    );

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

/// The sum of `kubeplug_reconcile_total` for `plugin` in a metrics text.
fn reconciles_in_metrics(metrics: &str, plugin: &str) -> u64 {
    let prefix = format!("kubeplug_reconcile_total{{plugin=\"{plugin}\",");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The value of attribute `attr` on the first element whose tag text holds `marker`.
fn attribute_after(dom: &str, marker: &str, attr: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let tag_end = dom[at..].find('>')? + at;
    let tag_start = dom[..at].rfind('<')?;
    let tag = &dom[tag_start..tag_end];
    let value = tag.split(&format!("{attr}=\"")).nth(1)?;
    Some(value.split('"').next()?.to_string())
}

/// image-pinner allowed to patch replicas only: its image patch of `demo/web` (alpine) is
/// denied by the `fields` grant, for the per-plugin view to show.
const PINNER_REPLICAS_ONLY: &str = r#"
apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: image-pinner}
spec:
  mode: enforce
  namespaces: {names: [demo]}
  rules:
    - apiVersion: apps/v1
      kind: Deployment
      verbs: [patch]
      fields: [/spec/replicas]
  config: {image: "nginx:1.13"}
"#;

/// The plots in headless Chromium, behind a token: after a burst of ten scales the reconciles
/// chart of change-logger plots exactly the count `/metrics` has for it (the host keeps the
/// points; the step under way is included), and image-pinner's own view (`#plugin=`) shows its
/// policy, its grants, its revision and digest, and its denied patch with the rule that
/// decided. A screenshot is kept in `target/test-artifacts/dashboard-plots.png`.
#[test]
fn the_plots_show_a_scale_burst_as_metrics_count_it_and_a_plugin_its_denials() {
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
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    std::fs::copy(
        samples.join("change-logger.policy.yaml"),
        dir.path().join("change-logger.policy.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("image-pinner.policy.yaml"),
        PINNER_REPLICAS_ONLY,
    )
    .unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "plot-token\n").unwrap();
    let mut host = HostProcess::start(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--listen-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    let api = host
        .logged("embedded API server at", "at ")
        .trim_start_matches("http://")
        .to_string();
    // image-pinner's first reconcile of web may be logged before the host says it runs.
    assert!(
        host.seen.contains("action denied") || host.saw_within("action denied", WAIT),
        "{}",
        host.seen
    );
    let before = reconciles_in_metrics(
        &common::http(&status, "GET", "/metrics", &[], "").1,
        "change-logger",
    );
    for replicas in 2..12 {
        patch_replicas(&api, replicas);
    }
    // The queue may fold several changes of web into one reconcile: the last one is seen.
    assert!(host.saw_within(" -> 11", WAIT), "{}", host.seen);
    // The burst is over once change-logger's count stops moving.
    let count = || {
        reconciles_in_metrics(
            &common::http(&status, "GET", "/metrics", &[], "").1,
            "change-logger",
        )
    };
    let mut settled = count();
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = count();
        if now == settled {
            break;
        }
        settled = now;
    }
    assert!(
        settled > before,
        "{before} reconciles before the burst, {settled} after"
    );
    assert_eq!(
        common::http(&status, "GET", "/api/plugins", &[], "").0,
        401,
        "the plots' data needs the token"
    );
    let (code, body) = common::http(
        &status,
        "GET",
        "/api/plugins/Not_A_Name?token=plot-token",
        &[],
        "",
    );
    assert_eq!(code, 400, "{body}");
    let (code, _) = common::http(
        &status,
        "GET",
        "/api/plugins/nobody?token=plot-token",
        &[],
        "",
    );
    assert_eq!(code, 404);

    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{status}/?token=plot-token#plugin=image-pinner");
    let start = Instant::now();
    let (dom, console) = loop {
        let (dom, console) = dump_dom(&browser, &url, profile.path());
        if dom.contains("data-reconciles") && dom.contains("denied") {
            break (dom, console);
        }
        assert!(
            start.elapsed() < WAIT,
            "the page never plotted:\n{dom}\n{console}"
        );
    };
    assert_eq!(count(), settled, "no reconcile while the page was read");
    assert!(
        !console.contains("Content Security Policy"),
        "a policy violation: {console}"
    );
    let plots = dom.split("id=\"plots\"").nth(1).expect("the plots");
    let plotted = attribute_after(
        plots,
        "data-plugin=\"change-logger\" data-reconciles=",
        "data-reconciles",
    )
    .expect("change-logger's reconciles caption");
    assert_eq!(
        plotted.parse::<u64>().unwrap(),
        settled,
        "plotted against /metrics"
    );
    let chart = attribute_after(
        plots,
        "data-plugin=\"change-logger\" data-metric=\"reconciles\"",
        "data-sum",
    )
    .expect("change-logger's reconciles chart");
    assert_eq!(chart, plotted);
    let line = attribute_after(plots, "class=\"line rate\"", "points").expect("a plotted line");
    assert!(line.split(' ').count() >= 2, "{line}");

    let view = dom
        .split("id=\"plugin-view\"")
        .nth(1)
        .and_then(|rest| rest.split("<h2>Plots").next())
        .expect("the plugin view");
    assert!(!view.starts_with(" hidden"), "{view}");
    for shown in [
        "image-pinner",
        "0.1.0",
        "/spec/replicas",
        "apps/v1/Deployment: patch; fields: /spec/replicas",
        "namespaces: demo",
        "patch denied",
        "fields",
        "Deployment demo/web",
    ] {
        assert!(view.contains(shown), "{shown:?} in the view: {view}");
    }
    let digest = host.logged("result=\"started\" plugin=\"image-pinner\"", "digest=");
    assert!(view.contains(&digest), "{digest} in {view}");

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard-plots.png");
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1280,1600",
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

/// A log client of its own that does what KubeStellar UI's LogModal does: a page on another
/// origin opens `ws://HOST/ws?namespace=NS&deployment=NAME` and appends every frame, raw, to
/// a text area. It reports the text area to the test's server (its own origin) so the test
/// can read it while the page runs.
const LOG_CLIENT: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>log client</title></head>
<body><h1>Logs: <span id="name"></span></h1><p id="state">connecting</p>
<textarea id="log" rows="30" cols="160" readonly></textarea>
<script>
const q = new URLSearchParams(location.search);
document.getElementById("name").textContent = q.get("deployment");
const log = document.getElementById("log");
const state = document.getElementById("state");
const socket = new WebSocket("ws://" + q.get("api") + "/ws?namespace=" + q.get("namespace") + "&deployment=" + q.get("deployment"));
socket.onopen = () => { state.textContent = "open"; };
socket.onmessage = (event) => { log.value += event.data + "\n"; };
socket.onclose = () => { state.textContent = "closed"; };
setInterval(() => fetch("/report", { method: "POST", body: state.textContent + "\n" + log.value }), 250);
</script></body></html>"#;

/// Serves [`LOG_CLIENT`] at `/` and keeps the last body POSTed to `/report`.
fn serve_log_client(
    listener: std::net::TcpListener,
    report: std::sync::Arc<std::sync::Mutex<String>>,
) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let (head, mut body) = loop {
                let Ok(n) = stream.read(&mut chunk) else {
                    break (String::new(), Vec::new());
                };
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (
                        String::from_utf8_lossy(&buf[..end]).into_owned(),
                        buf[end + 4..].to_vec(),
                    );
                }
            };
            let length: usize = header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while body.len() < length {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
            let response = if head.starts_with("POST /report") {
                *report.lock().unwrap() = String::from_utf8_lossy(&body).into_owned();
                "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n".to_string()
            } else if head.starts_with("GET / ") || head.starts_with("GET /?") {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{LOG_CLIENT}",
                    LOG_CLIENT.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string()
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
}

/// A Deployment log viewer as KubeStellar UI has it (see [`LOG_CLIENT`]), served from another
/// origin that `--allow-origin` lists, in headless Chromium: once its WebSocket is open, a
/// scale of its Deployment shows as the live line, raw, starting with the timestamp and the
/// message; a change of another Deployment in the namespace does not show.
#[test]
fn a_deployment_log_viewer_on_another_origin_shows_the_live_change_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no chromium on PATH and CI=true: `make test` installs the Debian package"
        );
        eprintln!("skipped: no chromium on PATH (make test installs the Debian package)");
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let report = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    serve_log_client(listener, report.clone());

    let dir = tempfile::tempdir().unwrap();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    for name in ["change-logger", "image-pinner"] {
        std::fs::copy(plugin(name), dir.path().join(format!("{name}.wasm"))).unwrap();
        let policy = format!("{name}.policy.yaml");
        std::fs::copy(samples.join(&policy), dir.path().join(&policy)).unwrap();
    }
    let mut host = HostProcess::start(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--allow-origin", &origin],
    );
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    let api = host
        .logged("embedded API server at", "at ")
        .trim_start_matches("http://")
        .to_string();
    assert!(
        host.seen.contains("Image changed: alpine -> nginx:1.13")
            || host.saw_within("Image changed: alpine -> nginx:1.13", WAIT),
        "{}",
        host.seen
    );

    let profile = tempfile::tempdir().unwrap();
    let page = format!("{origin}/?api={status}&namespace=demo&deployment=web");
    let mut chrome = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(&page)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_for = |what: &str, done: &dyn Fn(&str) -> bool| {
        let start = Instant::now();
        loop {
            let text = report.lock().unwrap().clone();
            if done(&text) {
                return text;
            }
            assert!(
                start.elapsed() < WAIT,
                "the page never showed {what}: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for("an open stream", &|t| t.starts_with("open\n"));
    let opened = jiff::Timestamp::now();
    let (code, body) = common::http(
        &api,
        "PATCH",
        "/apis/apps/v1/namespaces/demo/deployments/api",
        &["Content-Type: application/merge-patch+json"],
        r#"{"spec":{"replicas":5}}"#,
    );
    assert_eq!(code, 200, "{body}");
    patch_replicas(&api, 3);
    let text = wait_for("the change", &|t| t.contains("Replicas changed: 1 -> 3"));
    let _ = chrome.kill();
    let _ = chrome.wait();
    let line = text
        .lines()
        .find(|l| l.contains("Replicas changed: 1 -> 3"))
        .unwrap();
    assert!(
        line.starts_with(r#"{"timestamp":""#)
            && line.contains(r#"","message":"Deployment web updated - Replicas changed: 1 -> 3""#),
        "{line}"
    );
    let frame: serde_json::Value = serde_json::from_str(line).unwrap();
    let stamp: jiff::Timestamp = frame["timestamp"].as_str().unwrap().parse().unwrap();
    assert!(
        stamp >= opened - jiff::SignedDuration::from_millis(5),
        "a live line: {line}"
    );
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.contains(r#""key":"demo/web""#)),
        "only web's records: {text}"
    );
    assert!(!text.contains("Replicas changed: 2 -> 5"), "{text}");
    host.stop();
}

/// `make demo` as the Makefile runs it (every reference plugin, the TypeScript and Python
/// ports included, under the sample policies): no warning or error up to the first quiet
/// seconds, and it prints the dashboard's URL and the three commands to try first.
#[test]
fn the_demo_starts_without_a_warning_and_says_what_to_try_first() {
    let plugins = plugin("change-logger").parent().unwrap().to_path_buf();
    for name in [
        "image-pinner-js",
        "image-pinner-py",
        "sample-controller",
        "customcluster",
    ] {
        plugin(name);
    }
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    let mut host = HostProcess::start(
        &plugins,
        &[
            "--listen",
            "127.0.0.1:0",
            "--policies",
            policies.to_str().unwrap(),
        ],
    );
    assert!(
        host.saw_within("running; stop with", Duration::from_secs(300)),
        "{}",
        host.seen
    );
    host.saw_within("no such line", Duration::from_secs(3));
    let seen = host.stop();
    for bad in [" WARN ", " ERROR "] {
        assert!(!seen.contains(bad), "{bad} in a clean demo start:\n{seen}");
    }
    let dashboard = seen
        .lines()
        .find_map(|l| l.strip_prefix("dashboard: http://"))
        .unwrap_or_else(|| panic!("no dashboard URL: {seen}"));
    assert!(dashboard.ends_with('/'), "{dashboard}");
    let first: Vec<&str> = seen
        .lines()
        .skip_while(|l| *l != "try first:")
        .skip(1)
        .take(3)
        .collect();
    assert_eq!(first.len(), 3, "{seen}");
    for (line, what) in first.iter().zip([
        "-n demo scale deploy web --replicas=3",
        "-n demo set image deploy/web app=alpine",
        "-n demo describe deploy web",
    ]) {
        assert!(
            line.trim_start().starts_with("kubectl --kubeconfig ") && line.contains(what),
            "{line}"
        );
    }
    for port in ["image-pinner-js", "image-pinner-py"] {
        let started = seen
            .lines()
            .find(|l| l.contains(&format!("result=\"started\" plugin=\"{port}\"")))
            .unwrap_or_else(|| panic!("{port} started: {seen}"));
        assert!(
            started.contains("mode=DryRun") && started.contains(&format!("{port}.policy.yaml")),
            "{port} runs in dry-run under its own policy: {started}"
        );
    }
}
