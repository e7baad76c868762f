//! Throughput of the embedded API server through a real `kube::Client` over HTTP:
//! creates/s, list of 10,000 Deployments, patches/s (merge and server-side apply), and watch
//! fan-out to 10 watchers (events delivered per second), deletes with garbage collection, and
//! strategic merge patches of realistic 6 KB Deployments (the write a controller sends).
//!
//! Run: `cargo bench -p kubeplug-sim --bench sim` (set `SIM_BENCH_OBJECTS` to change the size,
//! `SIM_BENCH_ONLY=strategic` to run only the large-object strategic patches, all
//! `SIM_BENCH_OBJECTS` of them rather than at most 2,000).

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kubeplug_sim::Sim;
use serde_json::json;
use std::time::{Duration, Instant};

const CONCURRENCY: usize = 16;
const WATCHERS: usize = 10;

fn deployment(i: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": format!("d{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                    "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}]}}}
    }))
    .expect("valid deployment")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// GET over a plain connection, reading the whole body; returns its size.
async fn raw_get(sim: &Sim, path: &str) -> anyhow::Result<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await?;
    Ok(body.len())
}

/// The allocator and settings of the `kubeplug` binary that serves `kubeplug sim`, so the
/// figures are its. `SIM_PURGE=<ms>` sets mimalloc's purge delay instead (0 is what
/// `kubeplug run` uses).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option, as the `kubeplug` binary names it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> anyhow::Result<()> {
    if let Ok(delay) = std::env::var("SIM_PURGE") {
        // SAFETY: sets a process-wide option before any thread starts.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay.parse()?) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let objects: usize = std::env::var("SIM_BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let sim = Sim::builder()
        .history(100_000)
        .watch_buffer(100_000)
        .status_delay(Duration::from_secs(3600))
        .auto_create_namespaces(true)
        .start()
        .await?;
    let client = sim.client()?;
    // `SIM_BENCH_ONLY=strategic` runs only the large-object patches (for profiling them).
    if std::env::var("SIM_BENCH_ONLY").is_ok_and(|only| only == "strategic") {
        return strategic_patches_of_large_objects(&client, objects).await;
    }
    let api: Api<Deployment> = Api::default_namespaced(client.clone());

    let start = Instant::now();
    stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &deployment(i)).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let elapsed = start.elapsed();
    println!(
        "create: {objects} Deployments in {elapsed:?} = {:.0} creates/s",
        objects as f64 / elapsed.as_secs_f64()
    );

    let mut full = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        full.push(start.elapsed());
        assert_eq!(list.items.len(), objects);
    }
    println!(
        "list (one request, typed decode): {objects} Deployments, median {:?}",
        median(full)
    );
    let mut paged = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let mut count = 0;
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(500);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = api.list(&lp).await?;
            count += page.items.len();
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        assert_eq!(count, objects);
        paged.push(start.elapsed());
    }
    println!(
        "list (limit=500 pages): {objects} Deployments, median {:?}",
        median(paged)
    );

    let mut raw = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let start = Instant::now();
        bytes = raw_get(&sim, "/apis/apps/v1/namespaces/default/deployments").await?;
        raw.push(start.elapsed());
    }
    println!(
        "list (one request, raw HTTP, no decode): {objects} Deployments ({:.1} MB), median {:?}",
        bytes as f64 / 1e6,
        median(raw)
    );

    let patches = objects.min(5_000);
    let rv_before_patches = sim.resource_version().to_string();
    let start = Instant::now();
    stream::iter(0..patches)
        .map(|i| {
            let api = api.clone();
            async move {
                let patch =
                    Patch::Merge(json!({"metadata": {"annotations": {"bench": i.to_string()}}}));
                api.patch(&format!("d{i:05}"), &PatchParams::default(), &patch)
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let elapsed = start.elapsed();
    println!(
        "merge patch: {patches} in {elapsed:?} = {:.0} patches/s",
        patches as f64 / elapsed.as_secs_f64()
    );

    let start = Instant::now();
    stream::iter(0..patches)
        .map(|i| {
            let api = api.clone();
            async move {
                let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": format!("d{i:05}")},
                    "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}});
                api.patch(&format!("d{i:05}"), &PatchParams::apply("bench").force(), &Patch::Apply(config)).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let elapsed = start.elapsed();
    println!(
        "server-side apply: {patches} in {elapsed:?} = {:.0} applies/s",
        patches as f64 / elapsed.as_secs_f64()
    );

    let rv = sim.resource_version().to_string();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let stream = api
            .watch(&WatchParams::default().disable_bookmarks(), &rv)
            .await?;
        watchers.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut seen = 0usize;
            while seen < patches {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Modified(_))) => seen += 1,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            seen
        }));
    }
    let start = Instant::now();
    stream::iter(0..patches)
        .map(|i| {
            let api = api.clone();
            async move {
                let patch =
                    Patch::Merge(json!({"metadata": {"annotations": {"fanout": i.to_string()}}}));
                api.patch(&format!("d{i:05}"), &PatchParams::default(), &patch)
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let writes = start.elapsed();
    let mut delivered = 0;
    for w in watchers {
        delivered += w.await?;
    }
    let elapsed = start.elapsed();
    anyhow::ensure!(
        delivered == patches * WATCHERS,
        "watchers saw {delivered} of {} events",
        patches * WATCHERS
    );
    println!(
        "watch fan-out: {WATCHERS} watchers x {patches} events = {delivered} delivered in {elapsed:?} = {:.0} events/s (writes took {writes:?})",
        delivered as f64 / elapsed.as_secs_f64()
    );

    // Pure delivery: the same events replayed from the history to 10 new watchers at once.
    let start = Instant::now();
    let mut replays = Vec::new();
    for _ in 0..WATCHERS {
        let stream = api
            .watch(
                &WatchParams::default().disable_bookmarks(),
                &rv_before_patches,
            )
            .await?;
        replays.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut seen = 0usize;
            while seen < 3 * patches {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Modified(_))) => seen += 1,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            seen
        }));
    }
    let mut replayed = 0;
    for r in replays {
        replayed += r.await?;
    }
    let elapsed = start.elapsed();
    anyhow::ensure!(replayed == 3 * patches * WATCHERS, "replayed {replayed}");
    println!(
        "watch replay fan-out: {WATCHERS} watchers x {} history events = {replayed} delivered in {elapsed:?} = {:.0} events/s",
        3 * patches,
        replayed as f64 / elapsed.as_secs_f64()
    );

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let owners = objects.min(2_000);
    stream::iter(0..owners)
        .map(|i| {
            let (api, pods) = (api.clone(), pods.clone());
            async move {
                let owner = api.get(&format!("d{i:05}")).await?;
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i:05}"), "ownerReferences": [{"apiVersion": "apps/v1",
                        "kind": "Deployment", "name": owner.metadata.name, "uid": owner.metadata.uid}]},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}))
                .expect("valid pod");
                pods.create(&PostParams::default(), &pod).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let start = Instant::now();
    stream::iter(0..owners)
        .map(|i| {
            let api = api.clone();
            async move {
                api.delete(&format!("d{i:05}"), &DeleteParams::background())
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    while sim.count("pods", None) > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = start.elapsed();
    println!(
        "delete with garbage collection: {owners} owners + {owners} dependents gone in {elapsed:?} = {:.0} owners/s (store had {} objects)",
        owners as f64 / elapsed.as_secs_f64(),
        objects + owners
    );
    strategic_patches_of_large_objects(&client, objects.min(2_000)).await
}

/// Creates `n` copies of the 6 KB fixture Deployment, then sends each one strategic merge
/// patch of its first container's image, as image-pinner does.
async fn strategic_patches_of_large_objects(client: &kube::Client, n: usize) -> anyhow::Result<()> {
    const FIXTURE: &str = include_str!("../../../tests/fixtures/deployment-6k.json");
    let mut template: serde_json::Value = serde_json::from_str(FIXTURE)?;
    let meta = template["metadata"].as_object_mut().expect("metadata");
    for f in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "namespace",
        "managedFields",
    ] {
        meta.remove(f);
    }
    template.as_object_mut().expect("object").remove("status");
    let container = template["spec"]["template"]["spec"]["containers"][0]["name"]
        .as_str()
        .expect("a container")
        .to_string();
    let size = serde_json::to_vec(&template)?.len();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "big");
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let mut object = template.clone();
            object["metadata"]["name"] = json!(format!("big{i:05}"));
            async move {
                let d: Deployment = serde_json::from_value(object)?;
                api.create(&PostParams::default(), &d).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let patch = json!({"spec": {"template": {"spec": {"containers": [
                {"name": container, "image": format!("nginx:1.{i}")}]}}}});
            async move {
                api.patch(
                    &format!("big{i:05}"),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let elapsed = start.elapsed();
    println!(
        "strategic merge patch of {size}-byte Deployments: {n} in {elapsed:?} = {:.0} patches/s",
        n as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
