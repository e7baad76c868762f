//! Fault schedules (`kubeplug sim --faults FILE`, `POST /sim/faults`): every fault kind as a
//! kube client or a raw HTTP client sees it, the counts `GET /sim/faults` reports, and the
//! same seed giving the same faults.

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kubeplug_sim::{Schedule, Sim};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{api_code, lease, sim};

type Result<T = ()> = anyhow::Result<T>;

const WAIT: Duration = Duration::from_secs(10);
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

/// A sim serving `yaml` as its fault schedule (set over `POST /sim/faults`, as a user would),
/// and a client of its Leases in `default`.
async fn leases_with(yaml: &str) -> Result<(Sim, Api<Lease>)> {
    let (sim, api) = leases().await?;
    let (code, _, body) = raw(&sim, "POST", "/sim/faults", yaml).await?;
    anyhow::ensure!(code == 200, "schedule refused: {body}");
    Ok((sim, api))
}

/// A sim without faults, and a client of its Leases in `default`.
async fn leases() -> Result<(Sim, Api<Lease>)> {
    let sim = sim().await?;
    let api = Api::default_namespaced(sim.client()?);
    Ok((sim, api))
}

/// Polls `check` until it holds or the deadline passes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) -> Result {
    let deadline = Instant::now() + WAIT;
    while !check() {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A plain HTTP/1.1 request (Connection: close): status, lowercased head, and the raw body
/// (chunk framing included) read until the server closes or aborts the connection.
async fn raw(sim: &Sim, method: &str, path: &str, body: &str) -> Result<(u16, String, String)> {
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        sim.addr(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await? {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok((status, head.to_lowercase(), body.to_string()))
}

/// The `GET /sim/faults` report.
async fn report(sim: &Sim) -> Result<Value> {
    let (code, _, body) = raw(sim, "GET", "/sim/faults", "").await?;
    anyhow::ensure!(code == 200, "{body}");
    Ok(serde_json::from_str(&body)?)
}

/// Watch event lines (`ADDED`, ...) in a raw chunked body.
fn event_types(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["type"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_410_gone_as_its_http_status() -> Result {
    let (sim, api) = leases_with(
        "seed: 1\nrules:\n  - {match: {resources: [leases]}, maxFaults: 1, fault: goneWatch}\n",
    )
    .await?;
    let rv = sim.resource_version();
    let (code, _, body) = raw(
        &sim,
        "GET",
        &format!("{LEASES}?watch=1&resourceVersion={rv}"),
        "",
    )
    .await?;
    assert_eq!(code, 410, "{body}");
    let status: Value = serde_json::from_str(&body)?;
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Expired");
    assert_eq!(status["code"], 410);
    let err = api
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .err();
    assert!(err.is_none(), "only the first watch: {err:?}");
    let report = report(&sim).await?;
    assert_eq!(report["schedule"]["injected"], 1);
    assert_eq!(report["schedule"]["rules"][0]["injected"], 1);
    assert_eq!(report["schedule"]["rules"][0]["matched"], 2);
    let faulted: Vec<_> = sim
        .requests()
        .since(0)
        .into_iter()
        .filter_map(|r| r.fault)
        .collect();
    assert_eq!(faulted, [r#"rule 0: {"goneWatch":{}}"#]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_with_a_410_error_event_in_its_stream() -> Result {
    let (sim, api) = leases_with("rules: [{maxFaults: 1, fault: goneWatchEvent}]").await?;
    let rv = sim.resource_version().to_string();
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    let first = tokio::time::timeout(WAIT, stream.try_next()).await??;
    assert!(
        matches!(&first, Some(WatchEvent::Error(s)) if s.code == 410 && s.reason == "Expired"),
        "{first:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_continuation_answered_410_expired() -> Result {
    let (_sim, api) = leases_with("rules: [{match: {resources: [leases.coordination.k8s.io]}, maxFaults: 1, fault: goneContinue}]").await?;
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &lease(name, json!({})))
            .await?;
    }
    let first = api.list(&ListParams::default().limit(1)).await?;
    let token = first.metadata.continue_.clone().expect("a continue token");
    let err = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap_err();
    match &err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 Expired, got {other}"),
    }
    let again = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await?;
    assert_eq!(again.items.len(), 1, "only one continuation failed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_sends_nothing_and_is_held_until_the_client_leaves() -> Result {
    let (sim, api) =
        leases_with("rules: [{match: {verbs: [watch]}, maxFaults: 1, fault: stallWatch}]").await?;
    let rv = sim.resource_version().to_string();
    let mut stalled = api.watch(&WatchParams::default(), &rv).await?.boxed();
    let mut control = api.watch(&WatchParams::default(), &rv).await?.boxed();
    eventually("the watch to be stalled", || {
        sim.faults().state().stalled_watches == 1
    })
    .await?;
    api.create(&PostParams::default(), &lease("x", json!({})))
        .await?;
    // The control watch, opened after it, sees the change and a bookmark after it.
    let mut seen_added = false;
    loop {
        match tokio::time::timeout(WAIT, control.try_next()).await?? {
            Some(WatchEvent::Added(_)) => seen_added = true,
            Some(WatchEvent::Bookmark(_)) if seen_added => break,
            Some(_) => {}
            None => anyhow::bail!("control watch ended"),
        }
    }
    assert!(
        stalled.next().now_or_never().is_none(),
        "a stalled watch sends no event and no bookmark"
    );
    assert_eq!(sim.faults().state().stalled_watches, 1, "still held");
    drop(stalled);
    eventually("the stalled watch to be let go", || {
        sim.faults().state().stalled_watches == 0
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_closed_after_k_events() -> Result {
    let (sim, api) =
        leases_with("rules: [{maxFaults: 1, fault: {closeWatch: {afterEvents: 2}}}]").await?;
    let rv = sim.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &lease(name, json!({})))
            .await?;
    }
    let mut added = Vec::new();
    while let Some(event) = tokio::time::timeout(WAIT, stream.try_next()).await?? {
        match event {
            WatchEvent::Added(l) => added.push(l.metadata.name.unwrap_or_default()),
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, ["a", "b"], "ended cleanly after two events");
    // Raw: the chunked body ends with its terminating chunk (a clean end, not a reset).
    let rule = "rules: [{maxFaults: 1, fault: {closeWatch: {afterEvents: 1}}}]";
    let (code, _, _) = raw(&sim, "POST", "/sim/faults", rule).await?;
    assert_eq!(code, 200);
    let (code, _, body) = raw(&sim, "GET", &format!("{LEASES}?watch=1"), "").await?;
    assert_eq!(code, 200);
    assert_eq!(event_types(&body), ["ADDED"]);
    assert!(body.ends_with("0\r\n\r\n"), "{body:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reset_after_k_events_and_a_list_reset_mid_body() -> Result {
    let (sim, api) = leases_with("rules:\n  - {match: {verbs: [watch]}, maxFaults: 1, fault: {reset: {afterEvents: 1}}}\n  - {match: {verbs: [list]}, maxFaults: 1, fault: reset}\n").await?;
    for i in 0..20 {
        api.create(&PostParams::default(), &lease(&format!("l{i}"), json!({})))
            .await?;
    }
    let (code, _, body) = raw(&sim, "GET", &format!("{LEASES}?watch=1"), "").await?;
    assert_eq!(code, 200);
    assert_eq!(event_types(&body), ["ADDED"], "one event, then the abort");
    assert!(
        !body.ends_with("0\r\n\r\n"),
        "no terminating chunk: {body:?}"
    );

    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), None, "a broken body, not an answer: {err}");
    assert_eq!(api.list(&ListParams::default()).await?.items.len(), 20);
    let record = sim
        .requests()
        .since(0)
        .into_iter()
        .find(|r| r.verb == "list" && r.fault.is_some())
        .expect("the reset list is recorded");
    assert_eq!(
        record.fault.as_deref(),
        Some(r#"rule 1: {"reset":{"afterEvents":0}}"#)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_events_keep_their_order_per_object() -> Result {
    let (sim, api) =
        leases_with("rules: [{match: {verbs: [watch]}, fault: {delayEvents: {ms: 100}}}]").await?;
    let rv = sim.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    let mut last_rv: HashMap<String, u64> = HashMap::new();
    let before_first_write = Instant::now();
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &lease(name, json!({})))
            .await?;
    }
    for i in 0..5 {
        for name in ["a", "b"] {
            let patch = Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}}));
            let l = api.patch(name, &PatchParams::default(), &patch).await?;
            last_rv.insert(name.into(), l.metadata.resource_version.unwrap().parse()?);
        }
    }
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    while seen.values().map(Vec::len).sum::<usize>() < 12 {
        let event = tokio::time::timeout(WAIT, stream.try_next())
            .await??
            .expect("the stream goes on");
        let lease = match event {
            WatchEvent::Added(l) | WatchEvent::Modified(l) => l,
            other => anyhow::bail!("unexpected {other:?}"),
        };
        if seen.is_empty() {
            // A lower bound only: the first event was due 100 ms after its write at the earliest.
            assert!(before_first_write.elapsed() >= Duration::from_millis(100));
        }
        let name = lease.metadata.name.unwrap_or_default();
        let rv: u64 = lease
            .metadata
            .resource_version
            .unwrap_or_default()
            .parse()?;
        seen.entry(name).or_default().push(rv);
    }
    for (name, rvs) in &seen {
        assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{name}: {rvs:?}");
        assert_eq!(rvs.len(), 6, "{name}: every event arrives");
        assert_eq!(rvs.last(), last_rv.get(name), "{name}: the last one too");
    }
    assert_eq!(report(&sim).await?["schedule"]["injected"], 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_429_with_retry_after_and_5xx() -> Result {
    let (sim, _) = leases_with(
        r#"
seed: 3
rules:
  - {match: {verbs: [get]}, maxFaults: 1, fault: {error: {status: 429, retryAfterSeconds: 3}}}
  - {match: {verbs: [get]}, maxFaults: 1, fault: {error: {status: 500}}}
  - {match: {verbs: [get]}, maxFaults: 1, fault: {error: {status: 503}}}
  - {match: {verbs: [get]}, maxFaults: 1, fault: {error: {status: 504}}}
"#,
    )
    .await?;
    let path = format!("{LEASES}/none");
    let mut answers = Vec::new();
    for _ in 0..5 {
        let (code, head, body) = raw(&sim, "GET", &path, "").await?;
        let reason = serde_json::from_str::<Value>(&body)?["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        answers.push((code, reason, head.contains("retry-after: 3")));
    }
    let expect = [
        (429, "TooManyRequests", true),
        (500, "InternalError", false),
        (503, "ServiceUnavailable", false),
        (504, "Timeout", false),
        (404, "NotFound", false),
    ];
    let answers: Vec<(u16, &str, bool)> = answers
        .iter()
        .map(|(c, r, h)| (*c, r.as_str(), *h))
        .collect();
    assert_eq!(answers, expect);
    let report = report(&sim).await?;
    assert_eq!(report["schedule"]["seed"], 3);
    assert_eq!(report["schedule"]["injected"], 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_closes_the_connection_without_an_answer() -> Result {
    let (_sim, api) =
        leases_with("rules: [{match: {verbs: [get]}, maxFaults: 1, fault: {timeout: {ms: 50}}}]")
            .await?;
    let err = api.get_opt("x").await.unwrap_err();
    assert_eq!(api_code(&err), None, "no answer: {err}");
    assert!(api.get_opt("x").await?.is_none(), "then served again");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_response() -> Result {
    let (sim, api) =
        leases_with("rules: [{match: {verbs: [get]}, maxFaults: 1, fault: {latency: {ms: 150}}}]")
            .await?;
    let start = Instant::now();
    assert!(api.get_opt("x").await?.is_none(), "served, late");
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert_eq!(sim.faults().injected(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_would_succeed_answered_409() -> Result {
    let (_sim, api) = leases_with(
        "rules: [{match: {verbs: [patch], kinds: [lease]}, maxFaults: 1, fault: conflict}]",
    )
    .await?;
    api.create(&PostParams::default(), &lease("c", json!({"v": "1"})))
        .await?;
    let patch = Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}}));
    let err = api
        .patch("c", &PatchParams::default(), &patch)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    let unchanged = api.get("c").await?;
    assert_eq!(
        unchanged.metadata.labels.unwrap()["v"],
        "1",
        "not carried out"
    );
    api.patch("c", &PatchParams::default(), &patch).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_list_serves_an_older_resource_version() -> Result {
    let (sim, api) = leases().await?;
    let created = api
        .create(&PostParams::default(), &lease("old", json!({"v": "1"})))
        .await?;
    let created_rv: u64 = created.metadata.resource_version.unwrap().parse()?;
    let patch = Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}}));
    api.patch("old", &PatchParams::default(), &patch).await?;
    api.create(&PostParams::default(), &lease("new", json!({})))
        .await?;
    let behind = sim.resource_version() - created_rv;
    let rule = format!("rules: [{{maxFaults: 1, fault: {{staleList: {{revisions: {behind}}}}}}}]");
    let (code, _, body) = raw(&sim, "POST", "/sim/faults", &rule).await?;
    assert_eq!(code, 200, "{body}");
    let stale = api.list(&ListParams::default()).await?;
    assert_eq!(
        stale.metadata.resource_version.as_deref(),
        Some(created_rv.to_string().as_str())
    );
    let names: Vec<_> = stale
        .items
        .iter()
        .map(|l| l.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["old"], "the later create is not there yet");
    assert_eq!(stale.items[0].metadata.labels.as_ref().unwrap()["v"], "1");
    let fresh = api.list(&ListParams::default()).await?;
    assert_eq!(fresh.items.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_gives_the_same_faults() -> Result {
    let schedule = |seed: u64| {
        format!(
            "seed: {seed}\nrules:\n  - {{match: {{verbs: [get], resources: [leases]}}, ratio: 0.4, after: 2, for: 30, fault: {{error: {{status: 503}}}}}}\n"
        )
    };
    let run = |seed: u64| async move {
        let sim = Sim::builder()
            .fault_schedule(Schedule::from_yaml(&schedule(seed))?)
            .start()
            .await?;
        let mut codes = Vec::new();
        for _ in 0..40 {
            codes.push(raw(&sim, "GET", &format!("{LEASES}/x"), "").await?.0);
        }
        let injected = sim.faults().injected();
        anyhow::Ok((codes, injected))
    };
    let (first, injected) = run(9).await?;
    let (second, _) = run(9).await?;
    assert_eq!(first, second);
    let faulted = first.iter().filter(|c| **c == 503).count() as u64;
    assert_eq!(faulted, injected);
    assert!(faulted > 0 && faulted < 30, "{first:?}");
    assert!(
        first[..2].iter().chain(&first[32..]).all(|c| *c == 404),
        "window: {first:?}"
    );
    assert_ne!(first, run(10).await?.0, "another seed, other faults");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_schedule_is_refused_naming_the_rule_and_field() -> Result {
    let sim = sim().await?;
    let yaml = "seed: 1\nrules:\n  - fault: goneWatch\n  - fault: {error: {status: 418}}\n";
    let (code, _, body) = raw(&sim, "POST", "/sim/faults", yaml).await?;
    assert_eq!(code, 400);
    assert!(
        body.contains("rules[1].fault.error.status: 418 is not one of"),
        "{body}"
    );
    let err =
        Schedule::from_yaml("rules: [{match: {verbs: [watch]}, evryNth: 2, fault: stallWatch}]")
            .unwrap_err();
    assert_eq!(err.to_string().split(':').next(), Some("rules[0]"));
    assert!(err.message.contains("unknown field `evryNth`"), "{err}");
    let started = Sim::builder()
        .fault_schedule(kubeplug_sim::Schedule {
            seed: 0,
            rules: vec![kubeplug_sim::Rule {
                ratio: Some(2.0),
                ..kubeplug_sim::Rule::new(kubeplug_sim::Fault::Conflict {})
            }],
        })
        .start()
        .await;
    assert!(matches!(started, Err(e) if e.to_string().contains("rules[0].ratio")));
    // The JSON switches still work beside a schedule, and DELETE clears both.
    let (code, _, _) = raw(&sim, "POST", "/sim/faults", "rules: [{fault: conflict}]").await?;
    assert_eq!(code, 200);
    let (code, _, _) = raw(&sim, "POST", "/sim/faults", r#"{"conflicts": 1}"#).await?;
    assert_eq!(code, 200);
    let state = report(&sim).await?;
    assert_eq!(state["conflicts"], 1);
    assert_eq!(
        state["schedule"]["rules"][0]["fault"],
        json!({"conflict": {}})
    );
    let (code, _, _) = raw(&sim, "DELETE", "/sim/faults", "").await?;
    assert_eq!(code, 200);
    assert_eq!(sim.faults().state(), Default::default());
    Ok(())
}
