//! The harness of the controller-level end-to-end tests: log capture (per test), plugin
//! loading, a fast queue configuration and the embedded API server with a few builders.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kubeplug::controller::ControllerConfig;
use kubeplug::plugin::{Plugin, PluginRuntime, RuntimeConfig};
use kubeplug::queue::{QueueConfig, RateLimitConfig};
use kubeplug_sim::Sim;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub type Result<T = ()> = anyhow::Result<T>;

/// Log lines written through tracing, kept apart by the tokio runtime that wrote them.
///
/// Every `#[tokio::test]` builds a runtime of its own, and everything its controller does
/// runs on that runtime: the test's own code (inside `block_on`), the tasks it spawns, and the
/// blocking calls into plugins (the runtime's blocking threads are inside it too). So a test
/// reads the lines of its own controller only ([`log_lines_with`]), even while the other
/// tests of this binary write theirs: counts and absences stay the test's own.
type LogsByRuntime = Mutex<HashMap<Option<tokio::runtime::Id>, Vec<u8>>>;

fn logs_by_runtime() -> &'static LogsByRuntime {
    static LOGS: OnceLock<LogsByRuntime> = OnceLock::new();
    LOGS.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(|| RuntimeLog(current_runtime()))
            .try_init();
        Mutex::new(HashMap::new())
    })
}

fn current_runtime() -> Option<tokio::runtime::Id> {
    tokio::runtime::Handle::try_current().ok().map(|h| h.id())
}

/// Installs the log capture (once per process) that [`log_lines_with`] reads.
pub fn capture_logs() {
    logs_by_runtime();
}

/// A log writer into the lines of one runtime (`None`: written outside any).
struct RuntimeLog(Option<tokio::runtime::Id>);

impl std::io::Write for RuntimeLog {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        logs_by_runtime()
            .lock()
            .unwrap()
            .entry(self.0)
            .or_default()
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A log writer into shared bytes.
#[derive(Clone, Default)]
pub struct Capture(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines holding `needle` that the calling test wrote: those written on its tokio
/// runtime since the capture was installed ([`capture_logs`], which [`sim`] calls).
pub fn log_lines_with(needle: &str) -> Vec<String> {
    let runtime = current_runtime()
        .expect("log_lines_with reads the lines of the calling test's runtime: call it in one");
    let logs = logs_by_runtime().lock().unwrap();
    let Some(buf) = logs.get(&Some(runtime)) else {
        return Vec::new();
    };
    String::from_utf8_lossy(buf)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The plugin runtime every test of this binary shares (with a compile cache in target/).
pub fn runtime() -> Arc<PluginRuntime> {
    static RUNTIME: OnceLock<Arc<PluginRuntime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let cache = super::compile_cache();
            Arc::new(
                PluginRuntime::new(RuntimeConfig {
                    cache_dir: Some(cache),
                    ..RuntimeConfig::default()
                })
                .unwrap(),
            )
        })
        .clone()
}

pub async fn load(path: &Path) -> Arc<Plugin> {
    runtime().load_file(path).await.unwrap()
}

pub fn fast_config() -> ControllerConfig {
    ControllerConfig {
        queue: QueueConfig {
            rate_limit: RateLimitConfig {
                base_delay: Duration::from_millis(5),
                max_delay: Duration::from_secs(1),
                qps: 200.0,
                burst: 200,
            },
            ..QueueConfig::default()
        },
        ..ControllerConfig::default()
    }
}

/// An embedded API server with fast Deployment status and namespaces created on demand.
pub async fn sim() -> Result<Sim> {
    capture_logs();
    Ok(Sim::builder()
        .status_delay(Duration::from_millis(20))
        .auto_create_namespaces(true)
        .start()
        .await?)
}

pub fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}}}
    }))
    .unwrap()
}

pub async fn create_namespace(client: &kube::Client, name: &str) -> Result {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

pub fn image_of(sim: &Sim, ns: &str, name: &str) -> Option<String> {
    let d = sim.get("deployments", Some(ns), name)?;
    d.pointer("/spec/template/spec/containers/0/image")?
        .as_str()
        .map(str::to_string)
}

/// The policy of instance `name` from the YAML of its `spec`.
pub fn policy_from_spec(name: &str, spec: &str) -> kubeplug::policy::Policy {
    use kubeplug::policy::{Policy, PolicyDocument};
    let indented: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    let text = format!(
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata:\n  name: {name}\nspec:\n{indented}"
    );
    let file = Path::new("test.policy.yaml");
    let doc = PolicyDocument::parse(&text, file).unwrap();
    Policy::from_document(&doc, name, file).unwrap()
}

/// Polls `check` until it holds, failing after `limit` with `what`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
