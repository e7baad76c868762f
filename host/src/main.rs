//! The `kubeplug` binary: parses the command line and hands off to `kubeplug::cli`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    kubeplug::cli::main(kubeplug::cli::Cli::parse())
}
