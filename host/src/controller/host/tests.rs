//! The worker loop under paused time: a controller whose writes go to a fake API server
//! ([`FakeWriter`]), one running plugin: the real `hostile` test plugin (its modes give the
//! actions each test needs: `label` patches its target, `requeue-twice` and
//! `requeue-at-once` ask to be called again, `behave` only logs), and a cache filled by
//! hand. A real plugin keeps the tests honest about the worker's call: guest code runs
//! inside a poll of its task, during which tokio does not auto-advance the paused clock. No watch runs: the tests change the cache and queue keys as the router would.
//! Time moves only when every task waits (tokio's auto-advance), so delays are exact.

use super::*;
use crate::actions::MIN_REQUEUE_AFTER;
use crate::actions::fake::{Answer, FakeWriter};
use crate::actions::target::Method;
use crate::cluster::{CacheObjects, CacheWriter, CachedObject, KindCache, ObjKey, Routed};
use crate::plugin::{CallContext, Limits, NoObjects, PluginRuntime, RuntimeConfig};
use crate::policy::{Decision, PluginIdentity};
use std::path::Path;
use tokio::sync::broadcast::Receiver;
use tokio::time::{Instant, sleep, timeout};

/// Longer than any test waits: a missing call fails the test instead of hanging it.
const NEVER: Duration = Duration::from_secs(24 * 3600);
/// Far longer than any backoff or delay in these tests.
const HOUR: Duration = Duration::from_secs(3600);

struct Harness {
    controller: Controller,
    writer: Arc<FakeWriter>,
    audit: Receiver<Arc<AuditRecord>>,
    running: Arc<RunningPlugin>,
    /// The cache's writer, as the watch task holds it.
    cache: std::sync::Mutex<CacheWriter>,
    /// Kept for the plugin's engine (compile cache, instance pool).
    _runtime: PluginRuntime,
}

fn object(name: &str, rv: &str) -> CachedObject {
    CachedObject {
        key: ObjKey::new(Some("team-a"), name),
        json: serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team-a", "resourceVersion": rv},
        })
        .to_string()
        .into(),
        resource_version: rv.to_string(),
        labels: Default::default(),
        controller: None,
        manager: None,
    }
}

/// A controller with one running plugin, `hostile` in `mode`, reconciling `names` (at resourceVersion
/// 1); the fake answers writes with `script`, then accepts them.
async fn harness(
    mode: &str,
    names: &[&str],
    script: Vec<Answer>,
    resync: Option<Duration>,
) -> Harness {
    harness_listed(mode, names, script, resync, Listing::Before, 1).await
}

/// How much of the cache has listed when the plugin starts.
#[derive(Debug, Clone, Copy)]
enum Listing {
    /// All of it, as when another plugin's watch of the kind has synced.
    Before,
    /// Nothing, as when the plugin's own watch has just started (the test lists it with
    /// [`Harness::list`]).
    After,
    /// The first half of the names, listed by a namespace's watch that was then replaced by
    /// the cluster-wide one that has not listed yet (another plugin widened the kind's
    /// scope): not synced, but holding objects whose additions were routed before.
    Partly,
}

