//! `kubeplug eval`: run one plugin offline against a manifest (or an object read from a
//! cluster, `--from-cluster`) and print its actions.

mod from_cluster;

use crate::contract::text::shown;
use crate::contract::{ObjectRef, Reason, ReconcileRequest};
use crate::fixtures::FixtureObjects;
use crate::manifest;
use crate::plugin::{
    CallContext, Limits, NoObjects, ObjectSource, Plugin, PluginRuntime, RuntimeConfig,
};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Options of `kubeplug eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The plugin: a .wasm component, or oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST] to
    /// pull it (through the module cache) with the registry flags.
    #[arg(long)]
    pub plugin: PathBuf,
    /// The object to reconcile (YAML or JSON manifest).
    #[arg(long, required_unless_present = "from_cluster")]
    pub object: Option<PathBuf>,
    /// Read the object to reconcile, and the objects the plugin reads (the kinds it
    /// reconciles and owns, in the object's namespace), from the cluster of the current
    /// kubeconfig instead: KIND/NAMESPACE/NAME, or KIND/NAME for a cluster-scoped kind.
    #[arg(long, value_name = "KIND/NAMESPACE/NAME", conflicts_with_all = ["object", "cache"])]
    pub from_cluster: Option<String>,
    /// With --from-cluster: read what this PluginPolicy lets the plugin read (its `reads`,
    /// and the owned kinds it may write) instead of every kind it declares.
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub policy: Option<PathBuf>,
    /// With --from-cluster: the kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then
    /// the in-cluster service account).
    #[arg(long, requires = "from_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// With --from-cluster: the kubeconfig context (default: its current one).
    #[arg(long, requires = "from_cluster")]
    pub context: Option<String>,
    /// With --from-cluster: at most this many objects are read, the object included.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub capture_max_objects: u32,
    /// With --from-cluster: at most this many MiB of API responses are read.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub capture_max_mib: u32,
    /// With --from-cluster: save the case into DIR as `kubeplug test` reads it
    /// (NAME.object.yaml, NAME.expect.yaml recording what the plugin did, cache/*.yaml).
    #[arg(long, value_name = "DIR", requires = "from_cluster")]
    pub save_case: Option<PathBuf>,
    /// The version the plugin last reconciled (for plugins that ask for it).
    #[arg(long)]
    pub previous: Option<PathBuf>,
    /// The plugin's configuration: JSON text, or @FILE to read it from a file.
    #[arg(long)]
    pub config: Option<String>,
    /// A directory of YAML manifests the plugin can read through its get/list imports.
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Reconcile as if the object had been deleted (the plugin gets no object).
    #[arg(long)]
    pub deleted: bool,
    /// The reason sent to the plugin (added, changed, deleted, resync, retry, requeue);
    /// by default derived from --deleted and --previous.
    #[arg(long)]
    pub reason: Option<Reason>,
    /// The attempt number sent to the plugin.
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,
    /// Limits of the call (`--timeout-ms`, `--memory-mib`): the same flags, defaults and
    /// environment variables as `kubeplug run`.
    #[command(flatten)]
    pub limits: super::call_limits::CallLimitArgs,
    /// Where precompiled plugins are cached (default: $KUBEPLUG_CACHE_DIR or ~/.cache/kubeplug).
    #[arg(long, env = "KUBEPLUG_CACHE_DIR")]
    pub compile_cache: Option<PathBuf>,
    /// How the result is printed: json, or yaml (what --expect reads: recording an
    /// expectation is saving this output).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Compare the actions with an expectation (YAML or JSON, as `--format yaml` prints
    /// them) instead of printing them: exit 1 with a diff when they differ.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Registry flags, for an oci:// plugin.
    #[command(flatten)]
    pub registry: crate::oci::RegistryArgs,
}

/// How `kubeplug eval` prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Pretty-printed JSON.
    Json,
    /// YAML, the form of an expectation file.
    Yaml,
}

/// Prints eval's output document in `format`, every terminal control character escaped.
pub(crate) fn print_output(out: &Value, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => serde_json::to_string_pretty(out)? + "\n",
        Format::Yaml => super::golden::yaml(out),
    };
    print!("{}", terminal_safe(&text));
    Ok(())
}

pub(crate) fn read_object(path: &Path) -> anyhow::Result<Value> {
    let mut docs = manifest::read_file(path)?;
    if docs.len() != 1 {
        bail!(
            "{} holds {} objects; eval takes exactly one",
            path.display(),
            docs.len()
        );
    }
    let mut object = docs.remove(0);
    crate::cluster::strip_managed_fields(&mut object);
    Ok(object)
}

/// Kinds that live outside namespaces; every other kind defaults to namespace `default`.
pub(crate) const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
];

fn target_of(object: &Value) -> ObjectRef {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let kind = s("/kind").unwrap_or_default();
    let namespace = s("/metadata/namespace")
        .or_else(|| (!CLUSTER_SCOPED.contains(&kind.as_str())).then(|| "default".to_string()));
    ObjectRef {
        api_version: s("/apiVersion").unwrap_or_default(),
        kind,
        namespace,
        name: s("/metadata/name").unwrap_or_default(),
    }
}

/// Text (JSON, YAML or a diff of them) with every character a terminal could act on written as a `\uXXXX` escape:
/// serde_json escapes C0 controls in strings, not DEL, C1 controls (`\u{9b}` starts an
/// escape sequence on some terminals) or bidi overrides. Only the pretty printer's own
/// newlines stay raw.
pub(crate) fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let risky = (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}');
        if risky {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn read_config(config: Option<&str>) -> anyhow::Result<Option<Arc<str>>> {
    let Some(config) = config else {
        return Ok(None);
    };
    let text = match config.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {path}"))?,
        None => config.to_string(),
    };
    serde_json::from_str::<Value>(&text)
        .with_context(|| format!("--config is not valid JSON: {text:?}"))?;
    Ok(Some(text.into()))
}

/// What one call is given besides the plugin: `kubeplug eval`'s flags, or a case of
/// `kubeplug test`.
#[derive(Clone)]
pub(crate) struct Inputs {
    /// The object reconciled.
    pub object: Value,
    /// The version last reconciled, for plugins that ask for it.
    pub previous: Option<Value>,
    /// The plugin's configuration (JSON text).
    pub config: Option<Arc<str>>,
    /// Reconcile as if the object had been deleted.
    pub deleted: bool,
    /// The reason sent; derived from `deleted` and `previous` when absent.
    pub reason: Option<Reason>,
    /// The attempt number sent.
    pub attempt: u32,
}

/// A plugin loaded for offline calls, named as `kubeplug run` would name its file.
pub(crate) struct Loaded {
    plugin: Arc<Plugin>,
    name: String,
}

impl Loaded {
    /// Loads (compiles, or takes from the compile cache) the plugin file.
    pub async fn load(path: &Path, compile_cache: Option<PathBuf>) -> anyhow::Result<Self> {
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: compile_cache.or_else(crate::plugin::default_cache_dir),
            max_sandboxes: 4,
            ..RuntimeConfig::default()
        })?;
        let plugin = runtime.load_file(path).await?;
        // The instance name `kubeplug run` would give this file (its name), not the declared one.
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Err(why) = crate::controller::InstanceName::parse(&name) {
            tracing::warn!("kubeplug run would not start this file: {why}");
        }
        Ok(Loaded { plugin, name })
    }

    /// Pulls the module `reference` names (from the module cache when held) and loads it;
    /// its instance name is the repository's last component.
    pub async fn load_oci(
        reference: &crate::oci::OciRef,
        registry: &crate::oci::RegistryArgs,
        compile_cache: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let registries = crate::oci::Registries::new(registry)?;
        let pulled =
            crate::oci::verification::pull_verified(&registries, reference, registry).await?;
        tracing::info!(module = %pulled.pinned, sha256 = %pulled.module_digest, cached = pulled.cached, "pulled");
        let runtime = PluginRuntime::new(RuntimeConfig {
            cache_dir: compile_cache.or_else(crate::plugin::default_cache_dir),
            max_sandboxes: 4,
            ..RuntimeConfig::default()
        })?;
        let plugin = runtime
            .load_bytes(&pulled.pinned.to_string(), pulled.bytes)
            .await?;
        let name = reference
            .repository
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        Ok(Loaded { plugin, name })
    }

    /// Calls the plugin once: eval's output document `{plugin, target, actions, logs}`, or
    /// the lines that say why the call failed (its logs, then the error).
    pub async fn call(
        &self,
        inputs: Inputs,
        limits: Limits,
        objects: Arc<dyn ObjectSource>,
    ) -> Result<Value, Vec<String>> {
        let (plugin, name) = (&self.plugin, &self.name);
        let meta = plugin.metadata();
        if inputs.previous.is_some() && !meta.wants_previous {
            tracing::warn!(plugin = %name, "--previous ignored: the plugin does not ask for the previous version");
        }
        let (request, report) = self.reconcile(inputs, limits, objects).await;
        let plugin_info = json!({
            "name": name, "declared": meta.name, "version": meta.version,
            "contract": plugin.contract_version(), "digest": plugin.digest(),
        });
        match report.outcome {
            Ok(actions) => {
                let mut out = json!({
                    "plugin": plugin_info,
                    "target": request.target,
                    "actions": actions,
                    "logs": report.logs,
                });
                if report.dropped_logs > 0 {
                    out["droppedLogs"] = report.dropped_logs.into();
                }
                Ok(out)
            }
            Err(err) => Err(self.failure_lines(&report.logs, report.dropped_logs, &err)),
        }
    }

    /// Calls the plugin once: its checked actions, or the lines that say why the call failed.
    pub async fn call_actions(
        &self,
        inputs: Inputs,
        limits: Limits,
        objects: Arc<dyn ObjectSource>,
    ) -> Result<Vec<crate::contract::Action>, Vec<String>> {
        let (_, report) = self.reconcile(inputs, limits, objects).await;
        report
            .outcome
            .map_err(|err| self.failure_lines(&report.logs, report.dropped_logs, &err))
    }

    /// The plugin's logs, then its error, as lines for the terminal.
    fn failure_lines(
        &self,
        logs: &[crate::plugin::PluginLog],
        dropped: u64,
        err: &crate::plugin::CallError,
    ) -> Vec<String> {
        let mut lines: Vec<String> = logs
            .iter()
            .map(|log| format!("plugin {:?}: {}", log.source, shown(&log.message)))
            .collect();
        if dropped > 0 {
            lines.push(format!("plugin: {dropped} log lines dropped"));
        }
        lines.push(format!(
            "error: plugin {} ({}) {err}",
            self.name,
            err.kind()
        ));
        lines
    }

    /// One call: the request sent and the plugin's report.
    async fn reconcile(
        &self,
        inputs: Inputs,
        limits: Limits,
        objects: Arc<dyn ObjectSource>,
    ) -> (ReconcileRequest, crate::plugin::CallReport) {
        let (plugin, name) = (&self.plugin, &self.name);
        let meta = plugin.metadata();
        let reason = inputs.reason.unwrap_or(if inputs.deleted {
            Reason::Deleted
        } else if inputs.previous.is_some() {
            Reason::Changed
        } else {
            Reason::Added
        });
        let request = ReconcileRequest {
            target: target_of(&inputs.object),
            object: (!inputs.deleted).then(|| inputs.object.to_string().into()),
            previous: inputs
                .previous
                .filter(|_| meta.wants_previous)
                .map(|p| p.to_string().into()),
            reason,
            attempt: inputs.attempt,
            config: inputs.config,
        };
        let report = plugin
            .reconcile(
                &request,
                &CallContext::new(limits, objects).for_instance(name),
            )
            .await;
        (request, report)
    }
}

/// Loads the plugin, calls it once, prints `{plugin, target, actions, logs}` as JSON (or
/// YAML), or with `--expect` compares the actions with the expectation. Exits 0 when the
/// plugin returned actions (that met the expectation), 1 (after printing why) when it failed
/// or they did not.
pub async fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let limits = Limits::from(args.limits.call_limits()?);
    let spec = args
        .from_cluster
        .as_deref()
        .map(from_cluster::Spec::parse)
        .transpose()?;
    let file_object = args.object.as_deref().map(read_object).transpose()?;
    let previous = args.previous.as_deref().map(read_object).transpose()?;
    let config = read_config(args.config.as_deref())?;
    // Read before the plugin loads: a broken expectation is reported without a compile.
    let expectation = args
        .expect
        .as_deref()
        .map(super::golden::Expectation::read)
        .transpose()?;
    let policy = args
        .policy
        .as_deref()
        .map(crate::policy::PolicyDocument::read)
        .transpose()?;
    let mut fixtures = args
        .cache
        .as_deref()
        .map(FixtureObjects::from_dir)
        .transpose()?;
    let loaded = match args.plugin.to_str().filter(|p| p.starts_with("oci://")) {
        Some(text) => {
            let reference = crate::oci::OciRef::parse(text)?;
            Loaded::load_oci(&reference, &args.registry, args.compile_cache.clone()).await?
        }
        None if args.registry.verification_config.is_some() => bail!(
            "--verification-config checks the signatures of a module in a registry; {} is a file, which carries none",
            args.plugin.display()
        ),
        None => Loaded::load(&args.plugin, args.compile_cache.clone()).await?,
    };
    // What the plugin may read: with --policy, as `kubeplug run` decides it (the policy's
    // readable kinds in the namespaces it grants); without one, the kinds it reconciles and
    // owns and every kind of the fixtures, in every namespace (what it was given to read).
    let meta = loaded.plugin.metadata();
    let grants = policy
        .as_ref()
        .map(|doc| crate::policy::Grants::from_spec(&doc.spec.grants).context("--policy"))
        .transpose()?;
    let reads = match &grants {
        Some(grants) => grants.readable(&meta.reconciles, &meta.owns),
        None => {
            let mut kinds = vec![meta.reconciles.clone()];
            kinds.extend(meta.owns.iter().filter(|k| **k != meta.reconciles).cloned());
            for kind in fixtures.iter().flat_map(FixtureObjects::kinds) {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            kinds
        }
    };
    let namespaces: crate::cluster::NamespaceFilter = match &grants {
        Some(grants) => {
            let granted = grants.namespaces.clone();
            Arc::new(move |namespace| granted.allows(namespace))
        }
        None => Arc::new(|_| true),
    };
    let mut captured = None;
    let object = match (file_object, &spec) {
        (Some(object), _) => object,
        (None, Some(spec)) => {
            let cluster = crate::cluster::ClusterArgs {
                kubeconfig: args.kubeconfig.clone(),
                context: args.context.clone(),
                namespace: None,
            };
            let bounds = from_cluster::Bounds {
                max_objects: args.capture_max_objects as usize,
                max_bytes: (args.capture_max_mib as usize) << 20,
            };
            let got = from_cluster::capture(&cluster, spec, &reads, bounds).await?;
            let mut taken = FixtureObjects::default();
            for object in &got.cache {
                taken.insert(object.clone());
            }
            fixtures = Some(taken);
            let object = got.object.clone();
            captured = Some(got);
            object
        }
        (None, None) => bail!("give --object FILE or --from-cluster KIND/NAMESPACE/NAME"),
    };
    let inputs = Inputs {
        object,
        previous,
        config,
        deleted: args.deleted,
        reason: args.reason,
        attempt: args.attempt,
    };
    let mut reads = reads;
    // Offline, the object may be of another kind than the plugin declares: readable too.
    let own = crate::contract::KindRef::new(
        inputs.object["apiVersion"].as_str().unwrap_or_default(),
        inputs.object["kind"].as_str().unwrap_or_default(),
    );
    if grants.is_none() && !reads.contains(&own) {
        reads.push(own);
    }
    let objects: Arc<dyn ObjectSource> = match fixtures {
        Some(fixtures) => Arc::new(fixtures.access(&reads, namespaces)),
        None => Arc::new(NoObjects),
    };
    match loaded.call(inputs, limits, objects).await {
        Ok(out) => {
            if let (Some(dir), Some(captured)) = (&args.save_case, &captured) {
                for file in from_cluster::save_case(dir, captured, &super::golden::yaml(&out))? {
                    eprintln!("wrote {}", terminal_safe(&file));
                }
            }
            report(out, expectation, &args)
        }
        Err(lines) => {
            for line in lines {
                eprintln!("{line}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Prints the output document, or with an expectation compares it: eval's exit code.
fn report(
    out: Value,
    expectation: Option<super::golden::Expectation>,
    args: &EvalArgs,
) -> anyhow::Result<ExitCode> {
    match expectation {
        None => {
            print_output(&out, args.format)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(expectation) => {
            let file = args.expect.as_deref().unwrap_or(Path::new("")).display();
            match expectation.check(&out) {
                Ok(()) => {
                    eprintln!(
                        "{file}: expectation met ({} actions)",
                        expectation.action_count()
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(diff) => {
                    eprint!(
                        "{}",
                        terminal_safe(&format!(
                            "{file}: the actions differ from the expectation\n{diff}"
                        ))
                    );
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_for_the_terminal_escapes_what_serde_json_leaves_raw() {
        let v = json!({"m": "a\u{1b}[31m\u{9b}2J\u{7f}\u{202e}\nz"});
        let text = terminal_safe(&serde_json::to_string_pretty(&v).unwrap());
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
        assert!(
            text.contains("\\u009b") && text.contains("\\u202e"),
            "{text}"
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn yaml_for_the_terminal_escapes_controls_and_reads_back_the_same() {
        let v = json!({"m": "a\u{1b}[31m\u{9b}2J\u{7f}\u{202e}z", "n": "two\nlines"});
        let text = terminal_safe(&crate::cli::golden::yaml(&v));
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
        assert!(!text.contains('\u{202e}'), "{text}");
        let back: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(back, v, "{text}");
    }
}
