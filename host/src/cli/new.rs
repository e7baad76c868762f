//! `kubeplug new NAME --lang rust|ts|py`: a plugin project in a new folder that builds, with
//! a sample fixture, its expectation (a passing `kubeplug test`) and a policy that grants
//! exactly what the sample reconcile does.
//!
//! The sample labels every object of the kind it reconciles with
//! `kubeplug.dev/reconciled-by: NAME` (a merge patch and a log line) and does nothing to an
//! object that carries the label already, so it never loops on its own write. The policy
//! grants that one label path on that one kind, in namespace `default` (or on cluster-scoped
//! objects, for the built-in cluster-scoped kinds).
//!
//! The SDK comes from its package (crates.io, npm, PyPI) unless `--sdk PATH` names a kubeplug
//! checkout: then the project uses that checkout's SDK sources, WIT files and the toolchains
//! its `make plugins` installed (jco, componentize-py), and a Rust project starts from the
//! checkout's Cargo.lock.
//!
//! Here the command (its options, checks and the writing of the files); the kinds it is
//! given in `gvk`, the files every project has in `project`, each language's own in `rust`,
//! `ts` and `py`.

mod gvk;
mod project;
mod py;
mod rust;
mod ts;

pub use gvk::Gvk;

use anyhow::{Context, bail};
use clap::Args;
use project::Project;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The contract (WIT package) version the scaffolds build against.
const CONTRACT: &str = "0.1.0";
/// The SDK package versions a scaffold depends on without `--sdk`.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");
/// componentize-py, as the checkout's Makefile pins it.
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The label the sample sets.
const LABEL: &str = "kubeplug.dev/reconciled-by";

/// The languages a plugin can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with kubeplug-sdk (cargo, wasm32-wasip2).
    Rust,
    /// TypeScript, with kubeplug-sdk on npm (jco componentize).
    Ts,
    /// Python, with kubeplug-sdk on PyPI (componentize-py).
    Py,
}

/// Options of `kubeplug new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: a DNS-1123 label (it names the folder, the .wasm file and the
    /// plugin instance).
    pub name: String,
    /// The language of the plugin.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The kind it reconciles, as GROUP/VERSION/KIND (`v1/ConfigMap` or `core/v1/ConfigMap`
    /// for the core group).
    #[arg(
        long,
        value_name = "GROUP/VERSION/KIND",
        default_value = "apps/v1/Deployment"
    )]
    pub reconciles: String,
    /// A kind it creates and owns (repeatable): a change to one enqueues its owner.
    #[arg(long, value_name = "GROUP/VERSION/KIND")]
    pub owns: Vec<String>,
    /// The root of a kubeplug checkout whose SDKs, WIT files and toolchains the project
    /// uses instead of the published packages.
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
    /// Where to create the project (default: ./NAME). It must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
}

/// Creates the project; prints what was created and the next commands.
pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    crate::controller::InstanceName::parse(&args.name)
        .map_err(|why| anyhow::anyhow!("NAME: {why}"))?;
    let reconciles = Gvk::parse(&args.reconciles, "--reconciles")?;
    let owns = args
        .owns
        .iter()
        .map(|o| Gvk::parse(o, "--owns"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sdk = args.sdk.as_deref().map(checkout).transpose()?;
    let project = Project {
        name: args.name.clone(),
        lang: args.lang,
        reconciles,
        owns,
        sdk,
    };
    let dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} already exists and is not empty: kubeplug new creates a new project",
            dir.display()
        );
    }
    let files = project.files();
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "created {} ({} plugin, {} files)",
        dir.display(),
        match args.lang {
            Lang::Rust => "Rust",
            Lang::Ts => "TypeScript",
            Lang::Py => "Python",
        },
        files.len()
    );
    println!(
        "next: cd {} && make test   (builds {}.wasm, then runs `kubeplug test tests`)",
        dir.display(),
        args.name
    );
    if args.sdk.is_none() {
        eprintln!(
            "note: the project names the kubeplug-sdk packages, which this project has not published yet: a package of that name in a public registry is not ours. Build with --sdk PATH or against packed SDKs (README, \"Writing a plugin\")"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkout `--sdk` names, absolute, checked to hold the SDKs.
fn checkout(path: &Path) -> anyhow::Result<PathBuf> {
    let root = std::fs::canonicalize(path)
        .with_context(|| format!("--sdk {}: cannot read this folder", path.display()))?;
    for part in [
        "plugin-sdk/Cargo.toml",
        "plugin-sdk/js/src/index.ts",
        "plugin-sdk/python/kubeplug/__init__.py",
    ] {
        if !root.join(part).exists() {
            bail!(
                "--sdk {}: not the root of a kubeplug checkout ({part} is missing)",
                path.display()
            );
        }
    }
    let wit = root.join("wit").join(format!("v{CONTRACT}"));
    if !wit.is_dir() {
        bail!(
            "--sdk {}: {} is missing: this checkout does not implement contract {CONTRACT}",
            path.display(),
            wit.display()
        );
    }
    if root
        .to_str()
        .is_none_or(|s| s.contains([' ', '"', '\'', '$']))
    {
        bail!(
            "--sdk {}: the path must be UTF-8 without spaces, quotes or '$' (it is written into a Makefile)",
            root.display()
        );
    }
    Ok(root)
}
