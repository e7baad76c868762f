//! `kubeplug sim`: serve the embedded API server on its own.

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `kubeplug sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Port on 127.0.0.1 to serve on (0 picks a free one).
    #[arg(long, env = "KUBEPLUG_SIM_PORT", default_value_t = 8001)]
    pub port: u16,
    /// Directory of YAML/JSON manifests to load at start.
    #[arg(long, env = "KUBEPLUG_SIM_LOAD")]
    pub load: Option<PathBuf>,
    /// CustomResourceDefinition YAML files whose kinds to serve (repeatable; comma-separated in
    /// the env var; a file may hold several documents), e.g. host/deploy/crds/plugins.yaml.
    #[arg(long, env = "KUBEPLUG_SIM_CRD", value_delimiter = ',')]
    pub crd: Vec<PathBuf>,
    /// Where to write a kubeconfig for kubectl and kube clients.
    #[arg(
        long,
        env = "KUBEPLUG_SIM_KUBECONFIG_OUT",
        default_value = "kubeplug-sim.kubeconfig"
    )]
    pub kubeconfig_out: PathBuf,
    /// Milliseconds before a Deployment's status reaches its spec and a Pod runs.
    #[arg(long, env = "KUBEPLUG_SIM_STATUS_DELAY", default_value_t = 200)]
    pub status_delay: u64,
    /// Events kept for watch replay; older resourceVersions get 410 Gone.
    #[arg(long, env = "KUBEPLUG_SIM_HISTORY", default_value_t = 10_000)]
    pub history: usize,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, env = "KUBEPLUG_SIM_BOOKMARK_INTERVAL", default_value_t = 10)]
    pub bookmark_interval: u64,
    /// Requests kept in the request log (`/sim/requests`); older ones are dropped.
    #[arg(long, env = "KUBEPLUG_SIM_REQUEST_LOG", default_value_t = 100_000)]
    pub request_log: usize,
    /// Create missing namespaces on first write instead of answering 404.
    #[arg(long, env = "KUBEPLUG_SIM_AUTO_CREATE_NAMESPACES")]
    pub auto_create_namespaces: bool,
    /// Authenticate by bearer token and authorise by RBAC (Roles, ClusterRoles and their
    /// bindings), with impersonation and SubjectAccessReview, as a real API server; the
    /// kubeconfig written carries the administrator's token (user kubeplug-admin in
    /// system:masters).
    #[arg(long, env = "KUBEPLUG_SIM_RBAC")]
    pub rbac: bool,
    /// Serve HTTPS with a CA and server certificate made at start (for 127.0.0.1, ::1 and
    /// localhost); the kubeconfig written trusts that CA. kubectl sends a token and --as only
    /// over TLS, so kubectl with --rbac needs this.
    #[arg(long, env = "KUBEPLUG_SIM_TLS")]
    pub tls: bool,
    /// A fault schedule (YAML: a `seed` and `rules`, each with `match`, a rate, a window and
    /// one fault) to inject from the start; `POST /sim/faults` takes the same document.
    #[arg(long, env = "KUBEPLUG_SIM_FAULTS")]
    pub faults: Option<PathBuf>,
}

/// Reads and validates a fault schedule file; errors name the file, the rule and the field.
#[cfg(feature = "embedded")]
fn read_schedule(path: &std::path::Path) -> anyhow::Result<kubeplug_sim::Schedule> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the fault schedule {}", path.display()))?;
    kubeplug_sim::Schedule::from_yaml(&text)
        .with_context(|| format!("invalid fault schedule {}", path.display()))
}

/// This build has no embedded API server.
#[cfg(not(feature = "embedded"))]
pub async fn run(_: SimArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{}", super::NOT_EMBEDDED)
}

/// Serves the embedded API server until SIGINT or SIGTERM.
#[cfg(feature = "embedded")]
pub async fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use kubeplug_sim::Sim;
    use std::time::Duration;
    let mut builder = Sim::builder()
        .port(args.port)
        .status_delay(Duration::from_millis(args.status_delay))
        .history(args.history)
        .request_log_capacity(args.request_log)
        .bookmark_interval(Duration::from_secs(args.bookmark_interval.max(1)))
        .auto_create_namespaces(args.auto_create_namespaces)
        .rbac(args.rbac)
        .tls(args.tls);
    for crd in &args.crd {
        builder = builder.crd_file(crd);
    }
    if let Some(dir) = &args.load {
        builder = builder.load_dir(dir);
    }
    let mut schedule_note = None;
    if let Some(path) = &args.faults {
        let schedule = read_schedule(path)?;
        schedule_note = Some(format!(
            "fault schedule {}: seed {}, {} rules",
            path.display(),
            schedule.seed,
            schedule.rules.len()
        ));
        builder = builder.fault_schedule(schedule);
    }
    let sim = builder
        .start()
        .await
        .context("starting the sim API server")?;
    sim.write_kubeconfig(&args.kubeconfig_out)
        .with_context(|| format!("writing kubeconfig to {}", args.kubeconfig_out.display()))?;
    let kubeconfig = args.kubeconfig_out.display();
    println!("kubeplug sim: Kubernetes API at {}", sim.url());
    println!("kubeconfig written to {kubeconfig}; try:");
    println!("  kubectl --kubeconfig {kubeconfig} get deployments -A");
    println!("  kubectl --kubeconfig {kubeconfig} apply -f deployment.yaml");
    println!(
        "  kubectl --kubeconfig {kubeconfig} apply -f host/deploy/crds/   # Plugin, PluginPolicy"
    );
    // What curl needs for the admin endpoints: the CA over TLS, the admin's token with RBAC
    // (`/sim/*` is for system:masters only).
    let mut curl = String::from("curl");
    if sim.ca_pem().is_some() {
        curl.push_str(&format!(
            " --cacert <(grep -o 'certificate-authority-data: .*' {kubeconfig} | cut -d' ' -f2 | base64 -d)"
        ));
    }
    if sim.rbac() {
        curl.push_str(&format!(
            " -H \"Authorization: Bearer $(grep -o 'token: .*' {kubeconfig} | cut -d' ' -f2)\""
        ));
        if sim.ca_pem().is_some() {
            println!(
                "RBAC on: the kubeconfig's token is kubeplug-admin (system:masters); other users' tokens: kubectl create token"
            );
        } else {
            println!(
                "RBAC on: the kubeconfig's token is kubeplug-admin (system:masters) for kube clients; kubectl sends no token over plain HTTP, so its requests are system:anonymous (add --tls)"
            );
        }
    }
    println!(
        "fault injection: {curl} -X POST {}/sim/faults -d '{{\"dropWatches\":true}}' (or --data-binary @schedule.yaml)",
        sim.url()
    );
    if let Some(note) = schedule_note {
        println!("{note}; injected so far: {curl} {}/sim/faults", sim.url());
    }
    println!("request log:     {curl} {}/sim/requests", sim.url());
    wait_for_signal().await?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "embedded")]
async fn wait_for_signal() -> anyhow::Result<()> {
    use anyhow::Context;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: SimArgs,
    }

    #[test]
    fn flags_parse() {
        let w = Wrapper::try_parse_from([
            "sim",
            "--port",
            "0",
            "--crd",
            "a.yaml,b.yaml",
            "--crd",
            "c.yaml",
            "--status-delay",
            "5",
            "--load",
            "dir",
            "--auto-create-namespaces",
            "--rbac",
            "--tls",
            "--faults",
            "faults.yaml",
        ])
        .unwrap();
        assert!(w.args.rbac);
        assert!(w.args.tls);
        assert_eq!(w.args.faults, Some(PathBuf::from("faults.yaml")));
        assert_eq!(w.args.port, 0);
        assert_eq!(w.args.crd.len(), 3);
        assert_eq!(w.args.status_delay, 5);
        assert_eq!(w.args.load, Some(PathBuf::from("dir")));
        assert!(w.args.auto_create_namespaces);
        let defaults = Wrapper::try_parse_from(["sim"]).unwrap();
        assert!(!defaults.args.rbac);
        assert!(!defaults.args.tls);
        assert_eq!(defaults.args.faults, None);
        assert_eq!(
            defaults.args.kubeconfig_out,
            PathBuf::from("kubeplug-sim.kubeconfig")
        );
    }

    #[cfg(feature = "embedded")]
    #[test]
    fn a_fault_schedule_file_is_read_and_its_errors_name_the_rule_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.yaml");
        std::fs::write(
            &good,
            "seed: 5\nrules:\n  - match: {verbs: [watch], resources: [pods]}\n    ratio: 0.1\n    fault: stallWatch\n",
        )
        .unwrap();
        let schedule = read_schedule(&good).unwrap();
        assert_eq!((schedule.seed, schedule.rules.len()), (5, 1));
        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            "rules:\n  - fault: goneWatch\n  - {everyNth: 0, fault: conflict}\n",
        )
        .unwrap();
        let err = format!("{:#}", read_schedule(&bad).unwrap_err());
        assert!(err.contains("bad.yaml"), "{err}");
        assert!(
            err.contains("rules[1].everyNth: must be at least 1"),
            "{err}"
        );
        assert!(read_schedule(&dir.path().join("missing.yaml")).is_err());
    }
}
