//! The shipped monitoring against the real thing. A real Prometheus (Debian's `prometheus`
//! package, installed by `make test-deps`) scrapes a running host every second with
//! `host/deploy/prometheus/rules.yaml` loaded; a plugin file is overwritten with bytes that do
//! not load, and `KubeplugPluginFailing` must go pending (or firing) in Prometheus's
//! `/api/v1/alerts`, every shipped rule must evaluate without error against the host's
//! real series, and every query of the Grafana dashboard must be PromQL it accepts. Where Prometheus is absent the test says so and skips, except under
//! `CI=true`, where it fails. Without Prometheus, every metric name the rules and the Grafana
//! dashboard (`host/deploy/grafana/kubeplug.json`) use is checked against what the `/metrics`
//! of running hosts (one leader-elected, one sharded) declare.

use crate::common;

use common::host_process::HostProcess;
use common::plugin;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// `prometheus` on PATH, if any (see [`crate::common::tool`]).
fn prometheus() -> Option<PathBuf> {
    let install = "`make test-deps` installs the Debian package prometheus";
    crate::common::tool("prometheus", &["--version"], install).then(|| "prometheus".into())
}

/// A GET over HTTP/1.0 (no chunked body to undo): status and body, `None` if nothing
/// answers.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A query string value, percent-encoded.
fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// A Prometheus server run for one test, killed when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `binary` scraping `target` every second with the shipped rules evaluated every
    /// second; waits until it is ready.
    fn start(binary: &Path, target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: kubeplug\n    static_configs:\n      - targets: ['{target}']\n",
                deploy("prometheus/rules.yaml").display()
            ),
        )
        .unwrap();
        let addr = crate::common::free_addr();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut prometheus = Prometheus { child, addr, dir };
        let start = Instant::now();
        while get(&prometheus.addr, "/-/ready").map(|r| r.0) != Some(200) {
            assert!(
                matches!(prometheus.child.try_wait(), Ok(None)),
                "prometheus exited: {}",
                prometheus.log()
            );
            assert!(start.elapsed() < WAIT, "never ready: {}", prometheus.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The `data` of a successful API answer.
    fn api(&self, path: &str) -> Value {
        let (status, body) = get(&self.addr, path).unwrap_or_else(|| panic!("{path}: no answer"));
        assert_eq!(status, 200, "{path}: {body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["status"], "success", "{path}: {answer}");
        answer["data"].clone()
    }

    /// The result of an instant query.
    fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(promql)));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Every rule Prometheus loaded.
    fn rules(&self) -> Vec<Value> {
        let data = self.api("/api/v1/rules");
        data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect()
    }

    /// Waits until `done` holds of the answer of `path`; the last answer.
    fn wait_for(&self, what: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let data = self.api(path);
            if done(&data) {
                return data;
            }
            assert!(start.elapsed() < WAIT, "{what} never happened: {data}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A host on the embedded API server with the plugins of `plugins` (plus `args`), serving
/// on a free port: the host and its status address. Its compile cache is the one the tests
/// share in target/ (a cold compile of a plugin by a debug build takes 15-20 s on a loaded
/// machine).
fn start_host(plugins: &Path, args: &[&str]) -> (HostProcess, String) {
    let cache = crate::common::compile_cache();
    let mut all = vec![
        "--listen",
        "127.0.0.1:0",
        "--compile-cache",
        cache.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let mut host = HostProcess::start(plugins, &all);
    assert!(host.saw_within("running; stop with", WAIT), "{}", host.seen);
    let status = host.logged("serving /metrics", "addr=");
    (host, status)
}

fn plugins_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        plugin("change-logger"),
        dir.path().join("change-logger.wasm"),
    )
    .unwrap();
    dir
}

#[test]
fn a_broken_plugin_fires_its_alert_in_a_real_prometheus() {
    let Some(binary) = prometheus() else {
        return;
    };
    let started = Instant::now();
    let plugins = plugins_dir();
    let (host, status) = start_host(plugins.path(), &[]);
    let host_up = started.elapsed();
    let prometheus = Prometheus::start(&binary, &status);
    let prometheus_up = started.elapsed();

    // Scraped, with the plugin's reconciles in it; the alert's own query finds nothing.
    prometheus.wait_for(
        "a scrape with the plugin's reconciles",
        &format!(
            "/api/v1/query?query={}",
            encode(r#"kubeplug_reconcile_total{plugin="change-logger",result="success"}"#)
        ),
        |data| data["result"].as_array().is_some_and(|r| !r.is_empty()),
    );
    let rules = prometheus.rules();
    let failing = rules
        .iter()
        .find(|r| r["name"] == "KubeplugPluginFailing")
        .unwrap_or_else(|| panic!("the shipped rules have no KubeplugPluginFailing: {rules:?}"));
    let expr = failing["query"].as_str().unwrap();
    assert_eq!(prometheus.query(expr), Vec::<Value>::new(), "{expr}");

    // Break it: the file's new content does not load (the last good version keeps running).
    let healthy = started.elapsed();
    std::fs::write(
        plugins.path().join("change-logger.wasm"),
        b"\0asm this is not a component",
    )
    .unwrap();
    let broke = Instant::now();
    let alerts = prometheus.wait_for("KubeplugPluginFailing pending", "/api/v1/alerts", |data| {
        data["alerts"].as_array().unwrap().iter().any(|a| {
            a["labels"]["alertname"] == "KubeplugPluginFailing"
                && matches!(a["state"].as_str(), Some("pending" | "firing"))
        })
    });
    let seen = broke.elapsed();
    let alert = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "KubeplugPluginFailing")
        .unwrap()
        .clone();
    assert!(
        alert["labels"]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("change-logger.wasm")),
        "{alert}"
    );
    assert_eq!(alert["labels"]["severity"], "warning", "{alert}");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("change-logger.wasm")),
        "{alert}"
    );

    // Every shipped rule evaluates against the host's real series without error.
    let rules = prometheus.wait_for("every rule evaluated", "/api/v1/rules", |data| {
        data["groups"].as_array().unwrap().iter().all(|g| {
            g["rules"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["health"] != "unknown")
        })
    });
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
        }
    }
    // Every dashboard query is PromQL Prometheus accepts (with Grafana's variables filled in).
    let mut queries = Vec::new();
    dashboard_exprs(&read_dashboard(), &mut queries);
    let mut answered = 0;
    for expr in queries.iter().filter(|e| !e.contains("label_values")) {
        let promql = expr.replace("$__rate_interval", "1m").replace("$job", ".+");
        answered += usize::from(!prometheus.query(&promql).is_empty());
    }
    assert!(answered > 0, "no dashboard query had data");
    drop(prometheus);
    host.stop();
    println!(
        "host running after {host_up:?}, prometheus ready after {prometheus_up:?}, the \
         plugin's reconciles scraped after {healthy:?}; KubeplugPluginFailing {} {seen:?} \
         after the file broke; {answered} of {} dashboard queries had data; whole test {:?}",
        alert["state"],
        queries.len(),
        started.elapsed()
    );
}

