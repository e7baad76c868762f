//! The call-limit flags `kubeplug run` and `kubeplug eval` share, with the same defaults and
//! environment variables, made into one checked [`CallLimits`]: a plugin evaluated offline
//! runs under the limits `kubeplug run` would give it.

use crate::plugin::{CallLimits, DEFAULT_MEMORY_MIB, DEFAULT_TIMEOUT_MS, LimitError};
use clap::Args;

/// The flags of a plugin call's limits.
#[derive(Debug, Clone, Args)]
pub struct CallLimitArgs {
    /// Time limit of one plugin call, in milliseconds (1 to 600000).
    #[arg(long, env = "KUBEPLUG_TIMEOUT_MS", default_value_t = DEFAULT_TIMEOUT_MS)]
    pub timeout_ms: u64,
    /// Memory limit of one plugin instance, in MiB (1 to 1024, the runtime's cap).
    #[arg(long, env = "KUBEPLUG_MEMORY_MIB", default_value_t = DEFAULT_MEMORY_MIB)]
    pub memory_mib: u64,
}

/// A call-limit flag outside the range the runtime honours; the message names the flag and
/// the cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--{flag} {error}")]
pub struct CallLimitFlagError {
    /// The flag, without its dashes.
    pub flag: &'static str,
    /// Why its value is refused.
    pub error: LimitError,
}

impl CallLimitArgs {
    /// The limits the flags ask for, checked against the runtime's caps.
    pub fn call_limits(&self) -> Result<CallLimits, CallLimitFlagError> {
        let flag = |flag| move |error| CallLimitFlagError { flag, error };
        CallLimits::default()
            .with_memory_mib(self.memory_mib)
            .map_err(flag("memory-mib"))?
            .with_timeout_ms(self.timeout_ms)
            .map_err(flag("timeout-ms"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    /// The call-limit flags of `kubeplug <command> <extra>`.
    fn limits_of(command: &str, extra: &[&str]) -> CallLimitArgs {
        let required: &[&str] = match command {
            "run" => &["--plugins", "p"],
            "test" => &["--plugin", "p.wasm", "cases"],
            _ => &["--plugin", "p.wasm", "--object", "o.yaml"],
        };
        let head = ["kubeplug", command];
        let argv = head.iter().chain(required).chain(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(args) => args.limits,
            Command::Eval(args) => args.limits,
            Command::Test(args) => args.limits,
            _ => unreachable!("kubeplug {command} takes no call limits"),
        }
    }

    #[test]
    fn eval_honours_the_same_limit_flags_and_defaults_as_run() {
        for extra in [
            &[][..],
            &["--memory-mib", "1024", "--timeout-ms", "600000"],
            &["--memory-mib", "8"],
            &["--timeout-ms", "20"],
        ] {
            let run = limits_of("run", extra).call_limits();
            let eval = limits_of("eval", extra).call_limits();
            assert_eq!(run, eval, "{extra:?}");
            assert_eq!(run, limits_of("test", extra).call_limits(), "{extra:?}");
            assert!(run.is_ok(), "{extra:?}");
        }
        assert_eq!(
            limits_of("eval", &[]).call_limits(),
            Ok(CallLimits::default())
        );
        for (extra, message) in [
            (
                &["--memory-mib", "1025"][..],
                "--memory-mib 1025 is not between 1 and 1024: 1024 MiB is the most memory the runtime gives one call's sandbox",
            ),
            (
                &["--timeout-ms", "600001"],
                "--timeout-ms 600001 is not between 1 and 600000: 600000 ms is the longest call the host allows",
            ),
        ] {
            for command in ["run", "eval", "test"] {
                let err = limits_of(command, extra).call_limits().unwrap_err();
                assert_eq!(err.to_string(), message, "{command} {extra:?}");
            }
        }
    }
}
