//! The flags of `kubeplug run` made into a [`HostConfig`], checked together before anything
//! starts: a typo in `--qps` or `--memory-mib` is one error line at start, not every plugin
//! failing as it starts (or a shift overflowing).

use super::run::RunArgs;
use crate::app::HostConfig;
use crate::controller::ControllerConfig;
use crate::coordination::{
    CoordinationConfig, LeaseTimings, Mode, check_identity, check_member_lease_name,
    default_identity,
};
use crate::plugin_objects::PluginObjectsConfig;
use crate::queue::{ConfigError, QueueConfig, RateLimitConfig};
use std::time::Duration;

/// A flag whose value the host cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A value outside the range the flag allows.
    #[error("--{flag} {value}: must be {range}")]
    OutOfRange {
        /// The flag, without its dashes.
        flag: &'static str,
        /// The value given.
        value: String,
        /// The range allowed, in words.
        range: &'static str,
    },
    /// A call-limit flag outside the runtime's caps.
    #[error(transparent)]
    CallLimit(#[from] super::call_limits::CallLimitFlagError),
    /// Neither plugin source: no `--plugins` directory and `--plugin-objects=false`.
    #[error("nothing to run: give --plugins DIR, or leave --plugin-objects on")]
    NothingToRun,
    /// The retry rate limiter refused the settings.
    #[error("--qps/--burst: {0}")]
    RateLimit(#[source] ConfigError),
    /// The status server's token file cannot be used.
    #[error("--listen-token-file: {0}")]
    Token(#[source] crate::server::AccessError),
    /// A leader election or sharding flag the host cannot run with.
    #[error("--{flag}: {reason}")]
    Coordination {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `--host-namespace` is not a namespace name.
    #[error("--host-namespace: {0}")]
    HostNamespace(String),
    /// An `--allow-origin` value is not an origin.
    #[error(
        "--allow-origin {0:?}: must be an origin such as https://dash.example.com (scheme, host, optional port; no path)"
    )]
    Origin(String),
    /// An `--allow-host` value is not a host name.
    #[error(
        "--allow-host {0:?}: must be a host name such as dash.example.com, or .example.com for it and every name under it (no scheme, no port: any port is allowed)"
    )]
    Host(String),
}

fn in_range<T: PartialOrd + ToString>(
    flag: &'static str,
    value: T,
    min: T,
    max: T,
    range: &'static str,
) -> Result<T, SettingsError> {
    if value < min || value > max {
        return Err(SettingsError::OutOfRange {
            flag,
            value: value.to_string(),
            range,
        });
    }
    Ok(value)
}

