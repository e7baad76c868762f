//! Phase 8, the decision ledger's cost (issue 39): kubeplug's cold start on the bench's
//! objects (phase 1) and its RSS once converged (phase 4), with its ledger and with
//! `--no-ledger`, in the same run. The runs alternate in pairs, off/on then on/off
//! (`KUBEPLUG_E2E_LEDGER` pairs, default 2; `0` skips the phase), and the medians are
//! compared, so a machine that slows down during the phase weighs on both sides alike.

use crate::harness::Sim;
use crate::{Contender, Controllers, Inputs, Ledger, Tally};
use std::time::{Duration, Instant};

/// The number of off/on pairs, from `KUBEPLUG_E2E_LEDGER` (default 2: off, on, on, off).
pub fn pairs() -> usize {
    crate::env_usize("KUBEPLUG_E2E_LEDGER", 2)
}

/// One cold start of kubeplug, converged.
pub struct Run {
    pub wall: Duration,
    pub cpu: f64,
    pub rss_mib: f64,
    /// Ledger entries written and dropped (from `/metrics`), and the ledger file's size.
    pub written: f64,
    pub dropped: f64,
    pub file_mib: f64,
}

/// The runs of each side, in the order they ran.
pub struct Cost {
    pub on: Vec<Run>,
    pub off: Vec<Run>,
}

impl Cost {
    /// Medians of each side: `(on, off)`.
    pub fn medians(&self, figure: impl Fn(&Run) -> f64) -> (f64, f64) {
        (
            median(self.on.iter().map(&figure)),
            median(self.off.iter().map(&figure)),
        )
    }

    /// The throughput lost to the ledger, in percent (negative: the ledger's side was faster).
    pub fn throughput_percent(&self) -> f64 {
        let (on, off) = self.medians(|r| r.wall.as_secs_f64());
        (1.0 - off / on) * 100.0
    }

    /// The RSS the ledger adds, in percent of the RSS without it.
    pub fn memory_percent(&self) -> f64 {
        let (on, off) = self.medians(|r| r.rss_mib);
        (on / off - 1.0) * 100.0
    }

    /// `ledger cost T % throughput, M % memory`, with the medians they come from.
    pub fn summary(&self) -> String {
        let (wall_on, wall_off) = self.medians(|r| r.wall.as_secs_f64());
        let (rss_on, rss_off) = self.medians(|r| r.rss_mib);
        format!(
            "ledger cost {:.1} % throughput, {:.1} % memory (medians of {} runs each, {}: cold start {wall_on:.2} s with the ledger, {wall_off:.2} s without; RSS {rss_on:.0} / {rss_off:.0} MiB)",
            self.throughput_percent(),
            self.memory_percent(),
            self.on.len(),
            self.order()
        )
    }

    /// The order the runs went in (`off/on/on/off`).
    pub fn order(&self) -> String {
        (0..self.on.len())
            .flat_map(|pair| match pair % 2 {
                0 => ["off", "on"],
                _ => ["on", "off"],
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs `pairs` pairs on `n` objects, each pair's order the other way round from the last.
pub fn measure(dir: &Inputs, n: usize, pairs: usize) -> Cost {
    let mut cost = Cost {
        on: Vec::new(),
        off: Vec::new(),
    };
    for pair in 0..pairs {
        let order = match pair % 2 {
            0 => [Ledger::Off, Ledger::On],
            _ => [Ledger::On, Ledger::Off],
        };
        for ledger in order {
            let run = cold_start(dir, n, ledger);
            match ledger {
                Ledger::On => cost.on.push(run),
                Ledger::Off => cost.off.push(run),
            }
        }
    }
    cost
}

/// One kubeplug process started on a fresh sim of `n` objects: until every object is
/// patched, then its RSS 3 s later (as phases 1 and 4 measure it).
fn cold_start(dir: &Inputs, n: usize, ledger: Ledger) -> Run {
    let who = Contender::Kubeplug;
    let sim = Sim::start(&dir.objects, dir.scratch);
    let mut log = sim.log_from_start();
    let t0 = Instant::now();
    let controller = Controllers::start_with(who, &sim, &dir.plugins, dir, 1, None, ledger);
    Tally::default()
        .until_patched_within(&mut log, n, who, &controller, crate::rss_cap_mib())
        .unwrap_or_else(|rss| panic!("kubeplug, ledger {ledger:?}: stopped at RSS {rss:.0} MiB"));
    let wall = t0.elapsed();
    let cpu = controller.cpu_seconds();
    std::thread::sleep(Duration::from_secs(3));
    let rss_mib = controller.rss_mib();
    // `+ 0.0`: a sum of no series is -0.0.
    let written = controller
        .metric("kubeplug_ledger_entries_written_total")
        .unwrap_or(0.0)
        + 0.0;
    let dropped = controller
        .metric("kubeplug_ledger_entries_dropped_total")
        .unwrap_or(0.0)
        + 0.0;
    let file_mib = controller
        .state_dir
        .as_ref()
        .and_then(|d| std::fs::metadata(d.join("ledger.redb")).ok())
        .map_or(0.0, |m| m.len() as f64 / (1024.0 * 1024.0));
    // A host that could not open its ledger runs without one: that would measure nothing.
    if ledger == Ledger::On {
        assert!(
            written > 0.0,
            "kubeplug with its ledger wrote no ledger entry"
        );
    } else {
        assert_eq!(written + dropped, 0.0, "kubeplug --no-ledger kept a ledger");
    }
    println!(
        "Kubeplug, ledger {ledger:?}: converged in {wall:.2?}, {cpu:.1} CPU s, RSS {rss_mib:.0} MiB; ledger entries {written:.0} written, {dropped:.0} dropped, file {file_mib:.1} MiB",
    );
    Run {
        wall,
        cpu,
        rss_mib,
        written,
        dropped,
        file_mib,
    }
}
