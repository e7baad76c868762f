//! `kubeplug why [-n NAMESPACE] KIND/NAME`: an object's recent reconciles from the decision
//! ledger, asked of a running host (`--server`, its `--listen` address) or read from the
//! state directory of a stopped one, in a person's terms or as JSON/YAML.

use crate::ledger::{Entry, LedgerConfig, ObjectId, Query, Store};
use crate::server::WhyReport;
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// `kubeplug why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The object, as kubectl spells it: `deploy/web`, `deployment/web`, `foo/example`; or
    /// with its namespace, `deploy/demo/web`.
    pub object: String,
    /// Its namespace (none for a cluster-scoped object).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Ask this running host (its --listen address: `http://127.0.0.1:8080`).
    #[arg(long, conflicts_with = "state_dir")]
    pub server: Option<String>,
    /// A file holding the bearer token of the host's status server (--listen-token-file).
    #[arg(long, requires = "server")]
    pub token_file: Option<PathBuf>,
    /// Read the ledger of a stopped host in this state directory (default: the host's
    /// default, $XDG_STATE_HOME/kubeplug or ~/.local/state/kubeplug).
    #[arg(long, env = "KUBEPLUG_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Only reconciles since: a duration back from now (`90s`, `15m`, `2h`, `3d`) or an
    /// RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Only this plugin's reconciles.
    #[arg(long)]
    pub plugin: Option<String>,
    /// At most this many (the newest).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub limit: u64,
    /// How to print.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One line per reconcile, one per action below it.
    Text,
    /// The ledger's entries as JSON.
    Json,
    /// The same as YAML.
    Yaml,
}

/// kubectl's short and plural names of the built-in kinds a plugin reconciles most.
const KINDS: &[(&[&str], &str)] = &[
    (&["deploy", "deployment", "deployments"], "Deployment"),
    (&["po", "pod", "pods"], "Pod"),
    (&["rs", "replicaset", "replicasets"], "ReplicaSet"),
    (&["sts", "statefulset", "statefulsets"], "StatefulSet"),
    (&["ds", "daemonset", "daemonsets"], "DaemonSet"),
    (&["svc", "service", "services"], "Service"),
    (&["cm", "configmap", "configmaps"], "ConfigMap"),
    (&["secret", "secrets"], "Secret"),
    (&["job", "jobs"], "Job"),
    (&["cj", "cronjob", "cronjobs"], "CronJob"),
    (&["ing", "ingress", "ingresses"], "Ingress"),
    (&["ns", "namespace", "namespaces"], "Namespace"),
    (
        &["sa", "serviceaccount", "serviceaccounts"],
        "ServiceAccount",
    ),
    (
        &["pvc", "persistentvolumeclaim", "persistentvolumeclaims"],
        "PersistentVolumeClaim",
    ),
];

/// The kinds `typed` may mean, most likely first: a built-in's kind, else the name as
/// typed and, for a plural (`foos`), its singular. The ledger's index ignores case.
pub fn kinds_meant(typed: &str) -> Vec<String> {
    let lower = typed.to_ascii_lowercase();
    if let Some((_, kind)) = KINDS
        .iter()
        .find(|(names, _)| names.contains(&lower.as_str()))
    {
        return vec![kind.to_string()];
    }
    let mut kinds = vec![typed.to_string()];
    if let Some(singular) = lower.strip_suffix('s').filter(|s| !s.is_empty()) {
        kinds.push(singular.to_string());
    }
    kinds
}

/// `since` as a time: a duration back from `now` or an RFC 3339 time.
pub fn since(text: &str, now: jiff::Timestamp) -> anyhow::Result<jiff::Timestamp> {
    if let Ok(at) = text.parse::<jiff::Timestamp>() {
        return Ok(at);
    }
    let back = match text.strip_suffix('d').and_then(|d| d.parse::<i64>().ok()) {
        Some(days) => jiff::SignedDuration::from_hours(days.saturating_mul(24)),
        None => text.parse::<jiff::SignedDuration>().with_context(|| {
            format!("--since {text:?}: expected a duration (90s, 15m, 2h, 3d) or an RFC 3339 time")
        })?,
    };
    now.checked_sub(back)
        .with_context(|| format!("--since {text:?} is too far back"))
}

