//! The invariant "the live stream and metrics still answer" after the faults: every host's
//! `GET /metrics` serves the kubeplug metrics, and the hosts' live streams (Server-Sent
//! Events of `GET /api/wds/logs`, opened without replay) deliver a record for a change made
//! after they were opened.

use super::host_process::HostProcess;
use super::workload::{self, Change};
use futures::StreamExt;
use std::time::Instant;

/// The object the stream probe changes (image-pinner sets its image back, so the final
/// objects stay as they were).
const PROBE: &str = "web-0";
/// A metric every running host exports.
const METRIC: &str = "kubeplug_reconcile_total";

/// What does not answer, one sentence each; waits at most until `deadline`.
pub async fn check(
    hosts: &[&HostProcess],
    writer: &kube::Client,
    deadline: Instant,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut streams = Vec::new();
    for host in hosts {
        let (http, base) = host.http();
        match http.get(format!("{base}/metrics")).send().await {
            Ok(r) if r.status().is_success() => match r.text().await {
                Ok(body) if body.contains(METRIC) => {}
                Ok(_) => wrong.push(format!("chaos-host-{}: /metrics has no {METRIC}", host.n)),
                Err(err) => wrong.push(format!("chaos-host-{}: /metrics: {err}", host.n)),
            },
            Ok(r) => wrong.push(format!(
                "chaos-host-{}: /metrics answered {}",
                host.n,
                r.status()
            )),
            Err(err) => wrong.push(format!("chaos-host-{}: /metrics: {err}", host.n)),
        }
        // `since=0`: only records from now on; `level=debug`: the reconcile lines too.
        let url =
            format!("{base}/api/wds/logs?since=0&level=debug&plugin=image-pinner&name={PROBE}");
        let opened = reqwest::Client::new()
            .get(url)
            .header("Accept", "text/event-stream")
            .send()
            .await
            .and_then(reqwest::Response::error_for_status);
        match opened {
            Ok(response) => streams.push(response.bytes_stream()),
            Err(err) => wrong.push(format!("chaos-host-{}: the live stream: {err}", host.n)),
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
