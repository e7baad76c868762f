//! The pipeline against the fake API server: what a call's actions come to, and what is
//! sent and audited on the way.

use super::*;
use crate::actions::HostWrites;
use crate::actions::fake::{Answer, FakeWriter};
use crate::actions::target::Method;
use crate::actions::writer::ApiRequest;
use crate::contract::{LogLevel, PatchType};
use crate::policy::WriteBudget;
use serde_json::json;
use std::collections::HashMap;
use tokio::sync::broadcast::Receiver;

/// Every log action admitted, no drop to report.
struct AdmitAll;

impl LogActions for AdmitAll {
    fn admit(&self, _len: usize) -> bool {
        true
    }

    fn report_dropped(&self, _dropped: u64) -> Option<u64> {
        None
    }
}

struct Fixture {
    pipeline: Pipeline,
    writer: Arc<FakeWriter>,
    audit: Receiver<Arc<AuditRecord>>,
    identity: Arc<PluginIdentity>,
    stop: watch::Sender<bool>,
    /// The host-wide write cap (2 slots) and the plugin's writes in flight under it.
    host: HostWrites,
    writes: Arc<InFlightLimit>,
}

fn fixture(script: Vec<Answer>) -> Fixture {
    let writer = Arc::new(FakeWriter::new(script));
    let sink = AuditSink::default();
    let host = HostWrites::new(2);
    Fixture {
        pipeline: Pipeline::new(Executor::new(writer.clone(), "host-1"), sink.clone()),
        audit: sink.subscribe(),
        writer,
        identity: Arc::new(PluginIdentity {
            name: "probe".into(),
            declared: "probe".into(),
            version: "0.1.0".into(),
            digest: "0".into(),
        }),
        stop: watch::Sender::new(false),
        host: host.clone(),
        writes: InFlightLimit::new(1, host, "team-a"),
    }
}

impl Fixture {
    async fn run(&self, policy: &Policy, budget: &WriteBudget, actions: &[Action]) -> CallOutcome {
        self.run_fenced(policy, budget, actions, Fence::default())
            .await
    }

    async fn run_fenced(
        &self,
        policy: &Policy,
        budget: &WriteBudget,
        actions: &[Action],
        fence: Fence,
    ) -> CallOutcome {
        let call = Call {
            fence,
            ..self.call(policy, budget)
        };
        self.pipeline.run(call, actions).await
    }

    /// A call of `probe` on `team-a/web`: every log admitted, the key held, nothing fenced.
    fn call<'a>(&'a self, policy: &'a Policy, budget: &'a WriteBudget) -> Call<'a> {
        Call {
            plugin: "probe",
            key: "team-a/web",
            identity: &self.identity,
            policy,
            budget,
            writes: &self.writes,
            logs: &AdmitAll,
            stopped: self.stop.subscribe(),
            holds: &|| Hold::Always,
            fence: Fence::default(),
        }
    }

    async fn run_trusted(&self, actions: &[Action]) -> CallOutcome {
        self.run(
            &Policy::trusted(),
            &Policy::trusted().write_budget(),
            actions,
        )
        .await
    }

    /// The decisions audited so far, in order.
    fn decisions(&mut self) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Ok(r) = self.audit.try_recv() {
            out.push(r.decision.as_str());
        }
        out
    }
}

fn web(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some("team-a".into()),
        name: name.into(),
    }
}

fn patch(name: &str) -> Action {
    Action::Patch {
        target: web(name),
        patch_type: PatchType::Merge,
        subresource: None,
        body: json!({"metadata": {"labels": {"a": "b"}}}),
    }
}

fn requeue(ms: u64) -> Action {
    Action::RequeueAfter { after_ms: ms }
}

fn log() -> Action {
    Action::Log {
        level: LogLevel::Info,
        message: "hello".into(),
    }
}

