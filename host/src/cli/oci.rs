//! `kubeplug push` and `kubeplug pull`: wasm modules to and from OCI registries.

use crate::oci::{OciRef, Registries, RegistryArgs, signature, transfer, verification};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `kubeplug push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The module (.wasm component).
    pub file: PathBuf,
    /// Where to push it: oci://HOST[:PORT]/REPO[:TAG] (tag `latest` when none).
    pub reference: OciRef,
    /// Registry flags.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Options of `kubeplug pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// The module: oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST].
    pub reference: OciRef,
    /// Where to write it (the module is cached by digest either way).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Registry flags.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Options of `kubeplug mirror`.
#[derive(Debug, Args)]
pub struct MirrorArgs {
    /// The module to copy: oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST].
    pub source: OciRef,
    /// Where to: oci://HOST[:PORT]/REPO[:TAG] (the source's tag when none).
    pub destination: OciRef,
    /// Registry flags (for both registries).
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Copies a module and its cosign signatures between registries, digests unchanged, and
/// prints the destination pinned. With --verification-config the source is verified first.
pub async fn mirror(args: MirrorArgs) -> anyhow::Result<ExitCode> {
    let reg = Registries::new(&args.registry)?;
    let source = match verification::config_of(&args.registry)? {
        Some(config) => {
            let pinned = verification::resolve(&reg, &args.source, &reg.access()).await?;
            verification::verify(&reg, &pinned, &config).await?;
            pinned
        }
        None => args.source.clone(),
    };
    let digest = transfer::mirror(&reg, &source, &args.destination).await?;
    let signatures = signature::copy(&reg, &source, &args.destination, &digest).await?;
    let dst = args.source.retargeted(&args.destination);
    println!("{}", dst.pinned(&digest));
    eprintln!("{signatures} signature(s) copied");
    Ok(ExitCode::SUCCESS)
}

/// Pushes a module in the CNCF Wasm layout and prints the pinned reference.
pub async fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let reg = Registries::new(&args.registry)?;
    let bytes = read_module(&args.file, reg.max_module_bytes)?;
    let digest = transfer::push(&reg, &args.reference, &bytes).await?;
    println!("{}", args.reference.pinned(&digest));
    Ok(ExitCode::SUCCESS)
}

/// Pulls a module (from the cache when held; its signatures checked first with
/// --verification-config) and prints the pinned reference.
pub async fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let reg = Registries::new(&args.registry)?;
    let pulled = verification::pull_verified(&reg, &args.reference, &args.registry).await?;
    if let Some(out) = &args.output {
        crate::oci::cache::write_atomically(out, &pulled.bytes)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    println!("{}", pulled.pinned);
    eprintln!(
        "module sha256:{} ({} bytes{})",
        pulled.module_digest,
        pulled.bytes.len(),
        if pulled.cached {
            ", from the cache"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Reads a module file of at most `max` bytes.
fn read_module(path: &std::path::Path, max: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        anyhow::bail!(
            "{} is larger than the {} MiB limit (--max-module-mib)",
            path.display(),
            max >> 20
        );
    }
    Ok(bytes)
}
