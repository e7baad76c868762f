//! Several `kubeplug run` processes against one embedded API server: leader election (only
//! the leader writes; `kill -9`, SIGTERM and a leader cut off from the API server hand over
//! in time) and sharding (300 keys split between three replicas, handed over when one dies
//! and comes back, and under a minute of churn, with no key ever reconciled by two replicas
//! at once — checked from the reconcile spans every replica logs); and Plugin objects'
//! status, written by one replica only in either mode.

mod common;

use common::plugin;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeplug_sim::{ErrorFault, HoldFault, Sim};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Result<T = ()> = anyhow::Result<T>;

/// Fast lease timings for the tests (client-go's ratios: renew deadline < lease duration,
/// retry period well below the renew deadline).
const LEASE_S: f64 = 4.0;
const RENEW_S: f64 = 2.5;
const RETRY_S: f64 = 0.5;
const PINNED: &str = "nginx:1.13";
const WAIT: Duration = Duration::from_secs(90);

const POLICY: &str = "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: image-pinner}\nspec:\n  mode: enforce\n  namespaces: {all: true}\n  rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]\n  limits: {writesPerSecond: 1000, writeBurst: 1000}\n  config: {image: \"nginx:1.13\"}\n";

/// The embedded API server, its kubeconfig, and a plugins directory with image-pinner.
struct Cluster {
    sim: Sim,
    client: kube::Client,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(namespace: &str, deployments: usize) -> Result<Cluster> {
        Self::start_with(namespace, deployments, POLICY).await
    }

    /// As [`Cluster::start`], with image-pinner under `policy`.
    async fn start_with(namespace: &str, deployments: usize, policy: &str) -> Result<Cluster> {
        let sim = Sim::builder()
            .auto_create_namespaces(true)
            .request_log_capacity(2_000_000)
            .start()
            .await?;
        let dir = tempfile::tempdir()?;
        sim.write_kubeconfig(dir.path().join("kc"))?;
        std::fs::create_dir(dir.path().join("plugins"))?;
        std::fs::copy(
            plugin("image-pinner"),
            dir.path().join("plugins/image-pinner.wasm"),
        )?;
        std::fs::write(dir.path().join("plugins/image-pinner.policy.yaml"), policy)?;
        let client = sim.client()?;
        let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        for i in 0..deployments {
            let d = common::cluster::deployment(&format!("d{i:03}"), 1, "alpine");
            api.create(&PostParams::default(), &d).await?;
        }
        Ok(Cluster { sim, client, dir })
    }

    fn plugins(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kc")
    }

    fn replica(&self, identity: &str, mode: &str) -> Replica {
        Replica::start(self, identity, mode)
    }

    /// Starts `leader` with `--leader-elect` and waits until it leads, then `follower`, and
    /// waits until it follows and `namespace` has converged.
    async fn leader_and_follower(
        &self,
        namespace: &str,
        leader: &str,
        follower: &str,
    ) -> (Replica, Replica) {
        let leader = self.replica(leader, "--leader-elect");
        leader.wait_for("became the leader", WAIT).await;
        let follower = self.replica(follower, "--leader-elect");
        follower
            .wait_for("coordinating with other replicas", WAIT)
            .await;
        self.converged(namespace, WAIT).await;
        (leader, follower)
    }

    /// Starts two `--sharding` members and waits until each has applied a ring.
    async fn sharded_pair(&self, identities: [&str; 2]) -> [Replica; 2] {
        let members = identities.map(|identity| self.replica(identity, "--sharding"));
        for m in &members {
            m.wait_for("applied a new ring", WAIT).await;
        }
        members
    }