#[tokio::test]
async fn the_shortest_requeue_of_a_call_wins_whatever_the_order_and_is_floored() {
    let f = fixture(vec![]);
    for actions in [
        [requeue(60_000), requeue(1500)],
        [requeue(1500), requeue(60_000)],
    ] {
        let outcome = f.run_trusted(&actions).await;
        assert_eq!(outcome.requeue_after, Some(Duration::from_millis(1500)));
    }
    let outcome = f.run_trusted(&[requeue(0)]).await;
    assert_eq!(outcome.requeue_after, Some(MIN_REQUEUE_AFTER));
    assert_eq!(f.run_trusted(&[log()]).await.requeue_after, None);
}

#[tokio::test]
async fn writes_are_typed_with_the_resource_version_they_left() {
    let f = fixture(vec![Answer::Ok("7"), Answer::Ok("8"), Answer::Ok("9")]);
    let create = Action::Create {
        manifest: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "team-a"}}),
    };
    let delete = Action::Delete { target: web("old") };
    let outcome = f.run_trusted(&[patch("web"), create, delete]).await;
    assert!(outcome.failure.is_none());
    let changes: Vec<_> = outcome.writes.iter().map(|w| w.change).collect();
    assert_eq!(changes, [Change::Patched, Change::Created, Change::Deleted]);
    assert_eq!(outcome.patched(&web("web")), Some("7"));
    assert_eq!(outcome.writes[1].resource_version.as_deref(), Some("8"));
    // Not patched: the created and deleted objects, another object.
    assert_eq!(outcome.patched(&web("old")), None);
    assert_eq!(outcome.patched(&web("api")), None);
    // Sent as the plugin's field manager, to the object it named.
    let sent = f.writer.received();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0].target.name.as_deref(), Some("web"));
    match &sent[0].request {
        ApiRequest::Patch { params, .. } => {
            assert_eq!(params.field_manager.as_deref(), Some("kubeplug/probe"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_first_failure_stops_the_call_and_says_whether_to_retry() {
    for (code, transient) in [(500, true), (409, true), (422, false), (403, false)] {
        let mut f = fixture(vec![Answer::Status(code)]);
        let outcome = f
            .run_trusted(&[log(), patch("a"), patch("b"), log(), requeue(5000)])
            .await;
        let failure = outcome.failure.expect("a failure");
        assert_eq!(failure.is_transient(), transient, "{code}");
        assert!(
            matches!(
                &failure,
                CallFailure::Action {
                    action: "patch",
                    ..
                }
            ),
            "{failure:?}"
        );
        assert_eq!(
            f.writer.count(Method::Patch),
            1,
            "{code}: sent after a failure"
        );
        assert_eq!(
            f.decisions(),
            ["executed", "failed", "skipped", "skipped", "skipped"]
        );
        assert!(outcome.writes.is_empty() && outcome.requeue_after.is_none());
    }
}

#[tokio::test]
async fn gone_and_existing_objects_are_already_done() {
    let script = vec![Answer::Status(404), Answer::Status(404), Answer::Exists];
    let mut f = fixture(script);
    let create = Action::Create {
        manifest: json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "team-a"}}),
    };
    let outcome = f
        .run_trusted(&[patch("a"), Action::Delete { target: web("b") }, create])
        .await;
    assert!(outcome.failure.is_none() && outcome.writes.is_empty());
    assert_eq!(
        f.decisions(),
        ["already-done", "already-done", "already-done"]
    );
}

#[tokio::test]
async fn dry_run_sends_nothing_but_logs_and_requeues_run() {
    let mut f = fixture(vec![]);
    let dry = Policy::default();
    let outcome = f
        .run(
            &dry,
            &dry.write_budget(),
            &[patch("a"), log(), requeue(2000)],
        )
        .await;
    assert!(f.writer.received().is_empty());
    assert_eq!(f.decisions(), ["dry-run", "executed", "executed"]);
    assert_eq!(outcome.requeue_after, Some(Duration::from_secs(2)));
    assert!(outcome.failure.is_none());
}

#[tokio::test]
async fn discovery_failing_fails_the_writes_as_transient_and_sends_nothing() {
    let mut f = fixture(vec![]);
    let down = Action::Delete {
        target: ObjectRef {
            api_version: "example.com/v1".into(),
            kind: "Down".into(),
            namespace: Some("team-a".into()),
            name: "x".into(),
        },
    };
    let outcome = f.run_trusted(&[log(), down, patch("a")]).await;
    let failure = outcome.failure.expect("a failure");
    assert!(matches!(
        failure,
        CallFailure::Discovery(ResolveError::Unavailable { .. })
    ));
    assert!(failure.is_transient());
    assert!(f.writer.received().is_empty());
    assert_eq!(f.decisions(), ["executed", "failed", "skipped"]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_a_write_waiting_for_the_budget() {
    let mut f = fixture(vec![]);
    let policy = Policy::trusted();
    // One write at once, the next a second later.
    let budget = WriteBudget::new(1.0, 1);
    let stop = f.stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.send_replace(true);
    });
    let started = tokio::time::Instant::now();
    let outcome = f
        .run(&policy, &budget, &[patch("a"), patch("b"), log()])
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(f.writer.count(Method::Patch), 1);
    assert_eq!(f.decisions(), ["executed", "skipped", "skipped"]);
    // A removal, not a failure of the call.
    assert!(outcome.failure.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_write_holds_a_slot_of_the_host_cap_only_once_its_budget_lets_it_go() {
    let f = fixture(vec![]);
    let policy = Policy::trusted();
    // The noisy tenant's plugin: one write at once, the next a second later.
    let slow = WriteBudget::new(1.0, 1);
    let noisy = [patch("a"), patch("b")];
    let mut noisy_call = std::pin::pin!(f.run(&policy, &slow, &noisy));
    // Its first write went and its second waits for a token: it holds none of the cap.
    assert!(futures::poll!(noisy_call.as_mut()).is_pending());
    assert_eq!(f.writer.count(Method::Patch), 1);
    assert_eq!(
        f.host.available(),
        2,
        "no slot held while waiting for the budget"
    );
    // So another tenant's write goes at once, not at the noisy tenant's pace.
    let quiet = InFlightLimit::new(1, f.host.clone(), "team-b");
    let started = tokio::time::Instant::now();
    let budget = policy.write_budget();
    let call = Call {
        writes: &quiet,
        ..f.call(&policy, &budget)
    };
    let outcome = f.pipeline.run(call, &[patch("c")]).await;
    assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(f.writer.count(Method::Patch), 2);
    noisy_call.await;
    assert_eq!(f.writer.count(Method::Patch), 3);
    assert_eq!(f.host.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_write_waits_for_a_slot_of_the_host_cap_and_frees_it_once_answered() {
    let f = fixture(vec![]);
    let policy = Policy::trusted();
    let budget = policy.write_budget();
    let others = InFlightLimit::new(2, f.host.clone(), "team-b");
    let held = (others.sending().await, others.sending().await);
    assert_eq!(f.host.available(), 0);
    let actions = [patch("a")];
    let mut call = std::pin::pin!(f.run(&policy, &budget, &actions));
    assert!(futures::poll!(call.as_mut()).is_pending());
    assert_eq!(f.writer.count(Method::Patch), 0, "past the host cap");
    drop(held);
    assert!(call.await.failure.is_none());
    assert_eq!((f.writer.count(Method::Patch), f.host.available()), (1, 2));
}

/// A fence holding `web` at resourceVersion 5.
fn fence_web_at_5() -> Fence {
    Fence::decided_on(&web("web"), Some("5"), &[], |_| HashMap::new())
}

fn patch_of(patch_type: PatchType, body: serde_json::Value, subresource: Option<&str>) -> Action {
    Action::Patch {
        target: web("web"),
        patch_type,
        subresource: subresource.map(str::to_string),
        body,
    }
}

/// The body a received patch carried, as JSON.
fn sent_body(received: &crate::actions::fake::Received) -> serde_json::Value {
    match &received.request {
        ApiRequest::Patch { patch, .. } => match patch {
            kube::api::Patch::Merge(b)
            | kube::api::Patch::Strategic(b)
            | kube::api::Patch::Apply(b) => b.clone(),
            kube::api::Patch::Json(ops) => serde_json::to_value(ops).unwrap(),
            other => panic!("{other:?}"),
        },
        ApiRequest::Create { object, .. } => serde_json::to_value(object).unwrap(),
        ApiRequest::Event(event) => serde_json::to_value(event).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// The resourceVersion precondition a received delete carried.
fn sent_precondition(received: &crate::actions::fake::Received) -> Option<String> {
    match &received.request {
        ApiRequest::Delete { params } => params
            .preconditions
            .as_ref()
            .and_then(|p| p.resource_version.clone()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn every_patch_and_delete_carries_the_version_the_plugin_decided_on() {
    // Each call's writes are fenced at 5 (the fake answers without a new version, so the
    // fence does not move).
    let f = fixture(vec![Answer::Status(404); 6]);
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    let actions = [
        patch_of(PatchType::Merge, labels.clone(), None),
        patch_of(PatchType::Strategic, labels.clone(), None),
        patch_of(
            PatchType::Apply,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            None,
        ),
        patch_of(
            PatchType::Json,
            json!([{"op": "add", "path": "/metadata/labels/a", "value": "b"}]),
            None,
        ),
        patch_of(
            PatchType::Merge,
            json!({"status": {"x": 1}}),
            Some("status"),
        ),
        Action::Delete { target: web("web") },
    ];
    for action in &actions {
        let outcome = f
            .run_fenced(
                &Policy::trusted(),
                &Policy::trusted().write_budget(),
                std::slice::from_ref(action),
                fence_web_at_5(),
            )
            .await;
        assert!(outcome.failure.is_none(), "{outcome:?}");
    }
    let sent = f.writer.received();
    assert_eq!(sent.len(), actions.len());
    for (merge_like, label) in sent[..3].iter().zip(["merge", "strategic", "apply"]) {
        assert_eq!(
            sent_body(merge_like).pointer("/metadata/resourceVersion"),
            Some(&json!("5")),
            "{label}"
        );
    }
    assert_eq!(
        sent_body(&sent[1]),
        json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "5"}}),
        "the plugin's fields are kept"
    );
    assert_eq!(
        sent_body(&sent[3]),
        json!([
            {"op": "add", "path": "/metadata/labels/a", "value": "b"},
            {"op": "add", "path": "/metadata/resourceVersion", "value": "5"}
        ]),
        "a JSON patch sets it last"
    );
    assert_eq!(
        sent_body(&sent[4]).pointer("/metadata/resourceVersion"),
        Some(&json!("5")),
        "the status subresource"
    );
    assert_eq!(sent_precondition(&sent[5]).as_deref(), Some("5"));

    // Another object the plugin did not read, and an unfenced call: nothing added.
    let other = Action::Patch {
        target: web("api"),
        patch_type: PatchType::Merge,
        subresource: None,
        body: labels.clone(),
    };
    f.run_fenced(
        &Policy::trusted(),
        &Policy::trusted().write_budget(),
        &[Action::Delete { target: web("api") }, other],
        fence_web_at_5(),
    )
    .await;
    let sent = f.writer.received();
    assert_eq!(sent_precondition(&sent[6]), None);
    assert_eq!(sent_body(&sent[7]), labels);
}

#[tokio::test]
async fn a_plugins_own_version_is_sent_as_it_wrote_it() {
    let f = fixture(vec![]);
    let own = json!({"metadata": {"resourceVersion": "3", "labels": {"a": "b"}}});
    let own_ops = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "3"}]);
    f.run_fenced(
        &Policy::trusted(),
        &Policy::trusted().write_budget(),
        &[
            patch_of(PatchType::Merge, own.clone(), None),
            patch_of(PatchType::Json, own_ops.clone(), None),
        ],
        fence_web_at_5(),
    )
    .await;
    let sent = f.writer.received();
    assert_eq!(sent_body(&sent[0]), own);
    assert_eq!(sent_body(&sent[1]), own_ops);
}

#[tokio::test]
async fn a_patch_moves_the_fence_for_the_calls_later_writes_to_its_object() {
    // The spec patch leaves web at 6, the status patch at 7.
    let f = fixture(vec![Answer::Ok("6"), Answer::Ok("7")]);
    let outcome = f
        .run_fenced(
            &Policy::trusted(),
            &Policy::trusted().write_budget(),
            &[
                patch_of(PatchType::Merge, json!({"spec": {"replicas": 2}}), None),
                patch_of(
                    PatchType::Merge,
                    json!({"status": {"x": 1}}),
                    Some("status"),
                ),
                Action::Delete { target: web("web") },
                // Gone now: a later write to it is not fenced.
                patch_of(PatchType::Merge, json!({"spec": {"replicas": 3}}), None),
            ],
            fence_web_at_5(),
        )
        .await;
    assert!(outcome.failure.is_none());
    let sent = f.writer.received();
    let version = |i: usize| sent_body(&sent[i])["metadata"]["resourceVersion"].clone();
    assert_eq!(version(0), json!("5"));
    assert_eq!(version(1), json!("6"));
    assert_eq!(sent_precondition(&sent[2]).as_deref(), Some("7"));
    assert_eq!(version(3), serde_json::Value::Null);
}

#[tokio::test]
async fn creates_and_events_are_not_fenced() {
    let f = fixture(vec![]);
    let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"}});
    let event = Action::Event {
        regarding: web("web"),
        event_type: crate::contract::EventType::Normal,
        reason: "Seen".into(),
        message: "m".into(),
        event_action: "Reconcile".into(),
    };
    f.run_fenced(
        &Policy::trusted(),
        &Policy::trusted().write_budget(),
        &[
            Action::Create {
                manifest: manifest.clone(),
            },
            event,
        ],
        fence_web_at_5(),
    )
    .await;
    let sent = f.writer.received();
    assert_eq!(sent.len(), 2);
    for received in &sent {
        let body = sent_body(received).to_string();
        assert!(!body.contains("resourceVersion"), "{body}");
    }
}

#[tokio::test]
async fn a_refused_fenced_write_is_a_conflict_that_waits_for_a_newer_version() {
    let mut f = fixture(vec![Answer::Status(409)]);
    let outcome = f
        .run_fenced(
            &Policy::trusted(),
            &Policy::trusted().write_budget(),
            &[patch("web"), patch("api"), log()],
            fence_web_at_5(),
        )
        .await;
    let failure = outcome.failure.expect("a failure");
    match &failure {
        CallFailure::Conflict {
            action,
            object,
            fenced_at,
            ..
        } => assert_eq!(
            (*action, object, fenced_at.as_str()),
            ("patch", &web("web"), "5")
        ),
        other => panic!("{other:?}"),
    }
    assert!(!failure.is_transient(), "not retried with backoff");
    let mut records = Vec::new();
    while let Ok(r) = f.audit.try_recv() {
        records.push(r);
    }
    match &records[0].decision {
        Decision::Failed { error, transient } => {
            assert!(error.starts_with("conflict: "), "{error}");
            assert!(error.contains("resourceVersion 5"), "{error}");
            assert!(!transient);
        }
        other => panic!("{other:?}"),
    }
    let rest: Vec<_> = records[1..].iter().map(|r| r.decision.as_str()).collect();
    assert_eq!(rest, ["skipped", "skipped"]);
    assert_eq!(f.writer.count(Method::Patch), 1);
}

#[tokio::test]
async fn the_precondition_is_the_hosts_not_a_field_the_plugin_wrote() {
    let doc = crate::policy::PolicyDocument::parse(
        "apiVersion: kubeplug.dev/v1alpha1
kind: PluginPolicy
metadata: {name: probe}
spec:
  mode: enforce
  namespaces: {all: true}
  rules:
    - {apiVersion: apps/v1, kind: Deployment, verbs: [patch], fields: [/metadata/labels]}
",
        std::path::Path::new("probe.policy.yaml"),
    )
    .unwrap();
    let policy =
        Policy::from_document(&doc, "probe", std::path::Path::new("probe.policy.yaml")).unwrap();
    let mut f = fixture(vec![]);
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    f.run_fenced(
        &policy,
        &policy.write_budget(),
        &[patch_of(PatchType::Merge, labels.clone(), None)],
        fence_web_at_5(),
    )
    .await;
    // Allowed under a labels-only grant, sent with the host's precondition...
    let sent = f.writer.received();
    assert_eq!(
        sent_body(&sent[0]).pointer("/metadata/resourceVersion"),
        Some(&json!("5"))
    );
    // ...and audited as the plugin wrote it.
    let record = f.audit.try_recv().unwrap();
    assert_eq!(record.decision, Decision::Executed);
    assert_eq!(
        record.body_digest.as_deref(),
        Some(crate::policy::digest(&labels).as_str())
    );
    // The plugin setting the version itself needs a grant for it.
    let own = json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "1"}});
    f.run_fenced(
        &policy,
        &policy.write_budget(),
        &[patch_of(PatchType::Merge, own, None)],
        fence_web_at_5(),
    )
    .await;
    assert_eq!(f.decisions(), ["denied"]);
    assert_eq!(f.writer.received().len(), 1, "nothing more sent");
}

#[tokio::test(start_paused = true)]
async fn a_write_released_by_the_budget_after_the_key_was_lost_is_not_sent() {
    let mut f = fixture(vec![Answer::Ok("7")]);
    let policy = Policy::trusted();
    // One write at once, the next a second later: the replica loses the key meanwhile.
    let budget = WriteBudget::new(1.0, 1);
    let held = Arc::new(std::sync::atomic::AtomicBool::new(true));
    tokio::spawn({
        let held = held.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            held.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let holds = {
        let held = held.clone();
        move || match held.load(std::sync::atomic::Ordering::SeqCst) {
            true => Hold::Always,
            false => Hold::Lost,
        }
    };
    let call = Call {
        holds: &holds,
        ..f.call(&policy, &budget)
    };
    let outcome = f.pipeline.run(call, &[patch("a"), patch("b"), log()]).await;
    assert_eq!(
        f.writer.count(Method::Patch),
        1,
        "only the write sent in time"
    );
    assert_eq!(f.decisions(), ["executed", "not-held", "skipped"]);
    assert!(matches!(outcome.failure, Some(CallFailure::NotHeld)));
    assert!(
        !outcome.failure.unwrap().is_transient(),
        "left to the new holder"
    );
}

/// A spent log rate: every log action refused, and what each call offered to report kept.
#[derive(Default)]
struct Spent {
    offered: std::sync::Mutex<Vec<u64>>,
}

impl LogActions for Spent {
    fn admit(&self, _len: usize) -> bool {
        false
    }

    fn report_dropped(&self, dropped: u64) -> Option<u64> {
        self.offered.lock().unwrap().push(dropped);
        None
    }
}

#[tokio::test]
async fn refused_log_actions_are_skipped_and_left_to_the_rate_to_report() {
    let mut f = fixture(vec![]);
    let spent = Spent::default();
    let policy = Policy::trusted();
    let budget = policy.write_budget();
    for actions in [
        vec![log(), requeue(1000), log(), log()],
        vec![requeue(1000)],
    ] {
        let call = Call {
            logs: &spent,
            ..f.call(&policy, &budget)
        };
        f.pipeline.run(call, &actions).await;
    }
    assert_eq!(
        f.decisions(),
        ["skipped", "executed", "skipped", "skipped", "executed"]
    );
    // Each call offers its count, none or some; the rate decides when a warning is due.
    assert_eq!(*spent.offered.lock().unwrap(), [3, 0]);
}

#[tokio::test]
async fn a_created_object_is_named_as_the_api_server_named_it_if_that_is_a_name() {
    let f = fixture(vec![
        Answer::Named("web-x7k2p", "7"),
        Answer::Named("../Web X", "8"),
        Answer::Ok("9"),
    ]);
    let create = Action::Create {
        manifest: json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"generateName": "web-", "namespace": "team-a"}}),
    };
    let outcome = f
        .run_trusted(&[create.clone(), create.clone(), create])
        .await;
    let written: Vec<_> = outcome
        .writes
        .iter()
        .map(|w| {
            (
                w.change,
                w.object.name.as_str(),
                w.resource_version.as_deref(),
            )
        })
        .collect();
    // A generated name from the answer; an answer that is no object name, or none, leaves
    // the name the manifest gave (none): such a create is not awaited in the cache.
    assert_eq!(
        written,
        [
            (Change::Created, "web-x7k2p", Some("7")),
            (Change::Created, "", Some("8")),
            (Change::Created, "", Some("9")),
        ]
    );
}

