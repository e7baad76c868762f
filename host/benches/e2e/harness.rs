//! What every phase of the e2e bench needs: child processes, the sim and its request log,
//! plain HTTP to the sim and the controllers, and a process's CPU time and RSS from `/proc`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one wait of the bench may take before it fails.
pub const LIMIT: Duration = Duration::from_secs(900);
/// The namespace of the bench's Deployments.
pub const NAMESPACE: &str = "bench";
/// The User-Agent of the bench's own writes.
pub const BENCH_AGENT: &str = "kubeplug-e2e-bench";

/// A child process killed when dropped.
pub struct Process(pub Child);

impl Process {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A state directory of its own for one kubeplug process (`state-0`, `state-1`, … under
/// `scratch`): its decision ledger, which no other process shares.
pub fn state_dir(scratch: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    scratch.join(format!("state-{n}"))
}

/// The kubeplug binary (the sim and the host).
pub fn kubeplug_bin() -> &'static str {
    env!("CARGO_BIN_EXE_kubeplug")
}

/// A `kubeplug sim` process loaded from a directory of objects.
pub struct Sim {
    pub port: u16,
    pub kubeconfig: PathBuf,
    _process: Process,
}

impl Sim {
    pub fn start(objects: &Path, scratch: &Path) -> Sim {
        Sim::start_serving(objects, scratch, &[])
    }