/// [`harness`], with the cache listed as `listing` says when the plugin starts.
async fn harness_listed(
    mode: &str,
    names: &[&str],
    script: Vec<Answer>,
    resync: Option<Duration>,
    listing: Listing,
    workers: usize,
) -> Harness {
    let runtime = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins/hostile.wasm");
    let plugin = runtime.load_file(&path).await.unwrap_or_else(|e| {
        panic!(
            "{}: {e} (build the plugins first: `make plugins`)",
            path.display()
        )
    });
    // Nothing reaches the API server through this client: writes go to the fake, and no
    // watch is started.
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let writer = Arc::new(FakeWriter::new(script));
    let config = ControllerConfig {
        workers,
        resync,
        ..ControllerConfig::default()
    };
    let audit = config.audit.subscribe();
    let controller =
        Controller::with_writer(client, config, |_| -> Arc<dyn ApiWriter> { writer.clone() });
    let mut writer_of_cache = CacheWriter::new(plugin.metadata().reconciles.clone());
    let cache: Arc<KindCache> = writer_of_cache.reader();
    match listing {
        Listing::Before => {
            writer_of_cache.replace_all(names.iter().map(|n| object(n, "1")).collect());
        }
        Listing::After => {}
        Listing::Partly => {
            let mut namespace = CacheWriter::scoped(&cache, Some("team-a".into()));
            let half = &names[..names.len() / 2];
            namespace.replace_all(half.iter().map(|n| object(n, "1")).collect());
        }
    }
    assert_eq!(cache.is_synced(), matches!(listing, Listing::Before));
    // A mode, or a whole configuration when it needs more than one.
    let config = match mode.starts_with('{') {
        true => mode.to_string(),
        false => format!(r#"{{"mode": "{mode}"}}"#),
    };
    let instance = PluginInstance::named(plugin.clone(), "hostile", Some(&config))
        .with_policy(Policy::trusted());
    let meta = plugin.metadata();
    let revision = Revision {
        identity: Arc::new(PluginIdentity {
            name: "hostile".into(),
            declared: meta.name.clone(),
            version: meta.version.clone(),
            digest: plugin.digest().to_string(),
        }),
        plugin: plugin.clone(),
        primary: cache.clone(),
        caches: vec![cache.clone()],
        objects: Arc::new(CacheObjects::new([cache.clone()])),
        // The sandbox's deadline is on the real clock (the epoch ticker) and the call's
        // timeout converts it to tokio's, which runs ahead under paused time: a long limit
        // keeps the paused clock from timing out a call that has not started yet.
        ctx: CallContext::new(
            Limits {
                timeout: NEVER * 30,
                ..Limits::default()
            },
            Arc::new(NoObjects),
        )
        .for_instance("hostile"),
        config: instance.config.clone(),
        budget: Arc::new(instance.policy.write_budget()),
        policy: instance.policy.clone(),
        scope: crate::cluster::WatchScope::All,
    };
    let name = instance.name().unwrap().clone();
    controller
        .start_running(&name, &instance, revision)
        .unwrap();
    let running = controller.inner.running.get("hostile").unwrap();
    Harness {
        controller,
        writer,
        audit,
        running,
        cache: std::sync::Mutex::new(writer_of_cache),
        _runtime: runtime,
    }
}

impl Harness {
    /// The next audit record of `action`, and when it was made.
    async fn next(&mut self, action: &str) -> (Arc<AuditRecord>, Instant) {
        let wait = async {
            loop {
                let record = self.audit.recv().await.unwrap();
                if record.action == action {
                    return (record, Instant::now());
                }
            }
        };
        timeout(NEVER, wait)
            .await
            .unwrap_or_else(|_| panic!("no {action} action within {NEVER:?}"))
    }

    /// Waits until the fake has received `n` patches; returns when each arrived (as the
    /// fake recorded it: the polling here does not blur the times).
    async fn patches(&self, n: usize) -> Vec<Instant> {
        self.sent(Method::Patch, n, Duration::from_millis(100))
            .await
    }

    /// Waits (checking every `step`) until the fake has received `n` requests of `method`;
    /// when every request arrived.
    async fn sent(&self, method: Method, n: usize, step: Duration) -> Vec<Instant> {
        let start = Instant::now();
        while self.writer.count(method) < n {
            let waited = start.elapsed();
            assert!(waited < HOUR, "fewer than {n} {method:?} after {waited:?}");
            sleep(step).await;
        }
        let received = self.writer.received();
        received.iter().map(|r| r.at).collect()
    }

    /// The watch's first list: the cache takes `names` (at resourceVersion 1) and the
    /// additions go through the controller's router, as the watch task sends them.
    fn list(&self, names: &[&str]) {
        let mut writer = self.cache.lock().unwrap();
        let reader = writer.reader();
        let _order = reader.order();
        let changes = writer.replace_all(names.iter().map(|n| object(n, "1")).collect());
        for change in changes {
            self.controller
                .inner
                .feed
                .send(Routed::Change(change))
                .unwrap();
        }
    }

    /// The object changed: the cache holds a new version and the key is queued, as the
    /// router does on a watch event.
    fn change(&self, name: &str, rv: &str) {
        self.cache.lock().unwrap().upsert(object(name, rv));
        self.running
            .enqueue(ObjKey::new(Some("team-a"), name), Reason::Changed);
    }
}

/// Every audit record received so far, as `(action, key)`.
fn drained(audit: &mut Receiver<Arc<AuditRecord>>) -> Vec<(String, String)> {
    let mut records = Vec::new();
    while let Ok(record) = audit.try_recv() {
        records.push((record.action.to_string(), record.key.to_string()));
    }
    records
}

#[tokio::test(start_paused = true)]
async fn start_up_reconciles_each_key_once_whether_the_list_comes_before_after_or_partly() {
    let names: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut expected: Vec<(String, String)> = names
        .iter()
        .map(|n| ("log".to_string(), format!("team-a/{n}")))
        .collect();
    expected.sort();
    for listing in [Listing::After, Listing::Before, Listing::Partly] {
        let mut h = harness_listed("behave", &names, vec![], None, listing, 1).await;
        if !matches!(listing, Listing::Before) {
            // The watch lists now: the additions the cache did not hold reach the plugin
            // through the router, after it joined with the keys the cache held.
            h.list(&names);
        }
        sleep(HOUR).await;
        let mut calls = drained(&mut h.audit);
        calls.sort();
        assert_eq!(calls, expected, "{listing:?}");
        assert_eq!(
            h.controller.reconcile_counts("hostile").total,
            names.len() as u64
        );
    }
}

#[tokio::test(start_paused = true)]
async fn requeue_after_brings_the_key_back_after_the_shortest_delay_not_before() {
    // One call asks for 60 s and for 1.5 s.
    let mut h = harness("requeue-twice", &["web"], vec![], None).await;
    let (_, mut last) = h.next("log").await;
    for _ in 0..2 {
        let (_, again) = h.next("log").await;
        let waited = again - last;
        assert!(
            waited >= Duration::from_millis(1500) && waited < Duration::from_millis(1510),
            "called again after {waited:?}, not 1.5 s"
        );
        last = again;
    }
}

#[tokio::test(start_paused = true)]
async fn a_requeue_at_once_waits_the_floor() {
    let mut h = harness("requeue-at-once", &["web"], vec![], None).await;
    let (_, mut last) = h.next("log").await;
    for _ in 0..3 {
        let (_, again) = h.next("log").await;
        let waited = again - last;
        assert!(
            waited >= MIN_REQUEUE_AFTER && waited < MIN_REQUEUE_AFTER + Duration::from_millis(10),
            "called again after {waited:?}, not {MIN_REQUEUE_AFTER:?}"
        );
        last = again;
    }
}

#[tokio::test(start_paused = true)]
async fn invalid_or_forbidden_writes_wait_for_the_object_to_change() {
    for code in [400, 403, 422] {
        let mut h = harness("label", &["web"], vec![Answer::Status(code)], None).await;
        let (record, _) = h.next("patch").await;
        assert!(
            matches!(
                record.decision,
                Decision::Failed {
                    transient: false,
                    ..
                }
            ),
            "{code}: {:?}",
            record.decision
        );
        // A retry with backoff would come within seconds; an hour passes without one.
        sleep(HOUR).await;
        assert_eq!(h.writer.count(Method::Patch), 1, "{code} was retried");
        h.change("web", "2");
        let (record, _) = h.next("patch").await;
        assert_eq!(record.decision, Decision::Executed, "{code}");
        assert_eq!(h.writer.count(Method::Patch), 2);
    }
}

#[tokio::test(start_paused = true)]
async fn throttling_server_errors_and_timeouts_are_retried_with_backoff() {
    let script = vec![Answer::Status(429), Answer::Status(500), Answer::Timeout];
    let h = harness("label", &["web"], script, None).await;
    let at = h.patches(4).await;
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // The queue's per-key backoff: 5 ms, then doubling.
    assert_eq!(
        gaps,
        [5, 10, 20].map(Duration::from_millis),
        "retried after {gaps:?}"
    );
    // Accepted at last: no more retries.
    sleep(HOUR).await;
    assert_eq!(h.writer.count(Method::Patch), 4);
}

#[tokio::test(start_paused = true)]
async fn the_resync_timer_requeues_every_key() {
    let period = Duration::from_secs(30);
    let names = ["a", "b", "c"];
    let mut h = harness("behave", &names, vec![], Some(period)).await;
    let started = Instant::now();
    let mut keys = Vec::new();
    let mut last = started;
    for _ in 0..names.len() {
        let (record, at) = h.next("log").await;
        keys.push(record.key.clone());
        last = at;
    }
    keys.sort();
    assert_eq!(keys, ["team-a/a", "team-a/b", "team-a/c"]);
    assert!(
        last - started < period,
        "the first round waited for a resync"
    );
    keys.clear();
    for _ in 0..names.len() {
        let (record, at) = h.next("log").await;
        assert!(
            at - started >= period && at - started < period + Duration::from_millis(10),
            "called again at {:?}, not at the resync",
            at - started
        );
        keys.push(record.key.clone());
    }
    keys.sort();
    assert_eq!(keys, ["team-a/a", "team-a/b", "team-a/c"]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_finishes_in_flight_calls_and_their_writes() {
    let slow = Answer::After(Duration::from_secs(5), Box::new(Answer::Ok("2")));
    let mut h = harness("label", &["web"], vec![slow], None).await;
    let sent = h.patches(1).await[0];
    let drain = h.controller.shutdown_within(Duration::from_secs(30)).await;
    assert_eq!(
        drain,
        Drain {
            finished: 1,
            abandoned: 0
        }
    );
    assert!(
        Instant::now() - sent >= Duration::from_secs(5),
        "did not wait"
    );
    let (record, at) = h.next("patch").await;
    assert_eq!(record.decision, Decision::Executed);
    assert_eq!(at - sent, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_drain_abandons_a_write_still_running_at_its_deadline() {
    let slow = Answer::After(Duration::from_secs(60), Box::new(Answer::Ok("2")));
    let h = harness("label", &["web"], vec![slow], None).await;
    let sent = h.patches(1).await[0];
    let drain = h.controller.shutdown_within(Duration::from_secs(1)).await;
    assert_eq!(
        drain,
        Drain {
            finished: 0,
            abandoned: 1
        }
    );
    assert!(Instant::now() - sent < Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_key_waits_for_its_own_patch_to_reach_the_cache() {
    // The patch leaves the object at resourceVersion 5.
    let h = harness("label", &["web"], vec![Answer::Ok("5")], None).await;
    let first = h.patches(1).await[0];
    // A change from before the patch (a status update at 2) must not be reconciled: the
    // plugin would act on an object without its own write.
    h.change("web", "2");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        h.writer.count(Method::Patch),
        1,
        "reconciled before its write"
    );
    let arrived = Instant::now();
    h.change("web", "5");
    let second = h.patches(2).await[1];
    assert!(second - first >= Duration::from_millis(500));
    // At once (within one recheck of the expectation) once the cache shows the write.
    let waited = second - arrived;
    assert!(
        waited < Duration::from_millis(30),
        "reconciled {waited:?} after the write reached the cache"
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_waits_until_an_object_it_deleted_leaves_the_cache() {
    // Reconciling `web` deletes `other` while the cache shows it (at resourceVersion 1).
    let config = r#"{"mode": "delete-named", "name": "other"}"#;
    let h = harness(config, &["web", "other"], vec![], None).await;
    h.sent(Method::Delete, 1, Duration::from_millis(10)).await;
    // `web` changes before the deletion reaches the cache: reconciling it now would delete
    // `other` a second time.
    h.change("web", "2");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(h.writer.count(Method::Delete), 1, "deleted twice");
    // The deletion arrives; `web` is reconciled on a cache without `other`.
    h.cache
        .lock()
        .unwrap()
        .remove(&ObjKey::new(Some("team-a"), "other"));
    sleep(Duration::from_millis(500)).await;
    assert_eq!(h.writer.count(Method::Delete), 1);
    // The wait is over: a new `other` is deleted as soon as `web` is reconciled again.
    h.change("other", "3");
    h.change("web", "4");
    sleep(Duration::from_millis(30)).await;
    assert_eq!(h.writer.count(Method::Delete), 2);
}

#[tokio::test(start_paused = true)]
async fn a_key_waits_until_an_object_it_created_is_in_the_cache() {
    // Reconciling `web` creates a child with a generated name when the cache shows none;
    // the API server names it `web-x7k2p`, at resourceVersion 7.
    let created = vec![Answer::Named("web-x7k2p", "7")];
    let h = harness("create-child", &["web"], created, None).await;
    h.sent(Method::Post, 1, Duration::from_millis(10)).await;
    // `web` changes before the child reaches the cache: reconciling it now would find no
    // child and create a second one.
    h.change("web", "2");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(h.writer.count(Method::Post), 1, "created twice");
    // The child arrives; `web` is reconciled (within a recheck) and finds it.
    h.change("web-x7k2p", "7");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(h.writer.count(Method::Post), 1);
    // The wait is over: with the child gone, the next reconcile of `web` creates one at once.
    h.cache
        .lock()
        .unwrap()
        .remove(&ObjKey::new(Some("team-a"), "web-x7k2p"));
    h.change("web", "8");
    sleep(Duration::from_millis(30)).await;
    assert_eq!(h.writer.count(Method::Post), 2);
}

#[tokio::test(start_paused = true)]
async fn a_worker_takes_the_next_key_while_its_write_is_in_flight() {
    // One worker; the first write takes 5 s at the API server.
    let slow = Answer::After(Duration::from_secs(5), Box::new(Answer::Ok("5")));
    let h = harness("label", &["a", "b", "c"], vec![slow], None).await;
    let at = h.patches(3).await;
    let (first, rest) = (at[0], &at[1..]);
    for later in rest {
        assert!(
            *later - first < Duration::from_secs(5),
            "a patch waited {:?} for another key's write",
            *later - first
        );
    }
    // The slow write is still in flight; the two fast answers grew the limit from 4.
    let text = h.controller.metrics_text();
    for line in [
        "kubeplug_writes_in_flight{plugin=\"hostile\"} 1",
        "kubeplug_writes_in_flight_limit{plugin=\"hostile\"} 6",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_is_never_called_twice_at_once_and_waits_for_its_own_write() {
    // Two workers and room for two writes: only the key's own hold keeps it exclusive.
    let slow = Answer::After(Duration::from_secs(5), Box::new(Answer::Ok("5")));
    let h = harness_listed("label", &["web"], vec![slow], None, Listing::Before, 2).await;
    let first = h.patches(1).await[0];
    // Changed while its write is in flight: queued, not handed to the idle worker.
    sleep(Duration::from_secs(1)).await;
    h.change("web", "3");
    sleep(Duration::from_millis(3900)).await;
    assert_eq!(
        h.writer.count(Method::Patch),
        1,
        "called again during its own write"
    );
    // The write ended at 5 s leaving version 5; the cache still shows 3.
    sleep(Duration::from_secs(1)).await;
    assert!(Instant::now() - first > Duration::from_secs(5));
    assert_eq!(
        h.writer.count(Method::Patch),
        1,
        "called again before its write reached the cache"
    );
    let arrived = Instant::now();
    h.change("web", "5");
    let second = h.patches(2).await[1];
    assert!(
        second - arrived < Duration::from_millis(30),
        "reconciled {:?} after its write reached the cache",
        second - arrived
    );
}

/// The resourceVersion precondition a received patch carried.
fn fenced_at(received: &crate::actions::fake::Received) -> Option<String> {
    match &received.request {
        crate::actions::ApiRequest::Patch {
            patch: kube::api::Patch::Merge(body),
            ..
        } => body
            .pointer("/metadata/resourceVersion")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_conflict_waits_for_the_cache_to_show_a_newer_version() {
    let mut h = harness("label", &["web"], vec![Answer::Status(409)], None).await;
    let (record, _) = h.next("patch").await;
    match &record.decision {
        Decision::Failed {
            error,
            transient: false,
        } if error.starts_with("conflict: ") => {}
        other => panic!("not a conflict: {other:?}"),
    }
    // Fenced on the version the plugin was handed.
    assert_eq!(fenced_at(&h.writer.received()[0]).as_deref(), Some("1"));
    // A retry with backoff would come within milliseconds, and a re-queue of the version the
    // write was refused on must not bring the key back either.
    sleep(Duration::from_millis(1500)).await;
    h.running
        .enqueue(ObjKey::new(Some("team-a"), "web"), Reason::Changed);
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.writer.count(Method::Patch),
        1,
        "reconciled again before the cache showed a newer version"
    );
    let arrived = Instant::now();
    h.change("web", "2");
    let (record, at) = h.next("patch").await;
    assert_eq!(record.decision, Decision::Executed);
    let waited = at - arrived;
    assert!(
        waited < Duration::from_millis(30),
        "reconciled {waited:?} after the newer version reached the cache"
    );
    assert_eq!(fenced_at(&h.writer.received()[1]).as_deref(), Some("2"));
    let text = h.controller.metrics_text();
    for line in [
        "kubeplug_write_conflicts_total{plugin=\"hostile\"} 1",
        "kubeplug_reconcile_total{plugin=\"hostile\",result=\"conflict\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_conflict_whose_newer_version_never_arrives_waits_a_bounded_time() {
    let h = harness("label", &["web"], vec![Answer::Status(409)], None).await;
    let at = h.patches(2).await;
    let waited = at[1] - at[0];
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_millis(2050),
        "reconciled again after {waited:?}, not after the 2 s bound"
    );
    // The cache never moved: the same version again.
    assert_eq!(fenced_at(&h.writer.received()[1]).as_deref(), Some("1"));
}