/// The kind as typed, the namespace and the name `typed` names: `KIND/NAME` in `namespace`
/// (`-n`; none for a cluster-scoped object) or `KIND/NAMESPACE/NAME`, each part checked.
pub fn object(typed: &str, namespace: Option<&str>) -> anyhow::Result<(String, String, String)> {
    let expected = || {
        format!(
            "{typed:?}: expected KIND/NAME or KIND/NAMESPACE/NAME, as kubectl spells them (deploy/web, deploy/demo/web)"
        )
    };
    let parts: Vec<&str> = typed.split('/').collect();
    let (kind, in_object, name) = match parts[..] {
        [kind, name] => (kind, None, name),
        [kind, ns, name] => (kind, Some(ns), name),
        _ => anyhow::bail!(expected()),
    };
    if kind.is_empty() || name.is_empty() || in_object == Some("") {
        anyhow::bail!(expected());
    }
    let namespace = match (in_object, namespace) {
        (Some(a), Some(b)) if a != b => {
            anyhow::bail!("{typed:?} names namespace {a:?} but -n says {b:?}")
        }
        (a, b) => a.or(b).unwrap_or_default(),
    };
    if kind.len() > 63 || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        anyhow::bail!("{kind:?} is not a kind: letters and digits, at most 63");
    }
    if !namespace.is_empty() && !crate::contract::names::is_dns_label(namespace) {
        anyhow::bail!(
            "{namespace:?} is not a namespace: lowercase letters, digits and '-', at most 63"
        );
    }
    if name.len() > 253 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        anyhow::bail!("{name:?} is not an object name: at most 253 characters, no spaces");
    }
    Ok((kind.to_string(), namespace.to_string(), name.to_string()))
}

