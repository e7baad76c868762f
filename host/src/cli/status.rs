//! `kubeplug status [-n NAMESPACE | -A]`: the Plugins of a namespace (or all) with their
//! conditions, mode, digest, grant, where they run, counts and the last error, as the host
//! wrote them in their status. Also `kubectl kubeplug status`: the binary copied onto PATH
//! as `kubectl-kubeplug` is the kubectl plugin.

use crate::cluster::ClusterArgs;
use crate::plugin_objects::plugin_resource;
use anyhow::Context;
use clap::Args;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;
use std::process::ExitCode;

/// `kubeplug status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The cluster (`-n NAMESPACE` picks the namespace; default: the kubeconfig context's).
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Every namespace's Plugins.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Print the Plugins' status objects as JSON instead.
    #[arg(short = 'o', long, value_parser = ["text", "json"], default_value = "text")]
    pub output: String,
}

/// The most Plugins printed.
const MAX_PLUGINS: u32 = 10_000;

/// Runs `kubeplug status`.
pub async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let client = crate::cluster::connect(&ClusterArgs {
        namespace: None,
        ..args.cluster.clone()
    })
    .await?;
    let resource = plugin_resource();
    let namespace = match (&args.cluster.namespace, args.all_namespaces) {
        (_, true) => None,
        (Some(ns), false) => Some(ns.clone()),
        (None, false) => Some(client.default_namespace().to_string()),
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let list = api
        .list(&ListParams::default().limit(MAX_PLUGINS))
        .await
        .context("cannot list Plugins (are kubeplug's CRDs installed? kubectl apply -f host/deploy/crds/)")?;
    let plugins: Vec<Value> = list
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&plugins)?);
    } else {
        print!("{}", table(&plugins, namespace.as_deref()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Text as a terminal shows it safely: control characters escaped, at most `max` chars.
fn shown(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .take(max)
        .collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// One line per Plugin, and below it what is wrong with it (a Ready condition that is not
/// True, or a True Stalled), in the status's own words.
pub fn table(plugins: &[Value], namespace: Option<&str>) -> String {
    use std::fmt::Write;
    if plugins.is_empty() {
        return match namespace {
            Some(ns) => format!("no Plugins in namespace {ns}\n"),
            None => "no Plugins\n".to_string(),
        };
    }
    let s = |v: &Value| shown(v.as_str().unwrap_or("-"), 80);
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "REASON",
            "MODE",
            "DIGEST",
            "RUNS ON",
            "RECONCILES",
            "ERRORS",
            "DENIED",
            "GRANT",
        ]
        .map(String::from),
    ];
    let mut notes: Vec<Vec<String>> = vec![Vec::new()];
    for p in plugins {
        let status = &p["status"];
        let ready = condition(status, "Ready");
        let counts = &status["counts"];
        let n = |k: &str| {
            counts[k]
                .as_u64()
                .map_or("-".to_string(), |c| c.to_string())
        };
        rows.push([
            s(&p["metadata"]["namespace"]),
            s(&p["metadata"]["name"]),
            ready.map_or("-".into(), |c| s(&c["status"])),
            ready.map_or("-".into(), |c| s(&c["reason"])),
            s(&status["mode"]),
            s(&status["shortDigest"]),
            s(&status["runner"]),
            n("reconciles"),
            n("errors"),
            n("denied"),
            shown(status["grant"].as_str().unwrap_or("-"), 200),
        ]);
        let mut wrong = Vec::new();
        if let Some(c) = ready.filter(|c| c["status"] != "True") {
            wrong.push(format!(
                "not ready: {}",
                shown(c["message"].as_str().unwrap_or(""), 400)
            ));
        }
        if let Some(c) = condition(status, "Stalled").filter(|c| c["status"] == "True") {
            wrong.push(format!(
                "stalled: {}",
                shown(c["message"].as_str().unwrap_or(""), 400)
            ));
        }
        notes.push(wrong);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (row, wrong) in rows.iter().zip(&notes) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        for w in wrong {
            let _ = writeln!(out, "    {w}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_line_per_plugin_and_what_is_wrong_below_it() {
        let plugins = [
            json!({"metadata": {"namespace": "team-a", "name": "pinner"}, "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Running", "message": "ok"}],
                "mode": "enforce", "shortDigest": "4ae3fca0af3b", "runner": "replica-1",
                "counts": {"reconciles": 12, "errors": 0, "denied": 1},
                "grant": "team-a; apps/v1 Deployment: patch"}}),
            json!({"metadata": {"namespace": "team-a", "name": "broken"}, "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ModuleInvalid", "message": "not a component\u{1b}[2J"},
                    {"type": "Stalled", "status": "True", "reason": "ModuleInvalid", "message": "fix the module"}]}}),
        ];
        let t = table(&plugins, Some("team-a"));
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("NAMESPACE  NAME    READY  REASON"),
            "{t}"
        );
        assert!(
            lines[1].contains("pinner")
                && lines[1].contains("True")
                && lines[1].contains("4ae3fca0af3b"),
            "{t}"
        );
        assert!(
            lines[1].ends_with("team-a; apps/v1 Deployment: patch"),
            "{t}"
        );
        assert!(
            lines[2].contains("broken") && lines[2].contains("ModuleInvalid"),
            "{t}"
        );
        // A tenant's text reaches the terminal escaped.
        assert_eq!(lines[3], "    not ready: not a component\\u{1b}[2J");
        assert_eq!(lines[4], "    stalled: fix the module");
        assert_eq!(table(&[], Some("x")), "no Plugins in namespace x\n");
    }
}