/// Every name a PromQL expression uses for a kubeplug series: tokens starting with
/// `kubeplug_` or `workqueue_` (labels never do); recorded names hold a `:`.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("kubeplug_") || t.starts_with("workqueue_"))
        .map(str::to_string)
        .collect()
}

/// The series names a `/metrics` text declares: each family's samples by its type (a
/// counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`), and every sample seen.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The value of the unlabelled sample `name` in a `/metrics` text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn read_dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(deploy("grafana/kubeplug.json")).unwrap())
        .unwrap()
}

/// Every `expr` (and templating `query`) in a Grafana dashboard.
fn dashboard_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) if s.contains("label_values") => {
                        out.push(s.clone())
                    }
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_rules_and_the_dashboard_use_only_metrics_a_host_exports() {
    // One leader-elected host and one sharded one: each mode exports its own series. A
    // second file that does not load gives the failing gauge a series.
    let plugins = plugins_dir();
    std::fs::write(plugins.path().join("broken.wasm"), b"not wasm").unwrap();
    let (leader, leader_addr) = start_host(
        plugins.path(),
        &["--leader-elect", "--identity", "prom-leader"],
    );
    let (sharded, sharded_addr) =
        start_host(plugins.path(), &["--sharding", "--identity", "prom-shard"]);
    // The leader owns every key it caches; kubeplug_ring_keys counts them all.
    let start = Instant::now();
    let leader_metrics = loop {
        let (status, text) = get(&leader_addr, "/metrics").expect("the host answers");
        assert_eq!(status, 200, "{text}");
        let keys = sample(&text, "kubeplug_ring_keys");
        if sample(&text, "kubeplug_leader") == Some(1.0)
            && keys.is_some_and(|k| k > 0.0)
            && keys == sample(&text, "kubeplug_ring_keys_owned")
        {
            break text;
        }
        assert!(
            start.elapsed() < WAIT,
            "the leader never owned its cached keys:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (status, sharded_metrics) = get(&sharded_addr, "/metrics").expect("the host answers");
    assert_eq!(status, 200, "{sharded_metrics}");
    let mut exported = exported_names(&leader_metrics);
    exported.extend(exported_names(&sharded_metrics));
    for expected in [
        "kubeplug_ring_members",
        "kubeplug_reconcile_duration_seconds_bucket",
        "kubeplug_server_clients_disconnected_total",
    ] {
        assert!(exported.contains(expected), "{expected} in {exported:?}");
    }

    let rules: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(deploy("prometheus/rules.yaml")).unwrap())
            .unwrap();
    let mut recorded = BTreeSet::new();
    let mut rule_exprs = Vec::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            if let Some(name) = rule["record"].as_str() {
                recorded.insert(name.to_string());
            }
            let name = rule["record"].as_str().or(rule["alert"].as_str());
            rule_exprs.push((
                name.unwrap().to_string(),
                rule["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    let mut panel_exprs = Vec::new();
    dashboard_exprs(&read_dashboard(), &mut panel_exprs);
    assert!(panel_exprs.len() >= 15, "{panel_exprs:?}");

    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    let checks = rule_exprs
        .iter()
        .map(|(name, expr)| (format!("rule {name}"), expr.clone(), true))
        .chain(
            panel_exprs
                .iter()
                .map(|e| ("dashboard".to_string(), e.clone(), false)),
        );
    for (what, expr, may_use_recorded) in checks {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{what} uses no kubeplug metric: {expr}");
        for name in names {
            let known = if name.contains(':') {
                may_use_recorded && recorded.contains(&name)
            } else {
                exported.contains(&name)
            };
            if !known {
                unknown.push(format!("{what}: {name} in {expr}"));
            }
            used.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "names no host exports:\n{}\n(exported: {exported:?})",
        unknown.join("\n")
    );
    println!(
        "{} rules and {} dashboard expressions use {} names, all exported or recorded",
        rule_exprs.len(),
        panel_exprs.len(),
        used.len()
    );
    leader.stop();
    sharded.stop();
}