/// The host configuration `args` ask for, with every numeric flag checked.
pub fn host_config(args: &RunArgs) -> Result<HostConfig, SettingsError> {
    let workers = in_range("workers", args.workers, 1, 1024, "1 to 1024")?;
    let max_writes_in_flight = in_range(
        "max-writes-in-flight",
        args.max_writes_in_flight,
        1,
        100_000,
        "1 to 100000",
    )?;
    let call_limits = args.limits.call_limits()?;
    let max_delay = Duration::from_secs(in_range(
        "backoff-max-seconds",
        args.backoff_max_seconds,
        1,
        7 * 24 * 3600,
        "1 to 604800 (a week)",
    )?);
    let base_delay = Duration::from_millis(in_range(
        "backoff-base-ms",
        args.backoff_base_ms,
        1,
        max_delay.as_millis() as u64,
        "at least 1 and at most --backoff-max-seconds",
    )?);
    let rate_limit = RateLimitConfig {
        base_delay,
        max_delay,
        qps: args.qps,
        burst: args.burst,
    };
    rate_limit
        .build::<String>()
        .map_err(SettingsError::RateLimit)?;
    let debounce_ms = in_range("debounce-ms", args.debounce_ms, 0, 60_000, "0 to 60000")?;
    let shutdown_s = in_range(
        "shutdown-timeout",
        args.shutdown_timeout,
        0,
        3600,
        "0 to 3600 seconds",
    )?;
    let watch_timeout = in_range(
        "watch-timeout-seconds",
        args.watch_timeout_seconds,
        1,
        3600,
        "1 to 3600",
    )?;
    let expectation_wait = in_range(
        "expectation-wait-seconds",
        args.expectation_wait_seconds,
        1,
        3600,
        "1 to 3600",
    )?;
    let per_plugin_limit = in_range(
        "metrics-per-plugin-limit",
        args.metrics_per_plugin_limit,
        0,
        1_000_000,
        "0 to 1000000",
    )?;
    let controller = ControllerConfig {
        namespace: args.cluster.namespace.clone(),
        metrics: crate::metrics::MetricsRegistry::with_per_plugin_limit(per_plugin_limit),
        workers,
        max_writes_in_flight,
        queue: QueueConfig {
            rate_limit,
            ..QueueConfig::default()
        },
        limits: call_limits,
        resync: (args.resync_seconds > 0).then(|| Duration::from_secs(args.resync_seconds)),
        streaming_lists: args.streaming_lists,
        watch_timeout: Duration::from_secs(watch_timeout),
        expectation_wait: Duration::from_secs(expectation_wait),
        host_name: hostname(),
        ..ControllerConfig::default()
    };
    // --max-module-mib is range-checked by clap (1 to 1024).
    let max_module_bytes = (args.registry.max_module_mib as usize) << 20;
    let image_poll = in_range(
        "image-poll-seconds",
        args.image_poll_seconds,
        10,
        86_400,
        "10 to 86400",
    )?;
    let max_plugins = in_range(
        "max-plugin-objects",
        args.max_plugin_objects,
        0,
        100_000,
        "0 to 100000",
    )?;
    let host_namespace = host_namespace(args)?;
    let max_plugins_per_namespace = args
        .max_plugins_per_namespace
        .map(|n| in_range("max-plugins-per-namespace", n, 1, 100_000, "1 to 100000"))
        .transpose()?;
    if args.plugins.is_none() && args.plugin.is_empty() && !args.plugin_objects {
        return Err(SettingsError::NothingToRun);
    }
    Ok(HostConfig {
        plugins: args.plugins.clone(),
        policies: args
            .policies
            .clone()
            .or_else(|| args.plugins.clone())
            .unwrap_or_default(),
        objects: args.plugin_objects.then(|| PluginObjectsConfig {
            max_module_bytes,
            max_plugins,
            max_plugins_per_namespace,
            image_poll: Duration::from_secs(image_poll),
            host_namespace: host_namespace.clone(),
            ..PluginObjectsConfig::default()
        }),
        watch: args.watch,
        debounce: Duration::from_millis(debounce_ms),
        listen: args.listen,
        access: access(args)?,
        compile_cache: args
            .compile_cache
            .clone()
            .or_else(crate::plugin::default_cache_dir),
        controller,
        shutdown_timeout: Duration::from_secs(shutdown_s),
        coordination: coordination(args)?,
    })
}

/// Where and how much the decision ledger keeps (`None`: `--no-ledger`, or no state
/// directory given and no home to put one in).
pub fn ledger_config(args: &RunArgs) -> Option<crate::ledger::LedgerConfig> {
    if args.no_ledger {
        return None;
    }
    let dir = args.state_dir.clone().or_else(default_state_dir)?;
    Some(crate::ledger::LedgerConfig {
        retention: crate::ledger::Retention {
            max_bytes: args.ledger_max_mib << 20,
            max_age: Duration::from_secs(args.ledger_max_age_hours * 3600),
        },
        ..crate::ledger::LedgerConfig::in_dir(dir)
    })
}