/// A Plugin object's writes, Events included, go out as its ServiceAccount (impersonated);
/// a plugin file's as the host.
#[tokio::test]
async fn writes_are_sent_as_the_policys_principal() {
    let f = fixture(vec![]);
    let account = crate::cluster::Principal::service_account("team-a", "deployer").unwrap();
    let policy = Policy {
        principal: Some(account.clone()),
        ..Policy::trusted()
    };
    let event = Action::Event {
        regarding: web("web"),
        event_type: crate::contract::EventType::Normal,
        reason: "Seen".into(),
        message: "m".into(),
        event_action: "Reconcile".into(),
    };
    f.run(&policy, &policy.write_budget(), &[patch("web"), event])
        .await;
    f.run_trusted(&[patch("other")]).await;
    let sent: Vec<Option<String>> = f
        .writer
        .received()
        .iter()
        .map(|r| r.principal.as_ref().map(|p| p.user()))
        .collect();
    let as_account = Some("system:serviceaccount:team-a:deployer".to_string());
    assert_eq!(sent, [as_account.clone(), as_account, None]);
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_lease_ends_between_the_budget_and_the_send_is_not_sent() {
    // The request takes 2 s to leave (a connection being set up, a stalled runtime): the
    // lease's validity, checked when the budget released the write, ends 1 s in.
    let writer = Arc::new(FakeWriter::new([]).with_transport(Duration::from_secs(2)));
    let sink = AuditSink::default();
    let mut f = Fixture {
        pipeline: Pipeline::new(Executor::new(writer.clone(), "host-1"), sink.clone()),
        audit: sink.subscribe(),
        writer,
        ..fixture(vec![])
    };
    let policy = Policy::trusted();
    let budget = policy.write_budget();
    let start = tokio::time::Instant::now();
    let until = start + Duration::from_secs(1);
    let holds = move || match tokio::time::Instant::now() < until {
        true => Hold::Until(until),
        false => Hold::Lost,
    };
    let call = Call {
        holds: &holds,
        ..f.call(&policy, &budget)
    };
    let outcome = f.pipeline.run(call, &[patch("a"), patch("b")]).await;
    assert_eq!(f.writer.received().len(), 0, "nothing left after the lease");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "dropped at the deadline"
    );
    assert_eq!(f.decisions(), ["not-held", "skipped"]);
    assert!(matches!(outcome.failure, Some(CallFailure::NotHeld)));
    // Renewed while it waits (the deadline moves on): it leaves.
    let holds = || Hold::Until(tokio::time::Instant::now() + Duration::from_secs(1));
    let call = Call {
        holds: &holds,
        ..f.call(&policy, &budget)
    };
    let outcome = f.pipeline.run(call, &[patch("a")]).await;
    assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
    assert_eq!(f.writer.received().len(), 1);
}
