//! The `kubeplug` binary: parses the command line and hands off to `kubeplug::cli`.

use clap::Parser;

/// mimalloc rather than the system allocator: glibc gave every thread that called a plugin
/// (calls ran on the blocking pool then) an arena of its own and kept what those calls freed,
/// 150 MiB of resident memory for one plugin and one object, measured (40 MiB with mimalloc).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (its index in `mi_option_t`, mimalloc 2 and 3 alike).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    let cli = kubeplug::cli::Cli::parse();
    if purges_at_once(&cli.command) {
        // SAFETY: sets a process-wide option, which mimalloc allows at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
    kubeplug::cli::main(cli)
}

/// Whether `command` returns freed pages to the system at once. Controllers do, rather than
/// after a delay that threads gone idle never reach: compiling a plugin frees hundreds of MiB
/// from the compiler's threads, and each plugin load frees its precompiled bytes (100 loaded
/// plugins: 800 -> 410 MiB RSS, measured). `kubeplug sim` keeps mimalloc's delay: it
/// allocates and frees whole objects per request, and returning pages at once made its
/// strategic patches of 6 KB Deployments 1.1-1.6x slower (page faults and TLB shootdowns,
/// measured with the sim bench).
fn purges_at_once(command: &kubeplug::cli::Command) -> bool {
    !matches!(command, kubeplug::cli::Command::Sim(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_index_is_mimallocs_purge_delay() {
        // mimalloc 3's default purge delay is 1000 ms; a wrong index reads another option.
        // SAFETY: reads a process-wide option.
        let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(value, 1000);
    }

    #[test]
    fn controllers_purge_at_once_and_the_sim_keeps_the_delay() {
        let command = |args: &[&str]| kubeplug::cli::Cli::parse_from(args).command;
        let run = ["kubeplug", "run", "--embedded", "--plugins", "plugins"];
        assert!(purges_at_once(&command(&run)));
        assert!(!purges_at_once(&command(&["kubeplug", "sim"])));
    }
}