/// `$XDG_STATE_HOME/kubeplug`, else `~/.local/state/kubeplug` (the XDG base directories'
/// place for state that should outlive a restart).
pub fn default_state_dir() -> Option<std::path::PathBuf> {
    let home = |v: &str| {
        std::env::var_os(v)
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
    };
    home("XDG_STATE_HOME")
        .or_else(|| home("HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("kubeplug"))
}

/// Leader election or sharding as the flags ask, checked: timings by client-go's rules,
/// names that fit a Lease.
fn coordination(args: &RunArgs) -> Result<Option<CoordinationConfig>, SettingsError> {
    let mode = match (args.leader_elect, args.sharding) {
        (true, _) => Mode::LeaderElection,
        (false, true) => Mode::Sharding,
        (false, false) => return Ok(None),
    };
    let seconds = |flag: &'static str, value: f64| {
        if !(value.is_finite() && value > 0.0 && value <= 3600.0) {
            return Err(SettingsError::Coordination {
                flag,
                reason: format!("{value}: must be more than 0 and at most 3600 seconds"),
            });
        }
        Ok(Duration::from_secs_f64(value))
    };
    let timings = LeaseTimings {
        lease_duration: seconds("lease-duration-seconds", args.lease_duration_seconds)?,
        renew_deadline: seconds("renew-deadline-seconds", args.renew_deadline_seconds)?,
        retry_period: seconds("retry-period-seconds", args.retry_period_seconds)?,
    };
    timings
        .check()
        .map_err(|reason| SettingsError::Coordination {
            flag: "renew-deadline-seconds",
            reason,
        })?;
    let name_error = |flag, reason| SettingsError::Coordination { flag, reason };
    check_identity(&args.lease_name).map_err(|r| name_error("lease-name", r))?;
    let identity = match &args.identity {
        Some(id) => {
            check_identity(id).map_err(|r| name_error("identity", r))?;
            id.clone()
        }
        None => default_identity(&hostname()),
    };
    // A sharding member's Lease is named `<lease-name>-<identity>`: it must fit a name too.
    if mode == Mode::Sharding {
        let member = format!("{}-{identity}", args.lease_name);
        check_member_lease_name(&member).map_err(|r| name_error("identity", r))?;
    }
    let lease_namespace = match &args.lease_namespace {
        Some(ns) => ns.clone(),
        None => host_namespace(args)?,
    };
    crate::contract::names::dns_label("namespace", &lease_namespace)
        .map_err(|r| name_error("lease-namespace", r.into()))?;
    Ok(Some(CoordinationConfig {
        mode,
        lease_name: args.lease_name.clone(),
        lease_namespace,
        identity,
        timings,
    }))
}

/// The host's own namespace: `--host-namespace`, else the pod's, else `default`.
fn host_namespace(args: &RunArgs) -> Result<String, SettingsError> {
    let ns = match &args.host_namespace {
        Some(ns) => ns.clone(),
        None => pod_namespace().unwrap_or_else(|| "default".into()),
    };
    crate::contract::names::dns_label("namespace", &ns)
        .map_err(|e| SettingsError::HostNamespace(e.into()))?;
    Ok(ns)
}

/// The namespace of the pod this runs in: `$POD_NAMESPACE`, else the service account's.
fn pod_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok()
        })
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
}

/// The status server's token, allowed origins and allowed hosts, checked.
fn access(args: &RunArgs) -> Result<crate::server::Access, SettingsError> {
    let token = match &args.listen_token_file {
        Some(file) => Some(crate::server::Access::read_token(file).map_err(SettingsError::Token)?),
        None => None,
    };
    for origin in &args.allow_origin {
        let rest = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .map(|r| r.trim_end_matches('/'));
        let valid = rest.is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        });
        if !valid {
            return Err(SettingsError::Origin(
                crate::contract::text::shown_max(origin, 128).to_string(),
            ));
        }
    }
    if let Some(bad) = args
        .allow_host
        .iter()
        .find(|h| !crate::server::is_host_pattern(h))
    {
        return Err(SettingsError::Host(
            crate::contract::text::shown_max(bad, 128).to_string(),
        ));
    }
    Ok(crate::server::Access::new(token, args.allow_origin.clone())
        .with_hosts(args.allow_host.clone()))
}

