//! The pipeline against the fake API server: what a call's actions come to, and what is
//! sent and audited on the way.

use super::*;
use crate::actions::fake::{Answer, FakeWriter};
use crate::actions::target::Method;
use crate::actions::writer::ApiRequest;
use crate::contract::{LogLevel, PatchType};
use crate::policy::WriteBudget;
use serde_json::json;
use tokio::sync::broadcast::Receiver;

struct Fixture {
    pipeline: Pipeline,
    writer: Arc<FakeWriter>,
    audit: Receiver<Arc<AuditRecord>>,
    identity: Arc<PluginIdentity>,
    stop: watch::Sender<bool>,
}

fn fixture(script: Vec<Answer>) -> Fixture {
    let writer = Arc::new(FakeWriter::new(script));
    let sink = AuditSink::default();
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
    }
}

impl Fixture {
    async fn run(&self, policy: &Policy, budget: &WriteBudget, actions: &[Action]) -> CallOutcome {
        let call = Call {
            plugin: "probe",
            key: "team-a/web",
            identity: &self.identity,
            policy,
            budget,
            admit_log: &|_| true,
            stopped: self.stop.subscribe(),
            holds: &|| true,
        };
        self.pipeline.run(call, actions).await
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
