//! The invariant "the live stream and metrics still answer" after the faults: every host's
//! `GET /metrics` serves the kubeplug metrics, and the hosts' live streams (Server-Sent
//! Events of `GET /api/wds/logs`, opened without replay) deliver a record for a change made
//! after they were opened.

use super::workload::{self, Change};
use futures::StreamExt;
use std::time::{Duration, Instant};

/// The object the stream probe changes (image-pinner sets its image back, so the final
/// objects stay as they were).
const PROBE: &str = "web-0";
/// The most a host may take to answer `/metrics` or open its stream.
const ANSWER: Duration = Duration::from_secs(10);
/// A metric every running host exports.
const METRIC: &str = "kubeplug_reconcile_total";

/// A host's endpoints: its name and base URL (`http://127.0.0.1:PORT`).
pub struct Endpoint {
    /// How violations name it.
    pub name: String,
    /// Where its endpoints are.
    pub base: String,
}

/// What does not answer, one sentence each; waits at most until `deadline` for the stream.
pub async fn check(hosts: &[Endpoint], writer: &kube::Client, deadline: Instant) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut streams = Vec::new();
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(http) => http,
        Err(err) => return vec![format!("no HTTP client for the live check: {err}")],
    };
    for host in hosts {
        let (name, base) = (&host.name, &host.base);
        let metrics = http.get(format!("{base}/metrics")).timeout(ANSWER);
        match metrics.send().await {
            Ok(r) if r.status().is_success() => match r.text().await {
                Ok(body) if body.contains(METRIC) => {}
                Ok(_) => wrong.push(format!("{name}: /metrics has no {METRIC}")),
                Err(err) => wrong.push(format!("{name}: /metrics: {err}")),
            },
            Ok(r) => wrong.push(format!("{name}: /metrics answered {}", r.status())),
            Err(err) => wrong.push(format!("{name}: /metrics: {err}")),
        }
        // `since=0`: only records from now on; `level=debug`: the reconcile lines too. Any
        // plugin's record counts (the pinner is `image-pinner-py` in a ports schedule).
        let url = format!("{base}/api/wds/logs?since=0&level=debug&name={PROBE}");
        let opened = http.get(url).header("Accept", "text/event-stream").send();
        match tokio::time::timeout(ANSWER, opened).await {
            Ok(Ok(response)) => match response.error_for_status() {
                Ok(response) => streams.push(response.bytes_stream()),
                Err(err) => wrong.push(format!("{name}: the live stream: {err}")),
            },
            Ok(Err(err)) => wrong.push(format!("{name}: the live stream: {err}")),
            Err(_) => wrong.push(format!(
                "{name}: the live stream did not open within {ANSWER:?}"
            )),
        }
    }
    if streams.is_empty() {
        return wrong;
    }
    let change = Change::Image {
        deployment: PROBE.to_string(),
        image: "alpine:3.98".to_string(),
    };
    if let Err(err) = workload::apply(writer, &change).await {
        wrong.push(format!("the stream probe could not be written: {err:#}"));
        return wrong;
    }
    // The key's owner among the replicas reconciles it: a record from any stream will do.
    let mut records = futures::stream::select_all(streams.into_iter().map(|s| {
        s.filter_map(|chunk| async move {
            let chunk = chunk.ok()?;
            String::from_utf8_lossy(&chunk)
                .lines()
                .any(|l| l.starts_with("data:"))
                .then_some(())
        })
        .boxed()
    }));
    let left = deadline.saturating_duration_since(Instant::now());
    if !matches!(
        tokio::time::timeout(left, records.next()).await,
        Ok(Some(()))
    ) {
        wrong.push(format!(
            "the live stream delivered no record for a change of Deployment {PROBE} made after the faults"
        ));
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host whose `/metrics` lacks the kubeplug metrics and whose stream opens but never
    /// sends: both are reported.
    #[tokio::test]
    async fn a_host_whose_metrics_and_stream_do_not_answer_is_reported() {
        let sim = kubeplug_sim::Sim::start().await.unwrap();
        sim.apply_yaml(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {PROBE}, namespace: {}}}\nspec: {{selector: {{matchLabels: {{app: a}}}}, template: {{metadata: {{labels: {{app: a}}}}, spec: {{containers: [{{name: app, image: x}}]}}}}}}\n",
            workload::PINNED_NS
        ))
        .unwrap();
        let silent = || async {
            let pending = futures::stream::pending::<Result<String, std::convert::Infallible>>();
            axum::body::Body::from_stream(pending)
        };
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(|| async { "up 1\n" }))
            .route("/api/wds/logs", axum::routing::get(silent));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let host = Endpoint {
            name: "h".into(),
            base: format!("http://{addr}"),
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let wrong = check(&[host], &sim.client().unwrap(), deadline).await;
        assert_eq!(
            wrong,
            [
                format!("h: /metrics has no {METRIC}"),
                format!(
                    "the live stream delivered no record for a change of Deployment {PROBE} made after the faults"
                ),
            ]
        );
    }
}
