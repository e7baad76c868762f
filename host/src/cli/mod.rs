//! Command-line interface: one file per subcommand.

pub mod call_limits;
pub mod chaos;
pub mod crds;
pub mod eval;
mod faults;
mod golden;
pub mod new;
pub mod oci;
pub mod run;
pub mod run_settings;
pub mod sign;
pub mod sim;
pub mod status;
pub mod test_dir;
pub mod why;

#[cfg(test)]
mod deploy_manifests;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// What `kubeplug sim` and `kubeplug run --embedded` say in a build without the embedded API
/// server (the `embedded` feature, on by default).
#[cfg(not(feature = "embedded"))]
const NOT_EMBEDDED: &str =
    "this kubeplug was built without the embedded API server (cargo feature `embedded`)";

/// kubeplug: many small Kubernetes controllers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kubeplug", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log as JSON lines instead of text (filter with KUBEPLUG_LOG, e.g. `debug`).
    #[arg(long, global = true, env = "KUBEPLUG_LOG_JSON")]
    pub log_json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one plugin offline against a manifest and print the actions it returns.
    Eval(eval::EvalArgs),
    /// Run the plugins in a directory as controllers against a cluster (or --embedded).
    Run(Box<run::RunArgs>),
    /// Serve the embedded Kubernetes API server until interrupted.
    Sim(sim::SimArgs),
    /// Run the seed plugins under random API-server faults and host restarts, and check
    /// that they end as a fault-free run does.
    Chaos(chaos::ChaosArgs),
    /// Create a plugin project (Rust, TypeScript or Python) that builds and passes its tests.
    New(new::NewArgs),
    /// Run a plugin on every NAME.object.yaml in a folder and compare with NAME.expect.yaml.
    Test(test_dir::TestArgs),
    /// Push a .wasm module to an OCI registry (CNCF Wasm layout) and print its digest.
    Push(oci::PushArgs),
    /// Pull a module from an OCI registry into the module cache (and -o FILE).
    Pull(oci::PullArgs),
    /// Copy a module from one registry to another, digest unchanged (the air-gapped path).
    Mirror(oci::MirrorArgs),
    /// Write a cosign key pair: cosign.key (encrypted with $COSIGN_PASSWORD) and cosign.pub.
    Keygen(sign::KeygenArgs),
    /// Sign a module in a registry with a private key, stored as cosign stores signatures.
    Sign(sign::SignArgs),
    /// Check a module's signatures against a public key or a verification config.
    Verify(sign::VerifyArgs),
    /// Why an object is as it is: its recent reconciles from the decision ledger.
    Why(why::WhyArgs),
    /// The Plugins of a namespace: conditions, mode, digest, grant, counts, last error.
    Status(status::StatusArgs),
    /// Print the CRDs of Plugin and PluginPolicy, generated from the types that parse them.
    Crds(crds::CrdsArgs),
}

/// Runs the parsed command line and maps its outcome to an exit code.
pub fn main(cli: Cli) -> ExitCode {
    crate::telemetry::init(cli.log_json);
    let result = runtime().and_then(|rt| {
        let result = match cli.command {
            Command::Eval(args) => rt.block_on(eval::run(args)),
            Command::Run(args) => rt.block_on(run::run(*args)),
            Command::Sim(args) => rt.block_on(sim::run(args)),
            Command::Chaos(args) => rt.block_on(chaos::run(args)),
            Command::Test(args) => rt.block_on(test_dir::run(args)),
            Command::New(args) => new::run(args),
            Command::Push(args) => rt.block_on(oci::push(args)),
            Command::Pull(args) => rt.block_on(oci::pull(args)),
            Command::Mirror(args) => rt.block_on(oci::mirror(args)),
            Command::Keygen(args) => sign::keygen(args),
            Command::Sign(args) => rt.block_on(sign::sign(args)),
            Command::Verify(args) => rt.block_on(sign::verify(args)),
            Command::Why(args) => rt.block_on(why::run(args)),
            Command::Status(args) => rt.block_on(status::run(args)),
            Command::Crds(args) => crds::run(args),
        };
        // Each command has drained what it means to (within its own bounds); a plugin call
        // abandoned at the shutdown deadline must not hold the exit.
        rt.shutdown_background();
        result
    });
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
