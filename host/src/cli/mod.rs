//! Command-line interface: one file per subcommand.

pub mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// kubeplug: many small Kubernetes controllers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kubeplug", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the embedded Kubernetes API server until interrupted.
    Sim(sim::SimArgs),
}

/// Runs the parsed command line and maps its outcome to an exit code.
pub fn main(cli: Cli) -> ExitCode {
    init_tracing();
    let result = match cli.command {
        Command::Sim(args) => runtime().and_then(|rt| rt.block_on(sim::run(args))),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBEPLUG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