    /// Waits until at least `n` requests are held by the sim's hold fault.
    async fn held(&self, n: u64, log: impl Fn() -> String) {
        let start = Instant::now();
        while self.sim.faults().held() < n {
            assert!(start.elapsed() < WAIT, "{}", log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Deployments of `namespace` not running the pinned image yet.
    fn unpinned(&self, namespace: &str) -> Vec<String> {
        self.sim
            .list("deployments", Some(namespace))
            .iter()
            .filter(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] != PINNED)
            .map(|d| d["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// Waits until every Deployment of `namespace` runs the pinned image; how long it took.
    async fn converged(&self, namespace: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let left = self.unpinned(namespace);
            if left.is_empty() {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "{} Deployments still unpinned after {limit:?}: {:?}",
                left.len(),
                &left[..left.len().min(10)]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sets these Deployments' image back to alpine (each then needs one patch again).
    async fn unpin(&self, namespace: &str, names: &[String]) -> Result {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
        for name in names {
            api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
        }
        Ok(())
    }

    /// Writes to Deployments whose User-Agent names `identity`.
    fn deployment_writes_by(&self, identity: &str) -> usize {
        self.deployment_writes_since(identity, 0).len()
    }

    /// The arrival times (unix µs) of writes to Deployments whose User-Agent names
    /// `identity`, that arrived at or after `since` (unix µs).
    fn deployment_writes_since(&self, identity: &str, since: u64) -> Vec<u64> {
        let agent = format!("({identity})");
        self.sim
            .requests()
            .records()
            .iter()
            .filter(|r| r.resource == "deployments" && r.user_agent.contains(&agent))
            .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
            .map(|r| unix_us(&r.time))
            .filter(|t| *t >= since)
            .collect()
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Rewrites the Lease `name` as a foreign client would.
    async fn tamper(&self, name: &str, edit: impl FnOnce(&mut Lease)) -> Result {
        let mut lease = self.leases().get(name).await?;
        edit(&mut lease);
        self.leases()
            .replace(name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}

/// One `kubeplug run` process; its JSON log lines collected as they come.
struct Replica {
    identity: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    fn start(cluster: &Cluster, identity: &str, mode: &str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
            .args(["--log-json", "run", "--watch=false", "--kubeconfig"])
            .arg(cluster.kubeconfig())
            .arg("--plugins")
            .arg(cluster.plugins())
            .args([mode, "--identity", identity, "--lease-namespace", "default"])
            .args(["--lease-duration-seconds", &LEASE_S.to_string()])
            .args(["--renew-deadline-seconds", &RENEW_S.to_string()])
            .args(["--retry-period-seconds", &RETRY_S.to_string()])
            .args(["--shutdown-timeout", "5", "--listen", "127.0.0.1:0"])
            .env("KUBEPLUG_CACHE_DIR", cluster.dir.path().join("cache"))
            .env("KUBEPLUG_LOG", "info,kubeplug::coordination=debug")
            .env_remove("KUBECONFIG")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let lines = lines.clone();
            move || {
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(std::io::Result::ok)
                {
                    lines.lock().unwrap().push(line);
                }
            }
        });
        Replica {
            identity: identity.to_string(),
            child,
            lines,
        }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The wall time (unix µs) of the first log line holding `needle`, if any.
    fn logged_at(&self, needle: &str) -> Option<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|v| v["timestamp"].as_str().map(unix_us))
    }

    /// The wall time (unix µs) of the first log line holding `needle` logged after `since`.
    fn logged_after(&self, needle: &str, since: u64) -> Option<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["timestamp"].as_str().map(unix_us))
            .find(|t| *t > since)
    }

    /// Waits until a line holding `needle` is logged after `since`; when it was.
    async fn wait_for_after(&self, needle: &str, since: u64, limit: Duration) -> u64 {
        let start = Instant::now();
        loop {
            if let Some(at) = self.logged_after(needle, since) {
                return at;
            }
            assert!(
                start.elapsed() < limit,
                "{}: no {needle:?} after {since} within {limit:?}:\n{}",
                self.identity,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until a log line holds `needle`; the time it took.
    async fn wait_for(&self, needle: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        while self.logged_at(needle).is_none() {
            assert!(
                start.elapsed() < limit,
                "{}: no {needle:?} within {limit:?}:\n{}",
                self.identity,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        start.elapsed()
    }

    /// GET `path` from its status server: status and body.
    async fn get(&self, path: &str) -> (u16, String) {
        self.wait_for("serving /metrics", WAIT).await;
        let addr = self
            .lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|v| v["fields"]["addr"].as_str().map(str::to_string))
            .expect("the status server's address");
        let path = path.to_string();
        tokio::task::spawn_blocking(move || common::http(&addr, "GET", &path, &[], ""))
            .await
            .unwrap()
    }

    /// A metric's value from `/metrics`.
    async fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find(|l| l.split(' ').next() == Some(name))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|v| v.parse().ok())
    }

    /// Every reconcile this process ran: (key, start µs, end µs).
    fn spans(&self) -> Vec<Span> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("reconcile span"))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| Span {
                replica: self.identity.clone(),
                key: v["fields"]["key"].as_str().unwrap_or_default().to_string(),
                start: v["fields"]["start_us"].as_u64().unwrap_or_default(),
                end: v["fields"]["end_us"].as_u64().unwrap_or_default(),
            })
            .collect()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn sigterm(&self) {
        self.signal("-TERM");
    }

    /// Pauses the process (SIGSTOP): it does nothing, renews nothing, until [`Self::thaw`].
    fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Wakes a frozen process (SIGCONT).
    fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Sends `kill SIGNAL`.
    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Waits for the process to exit; whether it exited 0.
    async fn exited(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(start.elapsed() < limit, "{} did not exit", self.identity);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One reconcile of one key on one replica (wall-clock µs; every process shares the clock).
#[derive(Debug, Clone)]
struct Span {
    replica: String,
    key: String,
    start: u64,
    end: u64,
}

fn unix_us(rfc3339: &str) -> u64 {
    rfc3339
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| t.as_microsecond() as u64)
        .unwrap_or_default()
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Asserts that no key's reconciles on two replicas overlap in time; returns the spans.
fn assert_no_overlap(spans: &[Span]) {
    let mut by_key: HashMap<&str, Vec<&Span>> = HashMap::new();
    for s in spans {
        by_key.entry(&s.key).or_default().push(s);
    }
    for (key, mut list) in by_key {
        list.sort_by_key(|s| s.start);
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                a.replica == b.replica || a.end <= b.start,
                "{key}: {} reconciled it {}..{} while {} did {}..{}",
                a.replica,
                a.start,
                a.end,
                b.replica,
                b.start,
                b.end
            );
        }
    }
}

/// Asserts that leadership moved without overlap: no reconcile of `old` ended after `new`
/// logged that it became the leader at `took_over` (unix µs). Stricter than
/// [`assert_no_overlap`], which only sees two replicas on one key at once.
fn assert_stopped_before(old: &Replica, new: &str, took_over: u64) {
    let late: Vec<Span> = old
        .spans()
        .into_iter()
        .filter(|s| s.end > took_over)
        .collect();
    assert!(
        late.is_empty(),
        "{} still reconciled after {new} became the leader at {took_over}: {late:?}",
        old.identity
    );
}

/// The names `Cluster::start` gives its first `n` Deployments.
fn deployment_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("d{i:03}")).collect()
}

fn lease_secs() -> Duration {
    Duration::from_secs_f64(LEASE_S)
}

fn retry() -> Duration {
    Duration::from_secs_f64(RETRY_S)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_killed_leader_is_replaced_in_time() -> Result {
    let cluster = Cluster::start("ha", 20).await?;
    let (mut r1, r2) = cluster.leader_and_follower("ha", "r1", "r2").await;
    // The follower's caches are warm, and it wrote nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(cluster.deployment_writes_by("r1") >= 20);
    assert_eq!(cluster.deployment_writes_by("r2"), 0, "{}", r2.log());
    assert!(
        r2.spans().is_empty(),
        "the follower reconciled: {:?}",
        r2.spans()
    );
    assert!(r2.logged_at("became the leader").is_none());
    // Both are ready (warm caches); each says whether it leads.
    let (status, body) = r1.get("/readyz").await;
    assert_eq!((status, body.trim()), (200, "ready: leader (r1)"));
    let (status, body) = r2.get("/readyz").await;
    assert_eq!(
        (status, body.trim()),
        (200, "ready: follower (r2; leader r1)")
    );
    let plugins: Value = serde_json::from_str(&r2.get("/plugins").await.1)?;
    assert_eq!(plugins["coordination"]["leading"], false, "{plugins}");
    assert_eq!(plugins["coordination"]["leader"], "r1", "{plugins}");
    assert_eq!(
        plugins["coordination"]["lease"], "default/kubeplug",
        "{plugins}"
    );
    assert_eq!(r1.metric("kubeplug_leader").await, Some(1.0));
    assert_eq!(r2.metric("kubeplug_leader").await, Some(0.0));

    // kill -9: no release; r2 waits out the lease, then reconciles a change made meanwhile.
    r1.kill();
    let killed = Instant::now();
    cluster.unpin("ha", &["d007".to_string()]).await?;
    let takeover = r2.wait_for("became the leader", WAIT).await;
    cluster.converged("ha", WAIT).await;
    let fixed = killed.elapsed();
    let limit = lease_secs() + retry() + Duration::from_secs(2);
    eprintln!(
        "kill -9: takeover after {takeover:?}; the change made meanwhile reconciled {fixed:?} after the kill"
    );
    assert!(
        takeover <= limit,
        "takeover took {takeover:?} (lease duration + retry period: {:?})",
        lease_secs() + retry()
    );
    assert!(cluster.deployment_writes_by("r2") >= 1);
    assert!(r2.log().contains("keys changed hands"));
    assert_no_overlap(&[r1.spans(), r2.spans()].concat());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_leader_releases_the_lease_and_the_follower_takes_over_promptly() -> Result {
    let cluster = Cluster::start("ha", 5).await?;
    let (mut r1, r2) = cluster.leader_and_follower("ha", "t1", "t2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    r1.sigterm();
    let sent = now_us();
    assert!(r1.exited(Duration::from_secs(20)).await, "{}", r1.log());
    assert!(r1.log().contains("released the lease"), "{}", r1.log());
    r2.wait_for("became the leader", WAIT).await;
    let took = Duration::from_micros(r2.logged_at("became the leader").unwrap() - sent);
    eprintln!("SIGTERM: takeover {took:?} after the signal");
    assert!(
        took <= retry() + Duration::from_secs(2),
        "takeover took {took:?}, retry period {:?}",
        retry()
    );
    // Released, not expired: far sooner than the lease duration.
    assert!(took < lease_secs(), "{took:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_within_the_renew_deadline() -> Result {
    let cluster = Cluster::start("ha", 5).await?;
    let (r1, r2) = cluster.leader_and_follower("ha", "c1", "c2").await;
    // Every request of c1 now fails (as if its network to the API server were down).
    cluster
        .sim
        .faults()
        .inject_errors(ErrorFault::every_nth(503, 1).user_agents(["(c1)"]));
    let cut = now_us();
    r1.wait_for("within the renew deadline", WAIT).await;
    let stopped = r1.logged_at("within the renew deadline").unwrap();
    let took = Duration::from_micros(stopped - cut);
    eprintln!("renew failure: the leader stopped {took:?} after the cut");
    assert!(
        took <= Duration::from_secs_f64(RENEW_S + RETRY_S) + Duration::from_secs(1),
        "{took:?}"
    );
    // The other replica takes over only after the old leader stopped: never two leaders.
    r2.wait_for("became the leader", WAIT).await;
    let took_over = r2.logged_at("became the leader").unwrap();
    assert!(
        took_over > stopped,
        "c2 led at {took_over}, c1 stopped at {stopped}"
    );
    cluster.unpin("ha", &["d001".to_string()]).await?;
    cluster.converged("ha", WAIT).await;
    assert_stopped_before(&r1, "c2", took_over);
    assert_no_overlap(&[r1.spans(), r2.spans()].concat());
    Ok(())
}

/// How many keys each replica reconciled among spans that started after `since`.
fn split(spans: &[Span], since: u64) -> BTreeMap<String, usize> {
    let mut keys: HashMap<&str, &str> = HashMap::new();
    let mut counts = BTreeMap::new();
    for s in spans.iter().filter(|s| s.start >= since) {
        if keys.insert(&s.key, &s.replica).is_none() {
            *counts.entry(s.replica.clone()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_split_300_keys_hand_them_over_and_never_overlap() -> Result {
    let cluster = Cluster::start("shard", 300).await?;
    let start = now_us();
    let mut replicas = vec![
        cluster.replica("s1", "--sharding"),
        cluster.replica("s2", "--sharding"),
        cluster.replica("s3", "--sharding"),
    ];
    cluster.converged("shard", WAIT).await;
    let all = deployment_names(300);
    // Once the ring settled, each key belongs to exactly one replica: unpin everything and
    // see who reconciles what.
    for r in &replicas {
        r.wait_for("reconcile span", WAIT).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = now_us();
    cluster.unpin("shard", &all).await?;
    cluster.converged("shard", WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spans: Vec<Span> = replicas.iter().flat_map(Replica::spans).collect();
    let counts = split(&spans, settled);
    eprintln!("300 keys split {counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 300, "{counts:?}");
    for (replica, n) in &counts {
        assert!((50..=150).contains(n), "{replica} reconciled {n} of 300");
    }
    // Each shows the settled ring of three and counts the keys it owns.
    for r in &replicas {
        let plugins: Value = serde_json::from_str(&r.get("/plugins").await.1)?;
        let ring = &plugins["coordination"]["ring"];
        assert_eq!(ring["members"], json!(["s1", "s2", "s3"]), "{plugins}");
        assert_eq!(ring["settled"], true, "{plugins}");
        assert_eq!(r.metric("kubeplug_ring_members").await, Some(3.0));
    }
    // The owned-keys gauge is counted at each ring change and recounted every 5 s (keys come
    // with the caches, after the ring may have settled): within a recount it adds up. Each
    // replica caches all 300 (`kubeplug_ring_keys`): nothing is unowned.
    let deadline = Instant::now() + Duration::from_secs(15);
    let (owned, cached) = loop {
        let (mut owned, mut cached) = (0.0, Vec::new());
        for r in &replicas {
            owned += r.metric("kubeplug_ring_keys_owned").await.unwrap_or(0.0);
            cached.push(r.metric("kubeplug_ring_keys").await);
        }
        let done = owned == 300.0 && cached.iter().all(|c| *c == Some(300.0));
        if done || Instant::now() > deadline {
            break (owned, cached);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(owned, 300.0, "keys owned over the three replicas");
    assert_eq!(cached, vec![Some(300.0); 3], "keys each replica caches");
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for s in spans.iter().filter(|s| s.start >= settled) {
        let first = owner.entry(&s.key).or_insert(&s.replica);
        assert_eq!(*first, s.replica, "{} reconciled by two replicas", s.key);
    }

    // kill -9 s3: its keys are reconciled by the others once its lease expires.
    let s3_keys: Vec<String> = owner
        .iter()
        .filter(|(_, r)| **r == "s3")
        .map(|(k, _)| k.trim_start_matches("shard/").to_string())
        .collect();
    let mut dead = replicas.pop().unwrap();
    dead.kill();
    cluster.unpin("shard", &s3_keys).await?;
    let took = cluster.converged("shard", WAIT).await;
    eprintln!(
        "kill -9 of s3: its {} keys reconciled by the others after {took:?}",
        s3_keys.len()
    );
    assert!(took <= lease_secs() + Duration::from_secs(5), "{took:?}");

    // s3 comes back: keys come back to it.
    let back = cluster.replica("s3", "--sharding");
    back.wait_for("reconcile span", WAIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rejoined = now_us();
    cluster.unpin("shard", &all).await?;
    cluster.converged("shard", WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut spans: Vec<Span> = replicas.iter().flat_map(Replica::spans).collect();
    spans.extend(back.spans());
    spans.extend(dead.spans());
    let counts = split(&spans, rejoined);
    eprintln!("after s3 came back: {counts:?}");
    assert!(counts.get("s3").copied().unwrap_or(0) >= 50, "{counts:?}");
    assert!(spans.iter().all(|s| s.start >= start));
    assert_no_overlap(&spans);
    Ok(())
}

/// Random numbers for the churn test, seeded so a failure can be replayed.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_of_replicas_killed_and_restarted_converges_without_overlap() -> Result {
    let cluster = Cluster::start("churn", 100).await?;
    let names = ["k1", "k2", "k3"];
    let mut running: Vec<Option<Replica>> = names
        .iter()
        .map(|n| Some(cluster.replica(n, "--sharding")))
        .collect();
    let mut finished: Vec<Replica> = Vec::new();
    cluster.converged("churn", WAIT).await;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let until = Instant::now() + Duration::from_secs(60);
    let all = deployment_names(100);
    while Instant::now() < until {
        // Change a few Deployments...
        let changed: Vec<String> = (0..5)
            .map(|_| all[(next(&mut seed) % 100) as usize].clone())
            .collect();
        cluster.unpin("churn", &changed).await?;
        // ...and kill (-9 or TERM) or restart one replica, keeping at least one running.
        let i = (next(&mut seed) % 3) as usize;
        match running[i].take() {
            Some(mut r) if running.iter().any(Option::is_some) => {
                if next(&mut seed).is_multiple_of(2) {
                    r.kill();
                } else {
                    r.sigterm();
                    let _ = r.exited(Duration::from_secs(20)).await;
                }
                finished.push(r);
            }
            Some(r) => running[i] = Some(r),
            None => running[i] = Some(cluster.replica(names[i], "--sharding")),
        }
        tokio::time::sleep(Duration::from_millis(1000 + next(&mut seed) % 3000)).await;
    }
    for (i, slot) in running.iter_mut().enumerate() {
        if slot.is_none() {
            *slot = Some(cluster.replica(names[i], "--sharding"));
        }
    }
    cluster.unpin("churn", &all[..10]).await?;
    cluster.converged("churn", WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spans: Vec<Span> = running
        .iter()
        .flatten()
        .chain(finished.iter())
        .flat_map(Replica::spans)
        .collect();
    eprintln!(
        "churn: {} reconciles by {} processes",
        spans.len(),
        running.iter().flatten().count() + finished.len()
    );
    assert!(spans.len() >= 100);
    assert_no_overlap(&spans);
    Ok(())
}

/// A write budget of two writes a second: writes queue in the budget, so a paused leader
/// has writes waiting when it wakes.
const SLOW_POLICY: &str = "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: image-pinner}\nspec:\n  mode: enforce\n  namespaces: {all: true}\n  rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image]\n  limits: {writesPerSecond: 2, writeBurst: 1}\n  config: {image: \"nginx:1.13\"}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_sends_nothing_after_waking() -> Result {
    let cluster = Cluster::start_with("pause", 3, SLOW_POLICY).await?;
    let (p1, p2) = cluster.leader_and_follower("pause", "p1", "p2").await;
    // Thirty changes: at two writes a second, p1's workers wait in the write budget.
    let names = deployment_names(3);
    for round in 0..10 {
        let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), "pause");
        let d = common::cluster::deployment(&format!("e{round:03}"), 1, "alpine");
        api.create(&PostParams::default(), &d).await?;
    }
    cluster.unpin("pause", &names).await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    p1.freeze();
    // p2 takes over once p1's lease expired, then p1 wakes with writes waiting.
    p2.wait_for("became the leader", WAIT).await;
    let took_over = p2.logged_at("became the leader").unwrap();
    p1.thaw();
    cluster.converged("pause", WAIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late = cluster.deployment_writes_since("p1", took_over);
    assert!(
        late.is_empty(),
        "p1 wrote {} times after p2 led at {took_over}: {late:?}\n{}",
        late.len(),
        p1.log()
    );
    // Its calls in flight when it was paused end after it wakes (their spans overlap p2's
    // time), but what they decided was never sent.
    assert!(p1.log().contains("no longer holds the key"), "{}", p1.log());
    assert!(cluster.deployment_writes_by("p2") >= 1);
    Ok(())
}

/// Leader election under foreign writes to the Lease: each case moves leadership without
/// two replicas acting at once, and work resumes within a lease duration or so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_writes_to_the_leader_lease_never_make_two_leaders() -> Result {
    type Edit = Box<dyn FnOnce(&mut Lease) + Send>;
    let cases: Vec<(&str, Option<Edit>)> = vec![
        (
            "holder set to the follower",
            Some(Box::new(|l: &mut Lease| {
                l.spec.as_mut().unwrap().holder_identity = Some("f2".into())
            })),
        ),
        ("deleted", None),
        (
            "a foreign holder asking for 68 years",
            Some(Box::new(|l: &mut Lease| {
                let spec = l.spec.as_mut().unwrap();
                spec.holder_identity = Some("mallory".into());
                spec.lease_duration_seconds = Some(i32::MAX);
            })),
        ),
    ];
    for (case, edit) in cases {
        let cluster = Cluster::start("lease", 10).await?;
        let (f1, f2) = cluster.leader_and_follower("lease", "f1", "f2").await;
        let all = deployment_names(10);
        let written = now_us();
        match edit {
            Some(edit) => cluster.tamper("kubeplug", edit).await?,
            None => {
                cluster
                    .leases()
                    .delete("kubeplug", &DeleteParams::default())
                    .await?;
            }
        }
        // Changes keep coming while leadership is contested.
        for _ in 0..6 {
            cluster.unpin("lease", &all).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let start = Instant::now();
        let leader = loop {
            let f1_led = f1.log().matches("became the leader").count() > 1;
            if f2.logged_at("became the leader").is_some() {
                break ("f2", f2.logged_at("became the leader").unwrap());
            }
            if f1_led {
                let again = f1
                    .lines
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|l| l.contains("became the leader"))
                    .nth(1)
                    .and_then(|l| serde_json::from_str::<Value>(l).ok())
                    .and_then(|v| v["timestamp"].as_str().map(unix_us))
                    .unwrap();
                break ("f1", again);
            }
            assert!(start.elapsed() < WAIT, "{case}: nobody led again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        cluster.converged("lease", WAIT).await;
        let took = Duration::from_micros(leader.1.saturating_sub(written));
        eprintln!("{case}: {} led again {took:?} after the write", leader.0);
        // f1 stopped at its next attempt; whoever leads next waited out the lease (the
        // configured duration, whatever the Lease said).
        assert!(
            f1.log().contains("stopped reconciling"),
            "{case}: {}",
            f1.log()
        );
        assert!(took >= lease_secs() - retry(), "{case}: {took:?}");
        assert!(
            took <= lease_secs() + retry() * 2 + Duration::from_secs(2),
            "{case}: {took:?}"
        );
        let stopped = f1.logged_at("stopped reconciling").unwrap();
        assert!(stopped <= leader.1, "{case}: f1 stopped at {stopped}");
        if leader.0 == "f2" {
            assert_stopped_before(&f1, "f2", leader.1);
        }
        assert_no_overlap(&[f1.spans(), f2.spans()].concat());
    }
    Ok(())
}

/// Sharding under foreign writes to a member Lease (deleted, unlabelled, holder rewritten)
/// and a fake member that never renews: no key is ever reconciled by two replicas at once,
/// and the fake member's keys come back within the configured duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_writes_to_member_leases_never_overlap_and_fakes_expire() -> Result {
    let cluster = Cluster::start("ring", 60).await?;
    let members = cluster.sharded_pair(["m1", "m2"]).await;
    cluster.converged("ring", WAIT).await;
    let all = deployment_names(60);
    let churn = |cluster: &Cluster| {
        let all = all.clone();
        let client = cluster.client.clone();
        async move {
            let api: Api<Deployment> = Api::namespaced(client, "ring");
            let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "alpine"}]}}}});
            for _ in 0..8 {
                for name in &all {
                    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await?;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            anyhow::Ok(())
        }
    };
    cluster
        .leases()
        .delete("kubeplug-m2", &DeleteParams::default())
        .await?;
    churn(&cluster).await?;
    cluster
        .tamper("kubeplug-m2", |l| {
            l.metadata.labels = None;
        })
        .await?;
    churn(&cluster).await?;
    cluster
        .tamper("kubeplug-m2", |l| {
            l.spec.as_mut().unwrap().holder_identity = Some("mallory".into());
        })
        .await?;
    churn(&cluster).await?;
    cluster.converged("ring", WAIT).await;
    let spans: Vec<Span> = members.iter().flat_map(Replica::spans).collect();
    assert_no_overlap(&spans);

    // A fake member asking for 68 years, never renewed: its keys come back to m1 and m2
    // once the configured lease duration has passed.
    let fake: Lease = serde_json::from_value(json!({
        "metadata": {"name": "kubeplug-fake", "labels": {"kubeplug.dev/ring": "kubeplug"}},
        "spec": {"holderIdentity": "fake", "leaseDurationSeconds": i32::MAX}
    }))?;
    cluster
        .leases()
        .create(&PostParams::default(), &fake)
        .await?;
    for m in &members {
        m.wait_for("lease duration out of range", WAIT).await;
    }
    let added = Instant::now();
    cluster.unpin("ring", &all).await?;
    let took = cluster.converged("ring", WAIT).await;
    eprintln!(
        "fake member: its keys reconciled {:?} after it appeared",
        added.elapsed()
    );
    assert!(
        took <= lease_secs() + retry() * 4 + Duration::from_secs(3),
        "{took:?}"
    );
    let spans: Vec<Span> = members.iter().flat_map(Replica::spans).collect();
    assert_no_overlap(&spans);
    Ok(())
}

/// A sharded member paused past its renew deadline but within its lease, while the API
/// server is slow: when it wakes, every key it owns is queued again, so changes made while
/// it was closed are not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_paused_past_its_renew_deadline_loses_no_key() -> Result {
    let cluster = Cluster::start("stall", 40).await?;
    let members = cluster.sharded_pair(["n1", "n2"]).await;
    cluster.converged("stall", WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all = deployment_names(40);
    // Paused 3 s: past the renew deadline (2.5 s), within the lease (4 s). The changes
    // made meanwhile wait in its watch; it wakes to a slow API server, so its workers see
    // them before it could renew.
    members[0].freeze();
    let paused = Instant::now();
    cluster.unpin("stall", &all).await?;
    cluster.sim.faults().set_latency(Duration::from_millis(150));
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(paused.elapsed())).await;
    members[0].thaw();
    let took = cluster.converged("stall", WAIT).await;
    eprintln!("paused member: converged {took:?} after waking");
    assert!(took <= Duration::from_secs(20), "{took:?}");
    let spans: Vec<Span> = members.iter().flat_map(Replica::spans).collect();
    assert_no_overlap(&spans);
    Ok(())
}

/// Issue 36: a sharded member frozen past its lease while its writes wait for the budget;
/// the other member takes its keys over. When it wakes, it renews its own Lease at once,
/// but its reads of the ring are held back by the API server: until it has read the new
/// ring it must neither start a reconcile nor send a write on the keys it owned before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_frozen_past_its_lease_acts_on_no_key_until_it_read_the_new_ring() -> Result {
    let cluster = Cluster::start_with("frozen", 20, SLOW_POLICY).await?;
    let members = cluster.sharded_pair(["z1", "z2"]).await;
    cluster.converged("frozen", WAIT).await;
    let all = deployment_names(20);
    // Changes for both: at two writes a second, z1's writes wait in its budget.
    cluster.unpin("frozen", &all).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    members[0].freeze();
    let stopped = now_us();
    let took_over = members[1]
        .wait_for_after("applied a new ring", stopped, WAIT)
        .await;
    // More changes while z1 is frozen (its watch delivers them when it wakes), and its
    // reads of the member Leases are held: it wakes, renews, and cannot see the new ring.
    cluster.unpin("frozen", &all).await?;
    cluster.sim.faults().hold(HoldFault {
        verbs: vec!["list".into()],
        resources: vec!["leases".into()],
        user_agents: vec!["(z1)".into()],
    });
    members[0].thaw();
    let woke = now_us();
    // Two reads held: z1 renewed and went round its loop at least once since it woke.
    cluster.held(2, || members[0].log()).await;
    let released = now_us();
    cluster.sim.faults().release();
    let late = cluster
        .deployment_writes_since("z1", took_over)
        .into_iter()
        .filter(|t| *t < released)
        .collect::<Vec<_>>();
    assert!(
        late.is_empty(),
        "z1 wrote {} times after z2 took its keys at {took_over}: {late:?}\n{}",
        late.len(),
        members[0].log()
    );
    let started: Vec<Span> = members[0]
        .spans()
        .into_iter()
        .filter(|s| s.start > woke && s.start < released)
        .collect();
    assert!(
        started.is_empty(),
        "z1 started reconciles before it read the new ring: {started:?}"
    );
    // It knew its lease had lapsed: frozen between renewals, the first renewal after waking
    // finds the old one expired; frozen during a renewal, that renewal times out and the
    // member gives its ring up at once. Either way it drops the ring it held.
    let log = members[0].log();
    assert!(
        log.contains("rejoining the ring")
            || log.contains("could not renew the member lease within the renew deadline"),
        "{log}"
    );
    // Once it reads the ring it rejoins, and every change is reconciled.
    cluster.converged("frozen", WAIT).await;
    Ok(())
}

/// A cluster serving the Plugin and PluginPolicy CRDs, with a tenant policy for `team-a`, the
/// image-pinner module in a ConfigMap there, and `plugins` Plugin objects using it.
async fn tenant_cluster(plugins: usize) -> Result<Cluster> {
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    let sim = Sim::builder()
        .auto_create_namespaces(true)
        .request_log_capacity(200_000)
        .crd_file(crds.join("plugins.yaml"))
        .crd_file(crds.join("pluginpolicies.yaml"))
        .start()
        .await?;
    let dir = tempfile::tempdir()?;
    sim.write_kubeconfig(dir.path().join("kc"))?;
    std::fs::create_dir(dir.path().join("plugins"))?;
    let client = sim.client()?;
    let policies: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &kubeplug::plugin_objects::policy_resource());
    let policy = json!({"apiVersion": "kubeplug.dev/v1alpha1", "kind": "PluginPolicy",
        "metadata": {"name": "tenants"},
        "spec": {"mode": "enforce", "appliesTo": {"names": ["team-a"]},
            "rules": [{"apiVersion": "apps/v1", "kind": "Deployment", "verbs": ["patch"],
                "fields": ["/spec/template/spec/containers/*/name",
                    "/spec/template/spec/containers/*/image"]}]}});
    policies
        .create(&PostParams::default(), &serde_json::from_value(policy)?)
        .await?;
    let wasm = std::fs::read(plugin("image-pinner"))?;
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("pinner".into()),
            namespace: Some("team-a".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "plugin.wasm".to_string(),
            k8s_openapi::ByteString(wasm),
        )])),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "team-a")
        .create(&PostParams::default(), &cm)
        .await?;
    let objects: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "team-a",
        &kubeplug::plugin_objects::plugin_resource(),
    );
    for i in 0..plugins {
        let p = json!({"apiVersion": "kubeplug.dev/v1alpha1", "kind": "Plugin",
            "metadata": {"name": format!("pinner-{i}"), "namespace": "team-a"},
            "spec": {"module": {"configMap": {"name": "pinner"}},
                "config": {"image": PINNED},
                "permissions": {"rules": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "verbs": ["patch"], "fields": ["/spec/template/spec/containers/*/image"]}]}}});
        objects
            .create(&PostParams::default(), &serde_json::from_value(p)?)
            .await?;
    }
    Ok(Cluster { sim, client, dir })
}

impl Cluster {
    /// Who wrote each Plugin's status (by the identity in the User-Agent), and how often.
    fn status_writers(&self, since: u64) -> BTreeMap<String, BTreeMap<String, usize>> {
        let mut writers: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for r in self
            .sim
            .requests()
            .records()
            .iter()
            .filter(|r| r.seq > since)
        {
            if r.resource != "plugins" || r.subresource.as_deref() != Some("status") {
                continue;
            }
            if !matches!(r.verb.as_str(), "patch" | "update") {
                continue;
            }
            let who = r
                .user_agent
                .rsplit_once('(')
                .map(|(_, w)| w.trim_end_matches(')').to_string())
                .unwrap_or_default();
            *writers
                .entry(r.name.clone().unwrap_or_default())
                .or_default()
                .entry(who)
                .or_default() += 1;
        }
        writers
    }

