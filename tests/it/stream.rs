//! The live stream at `/api/wds/logs`: through the real binary against the embedded API
//! server (what a viewer sees when a Deployment changes, denials, replay, filters, token,
//! Origin, the Host allow-list against DNS rebinding, Server-Sent Events), and in process (a
//! client that never reads while 100,000 records flow, in a process of its own; clients that
//! never read are disconnected after the send timeout, over SSE as over WebSocket).

use crate::common;

use common::host_process::HostProcess;
use common::{http, plugin, test_plugin};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type Result<T = ()> = anyhow::Result<T>;
type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(60);

/// change-logger as in the samples; image-pinner allowed to patch replicas only, so its
/// image patch of `demo/web` (alpine) is denied by the `fields` grant.
const PINNER_POLICY: &str = r#"
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

/// A plugins directory with change-logger and image-pinner and their policies.
fn plugins_dir() -> tempfile::TempDir {
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
    std::fs::write(dir.path().join("image-pinner.policy.yaml"), PINNER_POLICY).unwrap();
    dir
}

/// A running host: its status address and the embedded API server's.
fn start(dir: &Path, args: &[&str]) -> (HostProcess, String, String) {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut host = HostProcess::start(dir, &all);
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    let api = host
        .logged("embedded API server at", "at ")
        .trim_start_matches("http://")
        .to_string();
    (host, status, api)
}

fn scale(api: &str, replicas: u32) {
    let (status, body) = http(
        api,
        "PATCH",
        "/apis/apps/v1/namespaces/demo/deployments/web",
        &["Content-Type: application/merge-patch+json"],
        &format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#),
    );
    assert_eq!(status, 200, "{body}");
}

async fn connect(addr: &str, query: &str, headers: &[(&str, &str)]) -> Result<Socket> {
    let mut request = format!("ws://{addr}/api/wds/logs?{query}").into_client_request()?;
    for (k, v) in headers {
        let name: tokio_tungstenite::tungstenite::http::HeaderName = k.parse()?;
        request.headers_mut().insert(name, v.parse()?);
    }
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

/// The next JSON frame, skipping pings; `None` after `within` without one.
async fn next_frame(socket: &mut Socket, within: Duration) -> Option<Value> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                return Some(serde_json::from_str(&text).expect("each frame is one JSON object"));
            }
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// Reads frames until one satisfies `wanted` (returned) or `within` passes (panics).
async fn frame_where(socket: &mut Socket, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match next_frame(socket, deadline - Instant::now()).await {
            Some(frame) if wanted(&frame) => return frame,
            Some(frame) => seen.push(frame),
            None => break,
        }
    }
    panic!("no frame with {what}; saw {seen:#?}");
}

