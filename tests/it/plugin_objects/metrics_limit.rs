//! `--metrics-per-plugin-limit` (issue 38): with more `Plugin` objects running than the
//! limit, `/metrics` sums their series per namespace (`plugin="ns/*"`), and a deleted
//! Plugin's series go.

use super::*;

/// The body of `GET /metrics` from the host's status server, over a fresh connection.
async fn scrape(t: &Tenancy) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = t.host.server_addr().context("the host serves /metrics")?;
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("an HTTP response")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(body.to_string())
}

/// Waits until a scrape satisfies `done`; that scrape.
async fn scrape_until(t: &Tenancy, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = scrape(t).await.unwrap_or_default();
        if done(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen in\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_metrics_are_summed_per_namespace() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let t = start(|c| {
        c.listen = Some("127.0.0.1:0".parse().unwrap());
        c.controller.metrics = kubeplug::metrics::MetricsRegistry::with_per_plugin_limit(1);
    })
    .await?;
    t.deployment("team-a", "web", "alpine").await?;
    t.apply(POLICY).await?;
    t.module(
        "team-a",
        "pinner",
        "plugin.wasm",
        &common::plugin("image-pinner"),
    )
    .await?;
    t.apply(&pinner("team-a", "first", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "first", "Running").await;
    scrape_until(&t, "team-a/first's own series", |text| {
        text.contains("kubeplug_write_conflicts_total{plugin=\"team-a/first\"} 0")
            && text.contains("kubeplug_reconcile_total{plugin=\"team-a/first\",result=\"success\"}")
    })
    .await;

    t.apply(&pinner("team-a", "second", "pinner", "nginx:1.25", ""))
        .await?;
    t.reason_becomes("team-a", "second", "Running").await;
    let text = scrape_until(&t, "team-a's summed series", |text| {
        text.contains("kubeplug_reconcile_total{plugin=\"team-a/*\",result=\"success\"}")
    })
    .await;
    for summed in [
        "kubeplug_write_conflicts_total{plugin=\"team-a/*\"} 0",
        "kubeplug_reconcile_duration_seconds_count{plugin=\"team-a/*\"}",
        "workqueue_adds_total{name=\"team-a/*\"}",
        "workqueue_depth{name=\"team-a/*\"}",
        "kubeplug_writes_in_flight_limit{plugin=\"team-a/*\"}",
    ] {
        assert!(text.contains(summed), "{summed} missing from\n{text}");
    }
    assert!(!text.contains("team-a/first"), "{text}");
    assert!(!text.contains("team-a/second"), "{text}");
    let own = t.host.controller().metrics_text_per_plugin();
    assert!(
        own.contains("kubeplug_write_conflicts_total{plugin=\"team-a/second\"} 0"),
        "the dashboard's view stays per plugin: {own}"
    );

    // One Plugin again: per plugin, and the deleted one's series are gone.
    t.kubectl(&["-n", "team-a", "delete", "plugin", "first"])
        .await?;
    let text = scrape_until(&t, "team-a/second's own series", |text| {
        text.contains("kubeplug_write_conflicts_total{plugin=\"team-a/second\"} 0")
    })
    .await;
    assert!(!text.contains("team-a/first"), "{text}");
    assert!(!text.contains("team-a/*"), "{text}");
    Ok(())
}