/// Runs `kubeplug why`.
pub async fn run(args: WhyArgs) -> anyhow::Result<ExitCode> {
    let (typed, namespace, name) = object(&args.object, args.namespace.as_deref())?;
    let since = args
        .since
        .as_deref()
        .map(|s| since(s, jiff::Timestamp::now()))
        .transpose()?;
    let mut report = None;
    for kind in kinds_meant(&typed) {
        let object = ObjectId {
            kind,
            namespace: namespace.clone(),
            name: name.clone(),
        };
        let found = match &args.server {
            Some(server) => ask(server, &args, &object, since).await?,
            None => read(&args, &object, since)?,
        };
        let empty = found.entries.is_empty();
        report = Some(found);
        if !empty {
            break;
        }
    }
    let report = report.expect("at least one kind is tried");
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&report)?),
        Output::Text => print!("{}", text(&report)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks a running host's `/api/why`.
async fn ask(
    server: &str,
    args: &WhyArgs,
    object: &ObjectId,
    since: Option<jiff::Timestamp>,
) -> anyhow::Result<WhyReport> {
    let mut url = reqwest::Url::parse(server)
        .and_then(|u| u.join("/api/why"))
        .with_context(|| {
            format!("--server {server:?}: expected a URL such as http://127.0.0.1:8080")
        })?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("kind", &object.kind)
            .append_pair("namespace", &object.namespace)
            .append_pair("name", &object.name)
            .append_pair("limit", &args.limit.to_string());
        if let Some(since) = since {
            q.append_pair("since", &since.to_string());
        }
        if let Some(plugin) = &args.plugin {
            q.append_pair("plugin", plugin);
        }
    }
    // reqwest's rustls takes the process's crypto provider: ring, as everywhere here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new().get(url.clone());
    if let Some(file) = &args.token_file {
        let token = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the token file {}", file.display()))?;
        request = request.bearer_auth(token.trim());
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach the host at {server}"))?;
    let status = response.status();
    // An answer is bounded: at most 1,000 entries of bounded size.
    let body = response.text().await.context("the host's answer")?;
    if !status.is_success() {
        anyhow::bail!("the host at {server} answered {status}: {}", body.trim());
    }
    serde_json::from_str(&body).with_context(|| {
        format!("the host at {server} answered something that is not a ledger report")
    })
}

/// Reads the ledger of a stopped host.
fn read(
    args: &WhyArgs,
    object: &ObjectId,
    since: Option<jiff::Timestamp>,
) -> anyhow::Result<WhyReport> {
    let dir = args
        .state_dir
        .clone()
        .or_else(super::run_settings::default_state_dir)
        .context("no state directory: give --state-dir, or ask a running host with --server")?;
    if !dir.join(crate::ledger::FILE_NAME).exists() {
        anyhow::bail!(
            "{} holds no decision ledger: give the host's --state-dir, or ask a running host with --server",
            dir.display()
        );
    }
    let store = Store::open(&dir, LedgerConfig::in_dir(dir.clone()).retention).with_context(
        || "a running host holds its ledger open: ask it with --server (its --listen address)",
    )?;
    let entries = store.history(&Query {
        object: object.index_key(),
        since,
        plugin: args.plugin.clone(),
        limit: args.limit as usize,
    })?;
    Ok(WhyReport {
        object: object.clone(),
        entries,
    })
}

/// The report in a person's terms: a line per reconcile (when, which plugin, why, the
/// version it saw), a line per action and its verdict, and what each write left.
pub fn text(report: &WhyReport) -> String {
    use std::fmt::Write;
    let o = &report.object;
    let mut out = String::new();
    let shown = match o.namespace.as_str() {
        "" => format!("{} {}", o.kind, o.name),
        ns => format!("{} {ns}/{}", o.kind, o.name),
    };
    if report.entries.is_empty() {
        let _ = writeln!(out, "no reconcile of {shown} is recorded");
        return out;
    }
    for e in &report.entries {
        let _ = writeln!(out, "{}", headline(e));
        for t in &e.triggers {
            let via = t
                .via
                .as_deref()
                .map(|v| format!("{} ", safe(v)))
                .unwrap_or_default();
            let rv = match (&t.rv_before, &t.rv_after) {
                (Some(a), Some(b)) => format!(" (rv {}→{})", safe(a), safe(b)),
                (Some(v), None) | (None, Some(v)) => format!(" (rv {})", safe(v)),
                (None, None) => String::new(),
            };
            let changed: Vec<String> = t.changed.iter().map(|p| safe(p)).collect();
            let changed = match changed.is_empty() {
                true => String::new(),
                false => format!(": {}", changed.join(", ")),
            };
            let by =
                t.by.as_deref()
                    .map(|b| format!(" by {}", safe(b)))
                    .unwrap_or_default();
            let _ = writeln!(out, "    ← {via}{}{by}{rv}{changed}", safe(&t.reason));
        }
        if e.queued as usize > e.triggers.len() {
            let _ = writeln!(
                out,
                "    ← and {} earlier, merged by the queue",
                e.queued as usize - e.triggers.len()
            );
        }
        if !e.reads.is_empty() {
            let reads: Vec<String> = e.reads.iter().map(|r| safe(r)).collect();
            let more = match e.read_count > e.reads.len() {
                true => format!(" and {} more", e.read_count - e.reads.len()),
                false => String::new(),
            };
            let _ = writeln!(out, "    read {}{more}", reads.join(", "));
        }
        if e.actions.is_empty() && e.error.is_none() {
            let _ = writeln!(out, "    no action");
        }
        for a in &e.actions {
            let detail = a
                .detail
                .as_deref()
                .map(|d| format!(": {}", safe(d)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {} {} → {}{detail}",
                safe(&a.action),
                safe(&a.target),
                safe(&a.decision)
            );
        }
        if e.action_count > e.actions.len() {
            let _ = writeln!(
                out,
                "    … and {} more actions",
                e.action_count - e.actions.len()
            );
        }
        for w in &e.writes {
            if let Some(rv) = &w.resource_version {
                let _ = writeln!(
                    out,
                    "    {} {} (now rv {})",
                    safe(&w.change),
                    safe(&w.object),
                    safe(rv)
                );
            }
        }
        if let Some(err) = &e.error {
            let _ = writeln!(out, "    failed: {}", safe(err));
        }
    }
    out
}

/// Text from the ledger (plugin and tenant text among it) as a terminal shows it safely:
/// control characters, newlines included, become `?`.
fn safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn headline(e: &Entry) -> String {
    let at = e.time.strftime("%Y-%m-%d %H:%M:%S%.3f");
    let seen = match &e.resource_version {
        Some(rv) => format!("rv {}", safe(rv)),
        None => "gone".to_string(),
    };
    let attempt = if e.attempt > 1 {
        format!(", attempt {}", e.attempt)
    } else {
        String::new()
    };
    let digest = e.digest.strip_prefix("sha256:").unwrap_or(&e.digest);
    format!(
        "{at}  {} ({}) ran: {} ({seen}{attempt})",
        safe(&e.plugin),
        safe(digest.get(..12).unwrap_or(digest)),
        safe(&e.reason)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Verdict, Written};

    #[test]
    fn kubectl_spellings_name_the_kind() {
        assert_eq!(kinds_meant("deploy"), ["Deployment"]);
        assert_eq!(kinds_meant("Deployments"), ["Deployment"]);
        assert_eq!(kinds_meant("foos"), ["foos", "foo"]);
        assert_eq!(kinds_meant("Foo"), ["Foo"]);
    }

    #[test]
    fn objects_are_spelled_as_kubectl_spells_them() {
        let parts = |t: &str, n: Option<&str>| object(t, n).map_err(|e| e.to_string());
        let three = |k: &str, n: &str, m: &str| (k.to_string(), n.to_string(), m.to_string());
        assert_eq!(parts("deploy/web", None), Ok(three("deploy", "", "web")));
        assert_eq!(
            parts("deploy/web", Some("demo")),
            Ok(three("deploy", "demo", "web"))
        );
        assert_eq!(
            parts("deploy/demo/web", None),
            Ok(three("deploy", "demo", "web"))
        );
        assert_eq!(
            parts("deploy/demo/web", Some("demo")),
            Ok(three("deploy", "demo", "web"))
        );
        let wrong = |t: &str, n: Option<&str>| parts(t, n).unwrap_err();
        assert!(wrong("deploy/demo/web", Some("prod")).contains("-n says \"prod\""));
        for bad in ["web", "deploy/", "/web", "a/b/c/d", "deploy//web"] {
            assert!(wrong(bad, None).contains("expected KIND/NAME"), "{bad}");
        }
        assert!(wrong("de-ploy/web", None).contains("is not a kind"));
        assert!(wrong("deploy/Demo/web", None).contains("is not a namespace"));
        assert!(wrong(&format!("deploy/{}", "a".repeat(254)), None).contains("not an object name"));
        assert!(wrong("deploy/we\u{1b}b", None).contains("not an object name"));
    }

    #[test]
    fn since_takes_durations_and_times() {
        let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        assert_eq!(
            since("2h", now).unwrap().to_string(),
            "2026-11-28T10:00:00Z"
        );
        assert_eq!(
            since("3d", now).unwrap().to_string(),
            "2026-11-25T12:00:00Z"
        );
        assert_eq!(
            since("2026-11-01T00:00:00Z", now).unwrap().to_string(),
            "2026-11-01T00:00:00Z"
        );
        let err = since("yesterday", now).unwrap_err().to_string();
        assert!(err.contains("--since \"yesterday\""), "{err}");
    }

    #[test]
    fn text_says_what_each_reconcile_did() {
        let report = WhyReport {
            object: ObjectId {
                kind: "Deployment".into(),
                namespace: "demo".into(),
                name: "web".into(),
            },
            entries: vec![Entry {
                digest: "sha256:0123456789abcdef".into(),
                resource_version: Some("4230".into()),
                triggers: vec![crate::ledger::TriggerRecord {
                    reason: "changed".into(),
                    via: None,
                    by: Some("kubectl (scale)".into()),
                    rv_before: Some("4211".into()),
                    rv_after: Some("4230".into()),
                    changed: vec![
                        "/spec/replicas 1→3".into(),
                        "/metadata/labels/evil\u{1b}[2J".into(),
                    ],
                }],
                queued: 3,
                actions: vec![Verdict {
                    action: "patch".into(),
                    target: "Deployment demo/web".into(),
                    decision: "executed".into(),
                    detail: None,
                    body_digest: None,
                }],
                action_count: 1,
                writes: vec![Written {
                    change: "patched".into(),
                    object: "Deployment demo/web".into(),
                    resource_version: Some("4231".into()),
                }],
                ..Entry::sample(
                    "demo",
                    "web",
                    "image-pinner",
                    "2026-11-28T14:03:07Z".parse().unwrap(),
                )
            }],
        };
        let shown = text(&report);
        assert!(
            shown.starts_with(
                "2026-11-28 14:03:07.000  image-pinner (0123456789ab) ran: changed (rv 4230)\n"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("    patch Deployment demo/web → executed\n"),
            "{shown}"
        );
        assert!(
            shown.contains("    patched Deployment demo/web (now rv 4231)\n"),
            "{shown}"
        );
        assert!(
            shown.contains(
                "    ← changed by kubectl (scale) (rv 4211→4230): /spec/replicas 1→3, /metadata/labels/evil?[2J\n"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("    ← and 2 earlier, merged by the queue\n"),
            "{shown}"
        );
    }
}
