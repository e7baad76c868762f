//! Issue 35, fair shares measured: one tenant hostile in every way at once (Plugins on a
//! registry that sends a byte every 5 s, three 12 MiB modules to compile, a flood of Plugins
//! that cannot load, and a plugin that spends its whole call budget on every call), and
//! another tenant's Plugin still becomes Ready and answers its changes within stated bounds.
//! The quiet tenant is measured alone first, then beside the hostile one, in the same run;
//! the figures are printed and the README quotes them.

use super::*;
use crate::registry_hostile::trickling_registry;

/// The quiet tenant's figures: its Plugin's time to Ready, and change→patch latencies.
struct Quiet {
    ready: Duration,
    latencies: Vec<Duration>,
}

impl Quiet {
    fn worst(&self) -> Duration {
        self.latencies.iter().max().copied().unwrap_or_default()
    }

    fn median(&self) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l.get(l.len() / 2).copied().unwrap_or_default()
    }
}

/// Changes a quiet Deployment's image this many times, one after another.
const CHANGES: usize = 8;

/// Applies team-b's Plugin `name` (image `tag`), waits until it runs and has pinned team-b's
/// Deployments, then changes one Deployment's image `CHANGES` times and times each pin.
async fn measure_quiet(t: &Tenancy, name: &str, tag: &kubeplug::oci::OciRef) -> Result<Quiet> {
    let applied = std::time::Instant::now();
    t.apply(&image_pinner("team-b", name, tag)).await?;
    let mut seen = Vec::new();
    eventually(
        WAIT,
        &format!("team-b/{name} Running (seen {seen:?})"),
        || {
            let now = t.condition("team-b", name, "Ready");
            if seen.last() != Some(&now) {
                eprintln!(
                    "{:.1} s team-b/{name}: {now:?}",
                    applied.elapsed().as_secs_f64()
                );
                seen.push(now.clone());
            }
            if applied.elapsed() > Duration::from_secs(50) {
                for l in log_lines_with("") {
                    eprintln!("LOG {l}");
                }
                panic!("dumped");
            }
            now.is_some_and(|(_, r, _)| r == "Running")
        },
    )
    .await;
    let ready = applied.elapsed();
    let pinned = |n: &str| image_of(&t.sim, "team-b", n).as_deref() == Some("nginx:1.25");
    eventually(WAIT, "team-b's Deployments pinned", || {
        ["q0", "q1"].iter().all(|n| pinned(n))
    })
    .await;
    let mut latencies = Vec::new();
    for i in 0..CHANGES {
        t.deployment("team-b", "q0", &format!("alpine:3.{i}"))
            .await?;
        let changed = std::time::Instant::now();
        eventually(WAIT, "team-b's change pinned", || pinned("q0")).await;
        latencies.push(changed.elapsed());
    }
    Ok(Quiet { ready, latencies })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_hostile_in_every_way_leaves_another_its_bounds() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let Some(reg) = crate::registry::Registry::start() else {
        return Ok(());
    };
    let slow = trickling_registry(Duration::from_secs(5)).await.addr;
    let modules = tempfile::tempdir()?;
    let mut args = reg.args(modules.path());
    args.insecure_registry.push(slow.clone());
    let registries = kubeplug::oci::Registries::new(&args)?;
    // A compile cache of its own, empty: every module really compiles.
    let cache = tempfile::tempdir()?;
    let t = start(|c| {
        c.compile_cache = Some(cache.path().to_path_buf());
        let objects = c.objects.as_mut().unwrap();
        objects.registries = Some(registries.clone());
        objects.max_plugins = 64;
    })
    .await?;
    let policy = format!(
        "{}  modules: {{images: [\"{}\", \"{slow}\"]}}\n",
        two_tenants_policy(),
        reg.addr
    );
    t.apply(&policy).await?;
    let pushed = tempfile::tempdir()?;
    let pusher = kubeplug::oci::Registries::new(&reg.args(pushed.path()))?;
    let rust = std::fs::read(common::plugin("image-pinner"))?;
    // The quiet tenant's two modules, distinct so that each really compiles.
    let mut quiet = Vec::new();
    for phase in ["alone", "beside"] {
        let tag = reg.reference(&format!("team-b/pinner-{phase}:v1"));
        let module = with_custom_section(&rust, phase.as_bytes());
        kubeplug::oci::transfer::push(&pusher, &tag, &module).await?;
        quiet.push(tag);
    }
    for name in ["q0", "q1"] {
        t.deployment("team-b", name, "alpine").await?;
    }

    // The quiet tenant alone.
    let alone = measure_quiet(&t, "alone", &quiet[0]).await?;
    t.kubectl(&["delete", "plugin", "alone", "-n", "team-b"])
        .await?;

    // team-a, hostile in every way at once. A plugin spending its whole call budget on every
    // call, over ten Deployments of its own.
    for i in 0..10 {
        t.deployment("team-a", &format!("h{i}"), "alpine").await?;
    }
    t.module(
        "team-a",
        "looper",
        "plugin.wasm",
        &common::test_plugin("hostile"),
    )
    .await?;
    t.apply(
        &PluginYaml::config_map("team-a", "looper", "looper")
            .config("{mode: loop}")
            .patching(IMAGE_FIELD)
            .yaml(),
    )
    .await?;
    // Three 12 MiB TypeScript modules to compile.
    let js = std::fs::read(common::plugin("image-pinner-js"))?;
    for i in 0..3 {
        let tag = reg.reference(&format!("team-a/big-{i}:v1"));
        let module = with_custom_section(&js, format!("noisy {i}").as_bytes());
        kubeplug::oci::transfer::push(&pusher, &tag, &module).await?;
        t.apply(&image_pinner("team-a", &format!("big-{i}"), &tag))
            .await?;
    }
    // Pulled (they compile one after another from now on) before the trickling pulls take
    // every pull slot the host has.
    eventually(WAIT, "team-a's big modules pulled", || {
        reasons(&t, "team-a", "big-", 3)
            .iter()
            .all(|r| !r.is_empty() && r != "Pulling")
    })
    .await;
    // Five Plugins on the trickling registry (more than the host's pull slots).
    for i in 0..5 {
        let tag = format!("oci://{slow}/team-a/slow-{i}:v1");
        t.apply(&PluginYaml::image("team-a", &format!("slow-{i}"), tag).yaml())
            .await?;
    }
    // A flood of Plugins whose module does not even compile.
    let junk = t.file("junk.wasm", b"\0asm\x0d\0\x01\0\xff\xfe\xfd no component");
    t.module("team-a", "junk", "plugin.wasm", &junk).await?;
    for i in 0..20 {
        t.apply(&pinner(
            "team-a",
            &format!("junk-{i}"),
            "junk",
            "nginx:1.25",
            "",
        ))
        .await?;
    }
    // Each hostile part is under way before the quiet tenant is measured again.
    t.reason_becomes("team-a", "looper", "Running").await;
    let mut slow_reasons = Vec::new();
    eventually(WAIT, "team-a's pulls hanging", || {
        slow_reasons = reasons(&t, "team-a", "slow-", 5);
        slow_reasons.iter().filter(|r| *r == "Pulling").count() >= 4
    })
    .await;
    eventually(WAIT, "team-a's looper spending its budget", || {
        t.host.controller().metrics_text().lines().any(|l| {
            l.starts_with("kubeplug_reconcile_total{plugin=\"team-a/looper\",result=\"timeout\"}")
        })
    })
    .await;

    let beside = measure_quiet(&t, "beside", &quiet[1]).await?;
    let big = reasons(&t, "team-a", "big-", 3);
    println!(
        "quiet tenant alone: Ready {:.1} s, change->patch p50 {:.0} ms, max {:.0} ms; \
         beside the hostile tenant: Ready {:.1} s, p50 {:.0} ms, max {:.0} ms \
         (team-a's pulls: {slow_reasons:?}, big modules then: {big:?})",
        alone.ready.as_secs_f64(),
        alone.median().as_secs_f64() * 1e3,
        alone.worst().as_secs_f64() * 1e3,
        beside.ready.as_secs_f64(),
        beside.median().as_secs_f64() * 1e3,
        beside.worst().as_secs_f64() * 1e3,
    );
    // The bounds, from measurements on a loaded 2-core machine (README, "fair shares"):
    // beside the hostile tenant, Ready in 2.0 s and changes pinned in 22 ms (median) where
    // alone they took 0.7 s and under 22 ms. Before guest code yielded through tokio's
    // `yield_now`, two spinning calls kept the runtime's threads: Ready took 44 s and the
    // median change 1.2 s. The bounds leave room for a loaded machine and still catch that.
    assert!(
        beside.ready < Duration::from_secs(20),
        "the quiet tenant's Plugin took {:?} to become Ready",
        beside.ready
    );
    assert!(
        beside.median() < Duration::from_secs(1) && beside.worst() < Duration::from_secs(10),
        "the quiet tenant's changes took {:?} to be pinned",
        beside.latencies
    );
    Ok(())
}