/// The name this host reports itself as in Events: `$HOSTNAME` (a pod's name), else
/// `/etc/hostname`, else `kubeplug`.
fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "kubeplug".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::CallLimits;
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<HostConfig, SettingsError> {
        let mut argv = vec!["kubeplug", "run", "--plugins", "p"];
        argv.extend_from_slice(extra);
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        match cli.command {
            crate::cli::Command::Run(args) => host_config(&args),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.controller.limits, CallLimits::default());
        assert_eq!(s.controller.queue.rate_limit, RateLimitConfig::default());
        assert_eq!(s.controller.workers, ControllerConfig::default().workers);
        assert_eq!(s.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(
            Some(s.policies),
            s.plugins,
            "policies sit beside the plugins by default"
        );
        assert_eq!(
            s.objects.unwrap().max_module_bytes,
            crate::plugin_objects::DEFAULT_MAX_MODULE_BYTES
        );
    }

    #[test]
    fn plugin_sources_and_the_module_size() {
        let bare = |extra: &[&str]| {
            let mut argv = vec!["kubeplug", "run"];
            argv.extend_from_slice(extra);
            match crate::cli::Cli::try_parse_from(argv).unwrap().command {
                crate::cli::Command::Run(args) => host_config(&args),
                _ => unreachable!(),
            }
        };
        let only_objects = bare(&[]).unwrap();
        assert_eq!(only_objects.plugins, None);
        assert!(only_objects.objects.is_some());
        let err = bare(&["--plugin-objects=false"]).unwrap_err();
        assert!(matches!(err, SettingsError::NothingToRun), "{err}");
        let small = parse(&["--max-module-mib", "2"]).unwrap();
        assert_eq!(small.objects.unwrap().max_module_bytes, 2 << 20);
        assert!(
            crate::cli::Cli::try_parse_from(["kubeplug", "run", "--max-module-mib", "0"]).is_err()
        );
        let err = parse(&["--image-poll-seconds", "1"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--image-poll-seconds 1"), "{err}");
        let oci = bare(&["--plugin", "oci://r.example/x:v1", "--plugin-objects=false"]).unwrap();
        assert_eq!(
            oci.plugins, None,
            "run() pulls them into a folder of its own"
        );
        assert!(
            crate::cli::Cli::try_parse_from([
                "kubeplug",
                "run",
                "--plugins",
                "p",
                "--plugin",
                "oci://r.example/x"
            ])
            .is_err(),
            "a directory or images, not both"
        );
        assert!(
            parse(&["--plugin-objects=false"])
                .unwrap()
                .objects
                .is_none()
        );
    }

    #[test]
    fn the_metrics_per_plugin_limit_reaches_the_registry() {
        let default = parse(&[]).unwrap();
        assert_eq!(
            default.controller.metrics.series_limit().limit(),
            crate::metrics::DEFAULT_PER_PLUGIN_LIMIT
        );
        let zero = parse(&["--metrics-per-plugin-limit", "0"]).unwrap();
        assert_eq!(zero.controller.metrics.series_limit().limit(), 0);
        let err = parse(&["--metrics-per-plugin-limit", "2000000"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--metrics-per-plugin-limit 2000000"), "{err}");
    }

    #[test]
    fn the_host_namespace_holds_the_records_and_the_leases_by_default() {
        let c = parse(&["--host-namespace", "kubeplug-system", "--leader-elect"]).unwrap();
        assert_eq!(c.objects.unwrap().host_namespace, "kubeplug-system");
        assert_eq!(c.coordination.unwrap().lease_namespace, "kubeplug-system");
        let c = parse(&[
            "--host-namespace",
            "kubeplug-system",
            "--leader-elect",
            "--lease-namespace",
            "ops",
        ])
        .unwrap();
        assert_eq!(c.coordination.unwrap().lease_namespace, "ops");
        assert!(matches!(
            parse(&["--host-namespace", "Not/A/Namespace"]),
            Err(SettingsError::HostNamespace(_))
        ));
    }

    #[test]
    fn coordination_flags_make_a_checked_config() {
        assert_eq!(parse(&[]).unwrap().coordination, None);
        let c = parse(&[
            "--leader-elect",
            "--identity",
            "r1",
            "--lease-namespace",
            "ops",
        ])
        .unwrap()
        .coordination
        .unwrap();
        assert_eq!(c.mode, Mode::LeaderElection);
        assert_eq!(
            (c.identity.as_str(), c.lease_name.as_str()),
            ("r1", "kubeplug")
        );
        assert_eq!(c.lease_namespace, "ops");
        assert_eq!(c.timings, LeaseTimings::default());
        let c = parse(&[
            "--sharding",
            "--lease-duration-seconds",
            "4",
            "--renew-deadline-seconds",
            "3",
            "--retry-period-seconds",
            "0.5",
        ])
        .unwrap()
        .coordination
        .unwrap();
        assert_eq!(c.mode, Mode::Sharding);
        assert_eq!(c.timings.retry_period, Duration::from_millis(500));
        check_identity(&c.identity).unwrap();
        let cli = crate::cli::Cli::try_parse_from([
            "kubeplug",
            "run",
            "--plugins",
            "p",
            "--leader-elect",
            "--sharding",
        ]);
        assert!(cli.is_err(), "the two modes exclude each other");
        // Each part fits alone, the member Lease name they make does not.
        let long = "a".repeat(128);
        let err = parse(&["--sharding", "--lease-name", &long, "--identity", &long])
            .unwrap_err()
            .to_string();
        assert!(err.contains("257 bytes"), "{err}");
        parse(&["--leader-elect", "--lease-name", &long, "--identity", &long]).unwrap();
    }

    #[test]
    fn each_bad_flag_is_one_error_naming_it() {
        for (args, flag) in [
            (&["--qps", "0"][..], "--qps"),
            (&["--qps", "NaN"], "--qps"),
            (&["--qps", "inf"], "--qps"),
            (&["--burst", "0"], "--qps/--burst"),
            (&["--memory-mib", "0"], "--memory-mib 0"),
            (&["--memory-mib", "1125899906842624"], "--memory-mib"),
            (&["--memory-mib", "4096"], "--memory-mib 4096"),
            (&["--timeout-ms", "0"], "--timeout-ms 0"),
            (&["--workers", "0"], "--workers 0"),
            (&["--max-writes-in-flight", "0"], "--max-writes-in-flight 0"),
            (
                &["--max-writes-in-flight", "100001"],
                "--max-writes-in-flight 100001",
            ),
            (&["--backoff-base-ms", "0"], "--backoff-base-ms"),
            (
                &["--backoff-base-ms", "5000", "--backoff-max-seconds", "1"],
                "--backoff-base-ms 5000",
            ),
            (&["--shutdown-timeout", "100000"], "--shutdown-timeout"),
            (
                &["--leader-elect", "--lease-duration-seconds", "5"],
                "--renew-deadline-seconds",
            ),
            (
                &["--sharding", "--retry-period-seconds", "NaN"],
                "--retry-period-seconds",
            ),
            (&["--leader-elect", "--identity", "Bad_Name"], "--identity"),
            (&["--sharding", "--lease-name", "a/b"], "--lease-name"),
            (
                &["--sharding", "--lease-namespace", "ops.team"],
                "--lease-namespace",
            ),
            (&["--allow-host", "http://dash.example.com"], "--allow-host"),
            (&["--allow-host", "dash.example.com:8080"], "--allow-host"),
            (
                &["--allow-host", "ok.example,*.example.com"],
                "--allow-host",
            ),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.starts_with(flag), "{args:?}: {err}");
        }
    }
}
