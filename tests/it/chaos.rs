//! `kubeplug chaos` end to end: the engine runs the four seed plugins, as `kubeplug run`
//! processes, against the embedded API server under generated fault schedules, host kills
//! and restarts, and (seed 1's schedules 0 and 1) two sharded replicas one of which is
//! paused longer, then shorter, than its Lease; it reports in its format. The fault-free run
//! must pass the invariants, its writes all changes (no no-op), and every outcome counts its
//! writes against the write bound. The checker's own tests (planted duplicated children, unpinned
//! Deployments, orphans, silent metrics and stream) are beside it in host/src/chaos/.

use crate::common;

use common::cluster::capture_logs;
use kubeplug::chaos::{ChaosConfig, FaultPlan, LEASE, Report};

fn config(seed: u64, schedules: u64) -> ChaosConfig {
    common::chaos_config(seed, schedules)
}

fn summary(report: &Report) -> String {
    report
        .to_string()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_runs_schedules_with_faults_restarts_and_paused_replicas_and_reports_each_violation()
{
    capture_logs();
    let config = config(1, 2);
    let pauses: Vec<_> = (0..2)
        .map(|i| FaultPlan::generate(1, i, config.window))
        .map(|p| {
            (
                p.replicas,
                p.pause.expect("seed 1's first plans pause").length,
            )
        })
        .collect();
    assert!(
        matches!(pauses[..], [(2, long), (2, short)] if long > LEASE && short < LEASE),
        "seed 1's schedule 0 pauses one of two replicas longer than its Lease, 1 shorter: {pauses:?}"
    );
    let report = kubeplug::chaos::run(&config).await.unwrap();
    let text = report.to_string();
    println!("{text}");
    assert!(
        report.baseline.violations.is_empty(),
        "the fault-free run holds every invariant:\n{text}"
    );
    assert!(report.baseline.writes.total > 0, "{text}");
    let bound = &report.baseline.bound;
    assert!(
        bound.changes > 0 && bound.no_ops == 0 && bound.violations.is_empty(),
        "the fault-free run's writes are changes, no no-op among them:\n{text}"
    );
    for s in &report.schedules {
        let b = &s.bound;
        assert_eq!(
            b.writes,
            b.changes + b.no_ops + b.faulted + b.refused,
            "{text}"
        );
    }
    assert!(
        text.contains(" writes = ") && text.contains(" changes ("),
        "each outcome says its writes: {text}"
    );
    assert_eq!(report.schedules.len(), 2);
    for s in &report.schedules {
        assert!(s.plan.contains("2 replicas, one paused"), "{text}");
    }
    assert_eq!(report.restarts(), 2, "one restart per schedule:\n{text}");
    assert!(report.faults() > 0, "faults were injected:\n{text}");
    let expected = format!(
        "chaos: 2 schedules, {} violations, {} faults injected, 2 restarts",
        report.violations().len(),
        report.faults()
    );
    assert_eq!(summary(&report), expected);
    for v in report.violations() {
        let index = v.schedule.expect("only schedules have violations");
        assert!(
            text.contains(&format!(
                "violation: seed 1, schedule {index} (kubeplug chaos --seed 1 --only {index} --plugin-set rust): {}",
                v.what
            )),
            "{text}"
        );
    }
}

/// A longer run for exploring (`KUBEPLUG_CHAOS_SEED`, `KUBEPLUG_CHAOS_SCHEDULES`,
/// `KUBEPLUG_CHAOS_PLUGINS`: rust, ports or alternate), printing
/// its report: `cargo test -p kubeplug --test it -- chaos::explore --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long; for exploring seeds"]
async fn explore() {
    capture_logs();
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let mut config = config(
        env("KUBEPLUG_CHAOS_SEED", 1),
        env("KUBEPLUG_CHAOS_SCHEDULES", 5),
    );
    config.only = std::env::var("KUBEPLUG_CHAOS_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    if let Ok(set) = std::env::var("KUBEPLUG_CHAOS_PLUGINS") {
        config.plugin_sets = clap::ValueEnum::from_str(&set, false).unwrap();
    }
    let report = kubeplug::chaos::run(&config).await.unwrap();
    println!("{report}");
}
