//! `kubeplug test DIR`: every `NAME.object.yaml` in a folder reconciled by one plugin, its
//! actions compared with `NAME.expect.yaml` (see `golden` for what is compared).
//!
//! A case may also have `NAME.previous.yaml` (the version last reconciled) and
//! `NAME.config.json` (the plugin's configuration, instead of `--config`). The plugin reads
//! the objects of `--cache DIR`, or of `DIR/cache/` when that folder exists.
//!
//! With `--faults`, each case is also run to a fixed point under perturbations of what the
//! plugin sees (see `super::faults`): one more line per case and family of perturbations.

use super::eval::{Inputs, Loaded, read_config, read_object, terminal_safe};
use super::golden::Expectation;
use crate::fixtures::FixtureObjects;
use crate::plugin::{Limits, NoObjects, ObjectSource};
use anyhow::{Context, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

const OBJECT: &str = ".object.yaml";
const EXPECT: &str = ".expect.yaml";

/// Options of `kubeplug test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The folder of cases: NAME.object.yaml with NAME.expect.yaml (and optionally
    /// NAME.previous.yaml, NAME.config.json).
    pub dir: PathBuf,
    /// The plugin (.wasm component).
    #[arg(long)]
    pub plugin: PathBuf,
    /// The plugin's configuration for cases without NAME.config.json: JSON text, or @FILE.
    #[arg(long)]
    pub config: Option<String>,
    /// A directory of YAML manifests the plugin can read (default: DIR/cache when it exists).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Limits of each call: the same flags, defaults and environment variables as `kubeplug run`.
    #[command(flatten)]
    pub limits: super::call_limits::CallLimitArgs,
    /// Also run each case to a fixed point under faults (a stale read, a child not yet
    /// visible after its create, the same event twice, a crash between two writes) and fail
    /// plugins that do not converge to the fault-free state or are not idempotent.
    #[arg(long)]
    pub faults: bool,
    /// Where precompiled plugins are cached (default: $KUBEPLUG_CACHE_DIR or ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
}

/// One case: its name and files.
#[derive(Debug)]
struct Case {
    name: String,
    object: PathBuf,
    expect: PathBuf,
}