    /// Whether every Plugin of team-a reads Ready=True, written by a replica whose runner
    /// text holds `runner`.
    fn plugins_ready(&self, runner: &str) -> bool {
        let all = self.sim.list("plugins.kubeplug.dev", Some("team-a"));
        !all.is_empty()
            && all.iter().all(|p| {
                p["status"]["runner"]
                    .as_str()
                    .is_some_and(|r| r.contains(runner))
                    && p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
    }

    /// The `Loaded` Events about Plugin `name`.
    fn loaded_events(&self, name: &str) -> usize {
        self.sim
            .list("events", Some("team-a"))
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == "Loaded")
            .count()
    }
}

/// Both replicas run every Plugin object; each Plugin's status and Events come from one of
/// them at a time (the leader, or the shard owning the object), so they never fight over it.
/// With sharding a Plugin may change hands while the ring forms (the first replica owns
/// everything until the second joins): then its new owner writes it once more.
async fn plugin_status_has_one_writer(mode: &str) -> Result {
    let cluster = tenant_cluster(4).await?;
    let r1 = cluster.replica(&format!("{}1", &mode[2..4]), mode);
    let r2 = cluster.replica(&format!("{}2", &mode[2..4]), mode);
    // Settled: every status written under the final ring (or by the leader).
    let runner = match mode {
        "--leader-elect" => "(leader)",
        _ => "2 shards",
    };
    let start = Instant::now();
    while !cluster.plugins_ready(runner) {
        assert!(
            start.elapsed() < WAIT,
            "Plugins not Ready: {:#?}\n{}\n{}",
            cluster.sim.list("plugins.kubeplug.dev", Some("team-a")),
            r1.log(),
            r2.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled = cluster.sim.requests().records().last().map_or(0, |r| r.seq);
    // Several more passes of both replicas (each resyncs): nobody rewrites what stands.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = cluster.status_writers(settled);
    assert!(
        after
            .values()
            .all(|by| by.len() <= 1 && by.values().sum::<usize>() <= 1),
        "status rewritten once settled: {after:?}"
    );
    let writers = cluster.status_writers(0);
    assert_eq!(writers.len(), 4, "{writers:?}");
    let most = match mode {
        "--leader-elect" => 1,
        _ => 2,
    };
    for (plugin, by) in &writers {
        assert!(by.len() <= most, "{plugin}: status written by {by:?}");
        let writes: usize = by.values().sum();
        assert!(writes <= 4, "{plugin}: {writes} status writes: {by:?}");
        let loaded = cluster.loaded_events(plugin);
        assert!(
            (1..=by.len()).contains(&loaded),
            "{plugin}: {loaded} Loaded Events"
        );
    }
    if mode == "--leader-elect" {
        let all: std::collections::BTreeSet<&String> =
            writers.values().flat_map(|by| by.keys()).collect();
        assert_eq!(all.len(), 1, "one leader writes every status: {writers:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_objects_status_is_written_by_the_leader_only() -> Result {
    plugin_status_has_one_writer("--leader-elect").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_objects_status_is_written_by_the_owning_shard_only() -> Result {
    plugin_status_has_one_writer("--sharding").await
}
