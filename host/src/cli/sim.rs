//! `kubeplug sim`: serve the embedded API server on its own.

use clap::Args;
use std::process::ExitCode;

/// Options of `kubeplug sim`.
#[derive(Debug, Args)]
pub struct SimArgs {}

/// Serves the embedded API server until interrupted.
pub async fn run(_args: SimArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kubeplug sim is not built yet")
}