/// The cases of `dir`, sorted by name. An object without an expectation, or an expectation
/// without an object, is an error naming both files: a case that cannot run must not pass
/// by being skipped.
fn cases(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the test folder {}", dir.display()))?;
    let mut names = std::collections::BTreeSet::new();
    for entry in entries {
        let file = entry?.file_name().to_string_lossy().into_owned();
        for suffix in [OBJECT, EXPECT] {
            if let Some(name) = file.strip_suffix(suffix) {
                names.insert(name.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!(
            "{} has no NAME{OBJECT} / NAME{EXPECT} cases (record one with `kubeplug eval --plugin P --object NAME{OBJECT} --format yaml > NAME{EXPECT}`)",
            dir.display()
        );
    }
    let mut out = Vec::new();
    for name in names {
        let object = dir.join(format!("{name}{OBJECT}"));
        let expect = dir.join(format!("{name}{EXPECT}"));
        if !object.exists() {
            bail!(
                "{} has no object to reconcile: add {}",
                expect.display(),
                object.display()
            );
        }
        if !expect.exists() {
            bail!(
                "{} has no expectation: record one with `kubeplug eval --plugin P --object {} --format yaml > {}`",
                object.display(),
                object.display(),
                expect.display()
            );
        }
        out.push(Case {
            name,
            object,
            expect,
        });
    }
    Ok(out)
}

/// Runs every case; prints `ok NAME` or `FAIL NAME` with the diff or the error, then a
/// summary. Exits 1 when any case failed.
pub async fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let limits = Limits::from(args.limits.call_limits()?);
    let cases = cases(&args.dir)?;
    let default_config = read_config(args.config.as_deref())?;
    let cache = args.cache.clone().or_else(|| {
        let dir = args.dir.join("cache");
        dir.is_dir().then_some(dir)
    });
    let fixtures = cache
        .as_deref()
        .map(FixtureObjects::from_dir)
        .transpose()?
        .map(Arc::new);
    let objects: Arc<dyn ObjectSource> = match &fixtures {
        Some(fixtures) => fixtures.clone(),
        None => Arc::new(NoObjects),
    };
    let loaded = Loaded::load(&args.plugin, args.compile_cache.clone()).await?;
    let (mut passed, mut failed) = (0, 0);
    let (mut faults_ok, mut faults_failed) = (0, 0);
    for case in &cases {
        let inputs = case_inputs(case, &default_config);
        let mut case_ok = match &inputs {
            Ok(inputs) => run_case(case, inputs, &loaded, limits, &objects).await,
            Err(why) => Err(why.clone()),
        };
        match &case_ok {
            Ok(()) => println!("ok   {}", case.name),
            Err(why) => {
                println!("FAIL {}", case.name);
                print!("{}", terminal_safe(&indent(why)));
            }
        }
        if let (true, Ok(inputs)) = (args.faults, &inputs) {
            let lines = faults(case, inputs, &loaded, limits, fixtures.as_deref()).await;
            for (ok, line) in lines {
                if ok {
                    faults_ok += 1;
                } else {
                    faults_failed += 1;
                    case_ok = Err(String::new());
                }
                println!("{}", terminal_safe(&line));
            }
        }
        match case_ok {
            Ok(()) => passed += 1,
            Err(_) => failed += 1,
        }
    }
    let faults_summary = if args.faults {
        format!("; faults: {faults_ok} ok, {faults_failed} failed")
    } else {
        String::new()
    };
    println!(
        "{passed} passed, {failed} failed ({}){faults_summary}",
        args.dir.display()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// What a case hands the plugin: its object, previous version and configuration; `Err`
/// says which file is wrong.
fn case_inputs(case: &Case, default_config: &Option<Arc<str>>) -> Result<Inputs, String> {
    let object = read_object(&case.object).map_err(|e| format!("{e:#}"))?;
    let sibling = |suffix: &str| {
        let path = case.object.with_file_name(format!("{}{suffix}", case.name));
        path.exists().then_some(path)
    };
    let previous = sibling(".previous.yaml")
        .map(|p| read_object(&p))
        .transpose()
        .map_err(|e| format!("{e:#}"))?;
    let config = match sibling(".config.json") {
        Some(path) => read_config(Some(&format!("@{}", path.display())))
            .map_err(|e| format!("{}: {e:#}", path.display()))?,
        None => default_config.clone(),
    };
    Ok(Inputs {
        object,
        previous,
        config,
        deleted: false,
        reason: None,
        attempt: 1,
    })
}

/// One case: `Err` says why it failed (bad input, the plugin's error, or the diff).
async fn run_case(
    case: &Case,
    inputs: &Inputs,
    loaded: &Loaded,
    limits: Limits,
    objects: &Arc<dyn ObjectSource>,
) -> Result<(), String> {
    let expectation = Expectation::read(&case.expect).map_err(|e| format!("{e:#}"))?;
    let out = loaded
        .call(inputs.clone(), limits, objects.clone())
        .await
        .map_err(|lines| lines.join("\n"))?;
    expectation
        .check(&out)
        .map_err(|diff| format!("{}: the actions differ\n{diff}", case.expect.display()))
}

/// The case under faults: one line per family of perturbations (`ok` or `FAIL` with what
/// was found), or one `FAIL` line when the fault-free run itself has no fixed point.
async fn faults(
    case: &Case,
    inputs: &Inputs,
    loaded: &Loaded,
    limits: Limits,
    cache: Option<&FixtureObjects>,
) -> Vec<(bool, String)> {
    let start = super::faults::start(inputs.object.clone(), inputs.previous.clone(), cache);
    let plugin = super::faults::PluginCalls {
        loaded,
        config: inputs.config.clone(),
        limits,
    };
    let name = &case.name;
    match super::faults::check(&plugin, &start).await {
        Err(finding) => vec![(false, format!("FAIL {name}  without faults: {finding}"))],
        Ok(verdicts) => verdicts
            .into_iter()
            .map(|v| match v.outcome {
                Ok(places) => (
                    true,
                    format!(
                        "ok   {name}  {} ({})",
                        v.family.name(),
                        match places {
                            0 => "nothing to perturb".to_string(),
                            1 => "1 place".to_string(),
                            n => format!("{n} places"),
                        }
                    ),
                ),
                Err(finding) => (
                    false,
                    format!("FAIL {name}  {}: {finding}", v.family.name()),
                ),
            })
            .collect(),
    }
}