/// Every frame arriving until `quiet` passes without one.
async fn frames_until_quiet(socket: &mut Socket, quiet: Duration) -> Vec<Value> {
    let mut frames = Vec::new();
    while let Some(frame) = next_frame(socket, quiet).await {
        frames.push(frame);
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_changes_denials_and_the_recent_past_filtered() -> Result {
    let dir = plugins_dir();
    let (host, status, api) = start(dir.path(), &[]);
    let mut live = connect(&status, "since=1000", &[]).await?;

    // image-pinner's denial, and change-logger's first call on web (in either order): scaled
    // before that call, change-logger would first see 3 replicas, never the change.
    let denied = std::cell::RefCell::new(None);
    let first_call = std::cell::Cell::new(false);
    frame_where(
        &mut live,
        "image-pinner's denied image patch and change-logger's first call on web",
        |f| {
            if f["type"] == "audit" && f["decision"] == "denied" && f["plugin"] == "image-pinner" {
                denied.borrow_mut().get_or_insert_with(|| f.clone());
            }
            if f["plugin"] == "change-logger"
                && f["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("Deployment web added - Replicas: 1,"))
            {
                first_call.set(true);
            }
            denied.borrow().is_some() && first_call.get()
        },
    )
    .await;
    let denied = denied.into_inner().expect("seen");
    assert_eq!(denied["key"], "demo/web", "{denied}");
    assert_eq!(denied["grant"], "fields", "{denied}");
    assert_eq!(denied["level"], "warn", "{denied}");

    scale(&api, 3);
    let changed = frame_where(&mut live, "Replicas changed: 1 -> 3", |f| {
        f["message"]
            .as_str()
            .is_some_and(|m| m.contains("Replicas changed: 1 -> 3"))
    })
    .await;
    assert_eq!(changed["type"], "log", "{changed}");
    assert_eq!(changed["plugin"], "change-logger", "{changed}");
    assert_eq!(changed["key"], "demo/web", "{changed}");
    assert_eq!(changed["namespace"], "demo", "{changed}");
    let stamp: jiff::Timestamp = changed["timestamp"].as_str().unwrap().parse()?;
    let age = jiff::Timestamp::now().duration_since(stamp);
    assert!(
        age < jiff::SignedDuration::from_secs(30),
        "a current timestamp: {changed}"
    );
    // change-logger's Event about the same change is an `event` record, for those who ask
    // for Events (it repeats the log line: by default one change is one line).
    let mut events = connect(&status, "type=event&since=1000", &[]).await?;
    frame_where(&mut events, "change-logger's Event", |f| {
        f["type"] == "event"
            && f["plugin"] == "change-logger"
            && f["key"] == "demo/web"
            && f["message"]
                .as_str()
                .is_some_and(|m| m.contains("Replicas changed: 1 -> 3"))
    })
    .await;

    // A viewer opened afterwards sees what just happened, filtered.
    let mut late = connect(&status, "plugin=image-pinner&type=audit", &[]).await?;
    let replayed = frames_until_quiet(&mut late, Duration::from_secs(2)).await;
    assert!(
        replayed.iter().any(|f| f["decision"] == "denied"),
        "{replayed:#?}"
    );
    assert!(
        replayed
            .iter()
            .all(|f| f["plugin"] == "image-pinner" && f["type"] == "audit"),
        "{replayed:#?}"
    );
    let mut logs = connect(&status, "type=log&namespace=demo&since=1000", &[]).await?;
    let replayed = frames_until_quiet(&mut logs, Duration::from_secs(2)).await;
    assert!(
        replayed.iter().any(|f| f["message"]
            .as_str()
            .is_some_and(|m| m.contains("Replicas changed: 1 -> 3"))),
        "{replayed:#?}"
    );
    assert!(replayed.iter().all(|f| f["type"] == "log"), "{replayed:#?}");
    let mut errors = connect(&status, "level=error", &[]).await?;
    let replayed = frames_until_quiet(&mut errors, Duration::from_secs(1)).await;
    assert!(replayed.is_empty(), "no errors happened: {replayed:#?}");
    let mut none = connect(&status, "type=log&since=0", &[]).await?;
    assert!(
        frames_until_quiet(&mut none, Duration::from_millis(500))
            .await
            .is_empty(),
        "since=0 replays nothing"
    );

    // Deleting the Deployment: the reconcile outcome, as the original logger said it.
    let (code, body) = http(
        &api,
        "DELETE",
        "/apis/apps/v1/namespaces/demo/deployments/web",
        &[],
        "",
    );
    assert_eq!(code, 200, "{body}");
    let gone = frame_where(&mut live, "the deletion", |f| {
        f["type"] == "reconcile" && f["plugin"] == "change-logger"
    })
    .await;
    assert_eq!(
        gone["message"], "Deployment demo/web has been deleted",
        "{gone}"
    );
    assert_eq!(
        http(&status, "GET", "/api/wds/logs?type=nope", &[], "").0,
        400
    );
    live.close(None).await?;
    host.stop();
    Ok(())
}

/// A plugins directory with change-logger and image-pinner under the sample policies (the
/// pinner keeps `demo/web` at nginx:1.13 and has nothing to do on a scale).
fn sample_plugins_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    for name in ["change-logger", "image-pinner"] {
        std::fs::copy(plugin(name), dir.path().join(format!("{name}.wasm"))).unwrap();
        let policy = format!("{name}.policy.yaml");
        std::fs::copy(samples.join(&policy), dir.path().join(&policy)).unwrap();
    }
    dir
}

/// The raw text frames arriving until `quiet` passes without one.
async fn raw_frames_until_quiet(socket: &mut Socket, quiet: Duration) -> Vec<String> {
    let mut frames = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(quiet, socket.next()).await {
        if let Message::Text(text) = message {
            frames.push(text.to_string());
        }
    }
    frames
}

/// KubeStellar UI's log modal opens `/ws?namespace=NS&deployment=NAME` and prints every frame
/// raw: the stream answers there too, ignores parameters it does not know, selects the one
/// Deployment, and a scale is one line that starts with its timestamp and message. Asking for
/// `level=debug` shows the Event and the audits of the same change; `format=text` sends
/// `[timestamp] message`; known parameters with bad values are refused, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_log_viewer_gets_one_line_per_change_of_its_deployment() -> Result {
    let dir = sample_plugins_dir();
    let (mut host, status, api) = start(dir.path(), &[]);
    // image-pinner pinned web's image; change-logger logged that: the start has settled.
    assert!(
        host.seen.contains("Image changed: alpine -> nginx:1.13")
            || host.saw_within("Image changed: alpine -> nginx:1.13", WAIT),
        "{}",
        host.seen
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connect_ws = |query: &'static str| {
        let status = status.clone();
        async move {
            let request = format!("ws://{status}/ws?{query}").into_client_request()?;
            anyhow::Ok(tokio_tungstenite::connect_async(request).await?.0)
        }
    };
    let mut viewer = connect_ws("namespace=demo&deployment=web&cluster=default&since=0").await?;
    let mut debug = connect_ws("namespace=demo&deployment=web&level=debug&since=0").await?;
    let mut text = connect_ws("name=web&format=text&since=0").await?;
    // A WebSocket client is subscribed once its upgrade completed, after the handshake's
    // answer: give the three a moment before the change they must not miss.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Another Deployment of the namespace changes too: not this viewer's.
    let (code, body) = http(
        &api,
        "PATCH",
        "/apis/apps/v1/namespaces/demo/deployments/api",
        &["Content-Type: application/merge-patch+json"],
        r#"{"spec":{"replicas":4}}"#,
    );
    assert_eq!(code, 200, "{body}");
    scale(&api, 3);
    let frames = raw_frames_until_quiet(&mut viewer, Duration::from_secs(3)).await;
    assert_eq!(frames.len(), 1, "one change, one line: {frames:#?}");
    let line = &frames[0];
    assert!(line.starts_with(r#"{"timestamp":""#), "{line}");
    let message_at = line.find(r#","message":"Deployment web updated - Replicas changed: 1 -> 3""#);
    assert_eq!(
        message_at,
        Some(r#"{"timestamp":"2026-11-23T18:44:43.123Z""#.len()),
        "message is the second key: {line}"
    );
    let frame: Value = serde_json::from_str(line)?;
    assert_eq!(frame["key"], "demo/web");
    assert!(line.len() < 260, "{} characters: {line}", line.len());

    let detail = raw_frames_until_quiet(&mut debug, Duration::from_secs(1)).await;
    let detail: Vec<Value> = detail
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let types: Vec<&str> = detail.iter().filter_map(|f| f["type"].as_str()).collect();
    assert!(
        types.contains(&"log") && types.contains(&"event"),
        "{detail:#?}"
    );
    assert!(
        detail
            .iter()
            .any(|f| f["type"] == "audit" && f["action"] == "event"),
        "{detail:#?}"
    );
    assert!(detail.iter().all(|f| f["key"] == "demo/web"), "{detail:#?}");

    let lines = raw_frames_until_quiet(&mut text, Duration::from_secs(1)).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let (stamp, message) = lines[0]
        .strip_prefix('[')
        .and_then(|l| l.split_once("] "))
        .unwrap_or_else(|| panic!("not [timestamp] message: {}", lines[0]));
    stamp.parse::<jiff::Timestamp>()?;
    assert_eq!(message, "Deployment web updated - Replicas changed: 1 -> 3");

    // Bad values of known parameters are refused with the parameter's name; unknown names
    // are not an error.
    let many_plugins = format!("/ws?{}", vec!["plugin=a"; 17].join("&"));
    for (path, named) in [
        ("/ws?namespace=Demo&deployment=web", "namespace"),
        ("/ws?namespace=demo&deployment=a..b", "deployment"),
        ("/api/wds/logs?name=%1b%5b2J", "name"),
        ("/ws?format=html", "format"),
        ("/ws?level=loud", "level"),
        ("/ws?since=many", "since"),
        (many_plugins.as_str(), "plugin"),
    ] {
        let (code, body) = http(&status, "GET", path, &["Accept: text/event-stream"], "");
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(named), "{path}: {body}");
        assert!(!body.contains('\u{1b}'), "{path}: {body}");
    }
    let crowd = format!("/ws?{}", vec!["x=1"; 65].join("&"));
    assert_eq!(http(&status, "GET", &crowd, &[], "").0, 400);
    connect_ws("deployment=web&cluster=default&theme=dark&_=1").await?;
    host.stop();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_and_origin_guard_the_stream_and_sse_serves_it_too() -> Result {
    let dir = plugins_dir();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n")?;
    let (host, status, _api) = start(
        dir.path(),
        &[
            "--listen-token-file",
            token_file.to_str().unwrap(),
            "--allow-origin",
            "https://dash.example.com",
        ],
    );
    let bearer = "Authorization: Bearer s3cret-token";
    assert_eq!(http(&status, "GET", "/plugins", &[], "").0, 401);
    assert_eq!(http(&status, "GET", "/plugins", &[bearer], "").0, 200);
    assert_eq!(http(&status, "GET", "/", &[], "").0, 401, "the dashboard");
    let (code, page) = http(&status, "GET", "/?token=s3cret-token", &[], "");
    assert_eq!(code, 200);
    assert!(page.contains("/dashboard.js"), "{page}");
    // The page's own script needs no token: a <script src> could not carry it.
    let (code, script) = http(&status, "GET", "/dashboard.js", &[], "");
    assert_eq!(code, 200);
    assert!(script.contains("/api/wds/logs"), "{script}");
    assert_eq!(
        http(
            &status,
            "GET",
            "/plugins",
            &["Authorization: Bearer wrong"],
            ""
        )
        .0,
        401
    );
    for open in ["/healthz", "/metrics"] {
        assert_eq!(http(&status, "GET", open, &[], "").0, 200, "{open}");
    }
    let refused = |err: anyhow::Error| match err.downcast_ref() {
        Some(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        _ => panic!("not an HTTP refusal: {err}"),
    };
    assert_eq!(refused(connect(&status, "", &[]).await.unwrap_err()), 401);
    assert_eq!(
        refused(
            connect(
                &status,
                "token=s3cret-token",
                &[("Origin", "http://evil.example")]
            )
            .await
            .unwrap_err()
        ),
        403
    );
    let mut allowed = connect(
        &status,
        "token=s3cret-token&type=reload",
        &[("Origin", "https://dash.example.com")],
    )
    .await?;
    frame_where(&mut allowed, "a replayed plugin start", |f| {
        f["type"] == "reload" && f["result"] == "started"
    })
    .await;
    let same_origin = format!("http://{status}");
    connect(
        &status,
        "",
        &[
            ("Origin", same_origin.as_str()),
            ("Authorization", "Bearer s3cret-token"),
        ],
    )
    .await?;

    // Server-Sent Events: the same records as `data:` lines.
    let mut sse = std::net::TcpStream::connect(&status)?;
    write!(
        sse,
        "GET /api/wds/logs?type=reload&token=s3cret-token HTTP/1.1\r\nHost: {status}\r\nAccept: text/event-stream\r\n\r\n"
    )?;
    sse.set_read_timeout(Some(WAIT))?;
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    while !text.contains("plugin started") && Instant::now() < deadline {
        let n = sse.read(&mut buf)?;
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(text.contains("text/event-stream"), "{text}");
    let data = text
        .lines()
        .find(|l| l.starts_with("data: ") && l.contains("plugin started"))
        .unwrap_or_else(|| panic!("no data line: {text}"));
    let record: Value = serde_json::from_str(data.trim_start_matches("data: "))?;
    assert_eq!(record["type"], "reload");
    host.stop();
    Ok(())
}

/// DNS rebinding: a page on `rebind.example`, a name its owner points at 127.0.0.1, sends
/// `Host: rebind.example:P` and the matching `Origin`, so the Origin check alone lets it in.
/// The dashboard, `/plugins` and the stream answer only IP literals, `localhost` and
/// `--allow-host` names; the probes and `/metrics` answer any Host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_is_refused_while_ip_literals_localhost_and_allowed_names_are_served()
-> Result {
    let dir = plugins_dir();
    let (host, status, _api) = start(dir.path(), &["--allow-host", "dash.example.com"]);
    let port = status.rsplit(':').next().unwrap();
    let refused = |err: anyhow::Error| match err.downcast_ref() {
        Some(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        _ => panic!("not an HTTP refusal: {err}"),
    };

    let rebound = format!("rebind.example:{port}");
    let as_rebound = [
        format!("Host: {rebound}"),
        format!("Origin: http://{rebound}"),
    ];
    let as_rebound: Vec<&str> = as_rebound.iter().map(String::as_str).collect();
    for path in ["/", "/plugins", "/dashboard.js", "/api/wds/logs?since=5"] {
        let (code, body) = http(&status, "GET", path, &as_rebound, "");
        assert_eq!(code, 403, "{path}: {body}");
        assert!(
            body.contains("rebind.example") && body.contains("--allow-host"),
            "{path}: {body}"
        );
    }
    let mut sse = as_rebound.clone();
    sse.push("Accept: text/event-stream");
    assert_eq!(http(&status, "GET", "/api/wds/logs", &sse, "").0, 403);
    let origin = format!("http://{rebound}");
    let ws = connect(
        &status,
        "since=5",
        &[("Host", rebound.as_str()), ("Origin", origin.as_str())],
    )
    .await;
    assert_eq!(refused(ws.unwrap_err()), 403, "the stream's WebSocket");

    for name in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("dash.example.com:{port}"),
    ] {
        let as_name = [format!("Host: {name}"), format!("Origin: http://{name}")];
        let as_name: Vec<&str> = as_name.iter().map(String::as_str).collect();
        for path in ["/", "/plugins", "/dashboard.js", "/dashboard.css"] {
            let (code, body) = http(&status, "GET", path, &as_name, "");
            assert_eq!(code, 200, "{name} {path}: {body}");
        }
        let origin = format!("http://{name}");
        let mut socket = connect(
            &status,
            "type=reload",
            &[("Host", name.as_str()), ("Origin", origin.as_str())],
        )
        .await?;
        frame_where(&mut socket, "a replayed plugin start", |f| {
            f["type"] == "reload" && f["result"] == "started"
        })
        .await;
    }

    // Probes and Prometheus name the pod by IP or by a Service name: any Host will do.
    for path in ["/healthz", "/readyz", "/metrics"] {
        for name in [rebound.as_str(), "kubeplug.ops.svc:8080", "10.1.2.3:8080"] {
            let (code, body) = http(&status, "GET", path, &[&format!("Host: {name}")], "");
            assert_eq!(code, 200, "{path} for {name}: {body}");
        }
    }
    host.stop();
    Ok(())
}

/// The in-process tests share the process's stream hub (and its clients gauge): one at a time.
static IN_PROCESS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A host in this process on the embedded API server, serving the live stream with `access`.
async fn host_in_process(
    plugins: &Path,
    access: kubeplug::server::Access,
) -> Result<(kubeplug::app::Host, kubeplug_sim::Sim)> {
    let sim = kubeplug_sim::Sim::builder().start().await?;
    let config = kubeplug::app::HostConfig {
        plugins: Some(plugins.to_path_buf()),
        objects: None,
        policies: plugins.to_path_buf(),
        watch: false,
        debounce: Duration::from_millis(50),
        listen: Some("127.0.0.1:0".parse()?),
        access,
        compile_cache: None,
        controller: kubeplug::controller::ControllerConfig::default(),
        shutdown_timeout: Duration::from_secs(10),
        coordination: None,
    };
    let host = kubeplug::app::Host::start(sim.client()?, config).await?;
    Ok((host, sim))
}

/// The value of `kubeplug_stream_clients` in the host's metrics.
fn stream_clients(host: &kubeplug::app::Host) -> u64 {
    let metrics = host.metrics().encode();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubeplug_stream_clients "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kubeplug_stream_clients: {metrics}"))
}

/// Waits up to `within` for `kubeplug_stream_clients` to read `clients`; how long it took.
async fn clients_become(host: &kubeplug::app::Host, clients: u64, within: Duration) -> Duration {
    let start = Instant::now();
    while stream_clients(host) != clients {
        assert!(
            start.elapsed() < within,
            "kubeplug_stream_clients is {} after {within:?}, not {clients}",
            stream_clients(host)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// A raw TCP client with a small receive buffer that sends `request` and reads nothing.
async fn stalled_client(addr: &str, request: &str) -> Result<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut stream = socket.connect(addr.parse()?).await?;
    stream.write_all(request.as_bytes()).await?;
    Ok(stream)
}

/// Reads `stream` until the server closes it (EOF or reset); panics after `within`.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> usize {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return total,
            Ok(Ok(n)) => total += n,
            Err(_) => panic!("the server kept the connection open ({total} bytes read)"),
        }
    }
}

/// Clients that send their request and never read, one over Server-Sent Events and one over
/// a WebSocket, while many records flow: both are disconnected once they accepted nothing
/// for the send timeout (here 2 s), `kubeplug_stream_clients` drops back and
/// `kubeplug_server_clients_disconnected_total` counts them; an SSE client
/// that reads, but slowly, falls behind, gets a `lagged` record like a WebSocket client,
/// and is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_accept_nothing_are_disconnected_after_the_send_timeout() -> Result {
    const SEND_TIMEOUT: Duration = Duration::from_secs(2);
    let _alone = IN_PROCESS.lock().await;
    let dir = tempfile::tempdir()?;
    let access = kubeplug::server::Access::default().with_send_timeout(SEND_TIMEOUT);
    let (host, _sim) = host_in_process(dir.path(), access).await?;
    let addr = host.server_addr().expect("listening").to_string();
    let hub = kubeplug::stream::global();
    let before = stream_clients(&host);
    let query = "since=0&plugin=stall-flood";

    let mut sse = stalled_client(
        &addr,
        &format!(
            "GET /api/wds/logs?{query} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        ),
    )
    .await?;
    let mut ws = stalled_client(
        &addr,
        &format!(
            "GET /api/wds/logs?{query} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        ),
    )
    .await?;
    // A reader of 16 KiB every 10 ms: slower than the flood even when a loaded machine slows
    // the flood's 30 MB down to 20 s (at 64 KiB it kept up with a flood starved of CPU, and
    // never lagged), never stalled for long.
    let slow = tokio::net::TcpStream::connect(&addr).await?;
    let slow_reader = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut slow = slow;
        slow.write_all(
            format!(
                "GET /api/wds/logs?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
        let mut buf = vec![0u8; 16 * 1024];
        let mut tail = String::new();
        let (mut lagged, mut done) = (None, false);
        while !done {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let n = slow.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "the slow reader was disconnected");
            tail.push_str(&String::from_utf8_lossy(&buf[..n]));
            let complete = tail.rfind('\n').map_or(0, |i| i + 1);
            for line in tail[..complete].lines() {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let record: Value = serde_json::from_str(data)?;
                if record["type"] == "lagged" && lagged.is_none() {
                    lagged = Some(record);
                } else if record["message"] == "flood done" {
                    done = true;
                }
            }
            tail.drain(..complete);
        }
        anyhow::Ok((lagged, slow))
    });
    clients_become(&host, before + 3, WAIT).await;

    let padding = "x".repeat(200);
    let publish = |n: usize, message: &str| {
        let serde_json::Value::Object(fields) =
            serde_json::json!({"plugin": "stall-flood", "n": n})
        else {
            unreachable!()
        };
        hub.publish(kubeplug::stream::Record::new(
            kubeplug::stream::RecordType::Log,
            kubeplug::stream::Level::Info,
            message,
            fields,
        ));
    };
    let flood = async {
        let start = Instant::now();
        for batch in 0..100 {
            for i in 0..1_000 {
                publish(
                    batch * 1_000 + i,
                    &format!("record {i} of batch {batch} {padding}"),
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        publish(100_000, "flood done");
        start.elapsed()
    };
    // The two that read nothing go, the slow reader stays.
    let (flooded, gone) = tokio::join!(
        flood,
        clients_become(&host, before + 1, SEND_TIMEOUT + WAIT)
    );
    assert!(
        gone >= SEND_TIMEOUT,
        "disconnected after {gone:?}, before the send timeout"
    );
    let (lagged, slow) = tokio::time::timeout(WAIT, slow_reader).await???;
    let lagged = lagged.expect("the slow SSE reader got a lagged record");
    assert!(lagged["dropped"].as_u64().unwrap() > 0, "{lagged}");
    let sse_left = read_until_closed(&mut sse, WAIT).await;
    let ws_left = read_until_closed(&mut ws, WAIT).await;
    assert_eq!(stream_clients(&host), before + 1);
    let metrics = host.metrics().encode();
    assert!(
        metrics
            .lines()
            .any(|l| l == "kubeplug_server_clients_disconnected_total 2"),
        "the two clients that read nothing are counted as disconnected: {metrics}"
    );
    println!(
        "flood of 100,000 records took {flooded:?}; the clients that read nothing were gone \
         {gone:?} after it started (send timeout {SEND_TIMEOUT:?}; {sse_left} SSE and {ws_left} \
         WebSocket bytes were left in the sockets); the slow SSE reader missed {}",
        lagged["dropped"]
    );
    // Leave no client behind for the other in-process test.
    drop(slow);
    let start = Instant::now();
    while stream_clients(&host) != before {
        assert!(
            start.elapsed() < WAIT,
            "the slow reader's close went unnoticed"
        );
        publish(100_001, "after the flood");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// [`a_stalled_client_costs_bounded_memory_and_slows_nobody`] in a process of its own: it
/// measures the resident set, which the other tests of this binary (compiling plugins,
/// caching thousands of objects) would move.
#[test]
fn a_stalled_client_costs_bounded_memory_and_slows_nobody_alone() {
    common::run_alone("stream::a_stalled_client_costs_bounded_memory_and_slows_nobody");
}

/// A client that never reads while 100,000 records flow through the real server: a reading
/// client gets every one, the stalled one is told how many it missed, memory stays flat.
#[ignore = "measures the process's resident set: run alone by the test of the same name + _alone"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_costs_bounded_memory_and_slows_nobody() -> Result {
    const RECORDS: usize = 100_000;
    const BATCH: usize = 1_000;
    let _alone = IN_PROCESS.lock().await;
    let dir = tempfile::tempdir()?;
    std::fs::copy(test_plugin("pinner-v1"), dir.path().join("pinner.wasm"))?;
    let sim = kubeplug_sim::Sim::builder().start().await?;
    let config = kubeplug::app::HostConfig {
        plugins: Some(dir.path().to_path_buf()),
        objects: None,
        policies: dir.path().to_path_buf(),
        watch: false,
        debounce: Duration::from_millis(50),
        listen: Some("127.0.0.1:0".parse()?),
        access: kubeplug::server::Access::default(),
        compile_cache: None,
        controller: kubeplug::controller::ControllerConfig::default(),
        shutdown_timeout: Duration::from_secs(10),
        coordination: None,
    };
    let host = kubeplug::app::Host::start(sim.client()?, config).await?;
    let addr = host.server_addr().expect("listening").to_string();
    let hub = kubeplug::stream::global();
    let mut stalled = connect(&addr, "since=0&plugin=flood", &[]).await?;
    let mut reader = connect(&addr, "since=0&plugin=flood", &[]).await?;
    // Both connected before the flood starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib();
    let mut received = 0usize;
    for batch in 0..RECORDS / BATCH {
        for i in 0..BATCH {
            let n = batch * BATCH + i;
            let serde_json::Value::Object(fields) = serde_json::json!({"plugin": "flood", "n": n})
            else {
                unreachable!()
            };
            hub.publish(kubeplug::stream::Record::new(
                kubeplug::stream::RecordType::Log,
                kubeplug::stream::Level::Info,
                &format!("record {n} of a flood that one client does not read"),
                fields,
            ));
        }
        while received < (batch + 1) * BATCH {
            let frame = next_frame(&mut reader, WAIT)
                .await
                .expect("the reading client keeps up");
            assert_eq!(frame["n"], received, "in order, none missed: {frame}");
            received += 1;
        }
    }
    let after = rss_kib();
    assert_eq!(received, RECORDS);
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let lagged = frame_where(&mut stalled, "a lagged frame", |f| f["type"] == "lagged").await;
    let dropped = lagged["dropped"].as_u64().unwrap();
    assert!(dropped > 0 && dropped < RECORDS as u64, "{lagged}");
    assert_eq!(lagged["message"], format!("dropped {dropped} records"));
    let metrics = host.metrics().encode();
    assert!(metrics.contains("kubeplug_stream_clients 2"), "{metrics}");
    stalled.send(Message::Close(None)).await.ok();
    reader.send(Message::Close(None)).await.ok();
    println!(
        "RSS {before} KiB -> {after} KiB over {RECORDS} records; the stalled client missed {dropped}"
    );
    Ok(())
}

/// `kubectl` (1.32) against the embedded API server while the host runs: `describe` lists the
/// Events the plugins reported (it selects them by `involvedObject.uid`, which the host fills
/// in), `get events --field-selector involvedObject.name=web` (and `regarding.name` on
/// events.k8s.io) lists web's only, and `get events -w` streams the new one. Skipped without
/// kubectl, except under `CI=true`.
#[test]
fn kubectl_describe_get_and_watch_show_the_events_plugins_report() {
    use std::process::{Command, Stdio};
    if !crate::common::has_kubectl() {
        return;
    }
    let dir = sample_plugins_dir();
    let (mut host, _status, api) = start(dir.path(), &[]);
    assert!(
        host.seen.contains("Image changed: alpine -> nginx:1.13")
            || host.saw_within("Image changed: alpine -> nginx:1.13", WAIT),
        "{}",
        host.seen
    );
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster: {{server: 'http://{api}'}}\nusers:\n- name: sim\n  user: {{}}\ncontexts:\n- name: sim\n  context: {{cluster: sim, user: sim, namespace: demo}}\ncurrent-context: sim\n"
        ),
    )
    .unwrap();
    let kubectl = |args: &[&str]| crate::common::kubectl(&kubeconfig, args);
    let watch_out = dir.path().join("watch.out");
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "events", "-w", "--output-watch-events"])
        .stdout(std::fs::File::create(&watch_out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    scale(&api, 3);
    assert!(
        host.saw_within("Replicas changed: 1 -> 3", WAIT),
        "{}",
        host.seen
    );
    let start = Instant::now();
    let described = loop {
        let described = kubectl(&["describe", "deployment", "web"]);
        if described.contains("ReplicasChanged") || start.elapsed() > WAIT {
            break described;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let events = described
        .split("\nEvents:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section: {described}"));
    for shown in [
        "ReplicasChanged",
        "kubeplug/change-logger",
        "Deployment web updated - Replicas changed: 1 -> 3",
        "Added",
    ] {
        assert!(
            events.contains(shown),
            "{shown} in describe's Events: {events}"
        );
    }
    let listed = kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=web",
    ]);
    assert!(listed.contains("ReplicasChanged"), "{listed}");
    assert!(
        listed.lines().skip(1).all(|l| l.contains("deployment/web")),
        "{listed}"
    );
    let v1 = kubectl(&[
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        "regarding.name=web,regarding.kind=Deployment",
        "-o",
        "jsonpath={range .items[*]}{.regarding.name}/{.regarding.uid}/{.reason}{\"\\n\"}{end}",
    ]);
    let uid = kubectl(&["get", "deployment", "web", "-o", "jsonpath={.metadata.uid}"]);
    assert!(!uid.is_empty());
    assert!(
        v1.lines()
            .any(|l| l == format!("web/{uid}/ReplicasChanged")),
        "{v1}"
    );
    let start = Instant::now();
    let watched = loop {
        let watched = std::fs::read_to_string(&watch_out).unwrap();
        if watched.contains("Replicas changed: 1 -> 3") || start.elapsed() > WAIT {
            break watched;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        watched
            .lines()
            .any(|l| l.starts_with("ADDED") && l.contains("Replicas changed: 1 -> 3")),
        "{watched}"
    );
    host.stop();
}
