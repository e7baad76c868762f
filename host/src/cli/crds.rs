//! `kubeplug crds`: the CRDs of `Plugin` and `PluginPolicy`, generated from the Rust types
//! the host parses them with; printed, or written to a folder (`host/deploy/crds`).

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `kubeplug crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write each CRD to its file in this folder (plugins.yaml, pluginpolicies.yaml)
    /// instead of printing them as one multi-document stream.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Prints or writes the generated CRDs.
pub fn run(args: CrdsArgs) -> Result<ExitCode> {
    let crds = crate::plugin_objects::generated_crds();
    match args.out {
        Some(dir) => {
            for (name, yaml) in crds {
                let path = dir.join(name);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
        None => {
            let docs: Vec<String> = crds.into_iter().map(|(_, yaml)| yaml).collect();
            print!("{}", docs.join("---\n"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