    /// [`Sim::start`], also serving the kinds of the CRD files `crds` (Plugin and
    /// PluginPolicy, for the tenants phase), whose objects `objects` may then hold.
    pub fn start_serving(objects: &Path, scratch: &Path, crds: &[PathBuf]) -> Sim {
        let port = free_port();
        let kubeconfig = scratch.join(format!("kc-{port}"));
        let mut command = Command::new(kubeplug_bin());
        command
            .args(["sim", "--port", &port.to_string(), "--load"])
            .arg(objects)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--auto-create-namespaces")
            // Every request of the run: the bench counts writes from the log's start.
            .args(["--request-log", "1000000"])
            .env("KUBEPLUG_LOG", "warn")
            .stdout(Stdio::null());
        for crd in crds {
            command.arg("--crd").arg(crd);
        }
        let mut process = Process(command.spawn().unwrap());
        let start = Instant::now();
        while http_get(port, "/version").is_none() || !kubeconfig.exists() {
            assert!(start.elapsed() < LIMIT, "the sim did not start");
            if let Some(status) = process.0.try_wait().unwrap() {
                panic!("the sim exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let sim = Sim {
            port,
            kubeconfig,
            _process: process,
        };
        sim.wait_settled();
        sim
    }

    /// Waits until the sim has settled the status of every loaded Deployment (its simulated
    /// deployment controller writes each one 200 ms after start): controllers start on a
    /// quiet cluster, as on a converged real one. Started at once, their first decisions
    /// raced those status writes, and a fenced patch of a version the status write had just
    /// replaced was refused with 409 (20 of 10,000 at cold start, measured). Settled when the
    /// store's resourceVersion, read through a one-item list, stays unchanged for 500 ms.
    fn wait_settled(&self) {
        let path = format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments?limit=1");
        let version = || {
            let body = http_get(self.port, &path)?;
            let list: Value = serde_json::from_str(&body).ok()?;
            list["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
        };
        let start = Instant::now();
        let mut last = version();
        let mut since = Instant::now();
        while since.elapsed() < Duration::from_millis(500)
            || start.elapsed() < Duration::from_millis(400)
        {
            assert!(start.elapsed() < LIMIT, "the sim's status never settled");
            std::thread::sleep(Duration::from_millis(50));
            let now = version();
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
    }

    /// A reader of the whole request log.
    pub fn log_from_start(&self) -> RequestLog {
        RequestLog {
            port: self.port,
            cursor: 0,
        }
    }
}

/// Reads the sim's request log by sequence number, each record once.
pub struct RequestLog {
    port: u16,
    cursor: u64,
}

impl RequestLog {
    /// The records logged since the last call.
    pub fn next(&mut self) -> Vec<Value> {
        let Some(body) = http_get(self.port, &format!("/sim/requests?since={}", self.cursor))
        else {
            return Vec::new();
        };
        let records: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        for r in &records {
            self.cursor = self.cursor.max(r["seq"].as_u64().unwrap_or(0) + 1);
        }
        records
    }
}

/// Whether a request-log record is the bench's own request (its changes, its reads).
pub fn by_bench(r: &Value) -> bool {
    r["userAgent"] == BENCH_AGENT
}

/// A Deployment patch in the request log: `(name, succeeded, by the bench)`.
pub fn deployment_patch(r: &Value) -> Option<(&str, bool, bool)> {
    (r["verb"] == "patch" && r["resource"] == "deployments").then(|| {
        (
            r["name"].as_str().unwrap_or_default(),
            r["status"].as_u64().is_some_and(|s| s < 300),
            by_bench(r),
        )
    })
}

/// A record's time as the sim logged it (microseconds).
pub fn timestamp(record: &Value) -> Option<k8s_openapi::jiff::Timestamp> {
    record["time"].as_str()?.parse().ok()
}

/// The bench's writer: sets Deployments' container back to `alpine` (so each needs a patch
/// again) over one kept-alive connection, as a client of a real API server would (a new
/// connection per change cost the sim an accept and a task each, measured: 4 writers reached
/// 721 changes/s that way, 16 only 482).
pub struct Unpinner {
    port: u16,
    connection: Option<std::io::BufReader<std::net::TcpStream>>,
}

impl Unpinner {
    pub fn new(port: u16) -> Unpinner {
        Unpinner {
            port,
            connection: None,
        }
    }

    /// Unpins `name`; whether the sim answered 200. A broken connection is opened again once.
    pub fn unpin(&mut self, name: &str) -> bool {
        self.unpin_in(NAMESPACE, name)
    }

    /// Unpins Deployment `name` of namespace `ns` (the tenants phase's, each in its own).
    pub fn unpin_in(&mut self, ns: &str, name: &str) -> bool {
        (0..2).any(|_| match self.send(ns, name) {
            Ok(ok) => ok,
            Err(_) => {
                self.connection = None;
                false
            }
        })
    }

    fn send(&mut self, ns: &str, name: &str) -> std::io::Result<bool> {
        use std::io::{BufRead, Read, Write};
        if self.connection.is_none() {
            let stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_nodelay(true)?;
            self.connection = Some(std::io::BufReader::new(stream));
        }
        let connection = self.connection.as_mut().expect("connected above");
        let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}");
        let body =
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"alpine"}]}}}}"#;
        write!(
            connection.get_mut(),
            "PATCH {path} HTTP/1.1\r\nHost: sim\r\nUser-Agent: {BENCH_AGENT}\r\nContent-Type: application/strategic-merge-patch+json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut status = String::new();
        connection.read_line(&mut status)?;
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut line = String::new();
            if connection.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            chunked |= line == "transfer-encoding: chunked";
        }
        if chunked {
            loop {
                let mut size = String::new();
                connection.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16)
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
                let mut chunk = vec![0; size + 2];
                connection.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
            }
        } else {
            let mut rest = vec![0; length];
            connection.read_exact(&mut rest)?;
        }
        Ok(status.starts_with("HTTP/1.1 200"))
    }
}

/// GET on localhost; the body when the answer is 200. Sent as the bench (`BENCH_AGENT`), so
/// the request log tells its reads (the settle wait's lists) from the controllers'.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: sim\r\nUser-Agent: {BENCH_AGENT}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    // Large bodies come chunked.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            out.push_str(tail.get(..size)?);
            rest = tail.get(size + 2..)?;
        }
        return Some(out);
    }
    Some(body.to_string())
}

/// `method` on localhost with a JSON `body` (`content_type`: `application/json` for a
/// POST, a patch type for a PATCH), sent as the bench; the status code the sim answered.
pub fn http_send(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nUser-Agent: {BENCH_AGENT}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let head = String::from_utf8_lossy(&response[..response.len().min(64)]).to_string();
    head.split_whitespace().nth(1)?.parse().ok()
}

/// The sum of a Prometheus counter's series in a kubeplug `/metrics` page.
pub fn metric_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// utime + stime of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// Resident set size of `pid`, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The value at quantile `p` of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default().as_secs_f64() * 1e3
}
