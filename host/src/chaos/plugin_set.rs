//! Which plugins a chaos run loads: the four Rust seed plugins, or their TypeScript/Python
//! ports (with the Rust change-logger, which has no port), each under its Rust original's
//! sample policy renamed for it, so both sets run with the same grants and must end with the
//! same objects. [`PluginChoice`] says which set each schedule runs.

use crate::policy::Policy;
use anyhow::Context;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// The Rust seed plugins with their sample policies.
const RUST: [(&str, &str); 4] = [
    (
        "image-pinner",
        include_str!("../../samples/policies/image-pinner.policy.yaml"),
    ),
    (
        "change-logger",
        include_str!("../../samples/policies/change-logger.policy.yaml"),
    ),
    (
        "sample-controller",
        include_str!("../../samples/policies/sample-controller.policy.yaml"),
    ),
    (
        "customcluster",
        include_str!("../../samples/policies/customcluster.policy.yaml"),
    ),
];

/// Each port and the Rust plugin it ports (change-logger has none and runs as itself).
const PORTS: [(&str, &str); 4] = [
    ("image-pinner-py", "image-pinner"),
    ("change-logger", "change-logger"),
    ("sample-controller-ts", "sample-controller"),
    ("customcluster-py", "customcluster"),
];

/// One set of plugins a run loads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PluginSet {
    /// The four Rust seed plugins.
    #[default]
    Rust,
    /// image-pinner-py, sample-controller-ts, customcluster-py and the Rust change-logger.
    Ports,
}

impl PluginSet {
    /// The plugin (file stem) names of this set.
    pub fn names(self) -> [&'static str; 4] {
        match self {
            PluginSet::Rust => RUST.map(|(name, _)| name),
            PluginSet::Ports => PORTS.map(|(name, _)| name),
        }
    }

    /// Each plugin of the set with its policy: the Rust original's sample policy, with
    /// `metadata.name` naming the port (a policy governs the file of its name).
    pub fn policies(self) -> Vec<(&'static str, String)> {
        self.names()
            .into_iter()
            .map(|name| {
                let original = PORTS
                    .iter()
                    .find(|(port, _)| *port == name)
                    .map_or(name, |(_, original)| *original);
                let text = RUST
                    .iter()
                    .find(|(rust, _)| *rust == original)
                    .map(|(_, text)| *text)
                    .unwrap_or_default();
                let renamed = text.replacen(
                    &format!("\n  name: {original}\n"),
                    &format!("\n  name: {name}\n"),
                    1,
                );
                (name, renamed)
            })
            .collect()
    }

    /// Copies the set's `.wasm` files from `plugins` into `dir`, each with its policy.
    pub fn install(self, plugins: &Path, dir: &Path) -> anyhow::Result<()> {
        for (name, policy) in self.policies() {
            let file = plugins.join(format!("{name}.wasm"));
            std::fs::copy(&file, dir.join(format!("{name}.wasm"))).with_context(|| {
                format!(
                    "{} is missing: build the plugins first (`make plugins`)",
                    file.display()
                )
            })?;
            std::fs::write(dir.join(format!("{name}.policy.yaml")), policy)?;
        }
        Ok(())
    }
}

/// The plugins [`PluginSet::install`] put in `dir`.
pub fn installed(dir: &Path) -> anyhow::Result<Vec<&'static str>> {
    let mut names: Vec<&'static str> = PluginSet::Rust.names().to_vec();
    names.extend(PluginSet::Ports.names());
    names.sort_unstable();
    names.dedup();
    names.retain(|name| dir.join(format!("{name}.wasm")).is_file());
    anyhow::ensure!(!names.is_empty(), "no chaos plugin in {}", dir.display());
    Ok(names)
}

/// The policies of the plugins in `dir`, by plugin name, as the host reads them.
pub fn policies_in(dir: &Path) -> anyhow::Result<BTreeMap<String, Policy>> {
    installed(dir)?
        .into_iter()
        .map(|name| {
            let file = dir.join(format!("{name}.policy.yaml"));
            let policy =
                Policy::read(&file, name).with_context(|| format!("the policy of {name}"))?;
            Ok((name.to_string(), policy))
        })
        .collect()
}

impl fmt::Display for PluginSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginSet::Rust => "rust",
            PluginSet::Ports => "ports",
        })
    }
}

/// Which set each schedule of a run loads. The fault-free run every schedule is compared
/// with always runs the Rust set: a ports schedule passes only if the ports end where the
/// Rust originals end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PluginChoice {
    /// Every schedule runs the Rust plugins.
    Rust,
    /// Every schedule runs the ports.
    Ports,
    /// Even schedules the Rust plugins, odd ones the ports: both sets under faults at the
    /// cost of one set (the ports' first compile aside, which the compile cache keeps).
    #[default]
    Alternate,
}

impl PluginChoice {
    /// The set schedule `index` runs.
    pub fn for_schedule(self, index: u64) -> PluginSet {
        match self {
            PluginChoice::Rust => PluginSet::Rust,
            PluginChoice::Ports => PluginSet::Ports,
            PluginChoice::Alternate if index % 2 == 1 => PluginSet::Ports,
            PluginChoice::Alternate => PluginSet::Rust,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mode, PolicyDocument};

    /// A port's policy is its original's, renamed; and the port's own sample policy grants
    /// the same (it differs in name and mode only: the sample runs it in dry-run beside the
    /// original).
    #[test]
    fn ports_run_under_their_originals_policies_renamed() {
        let rust = PluginSet::Rust.policies();
        let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
        for ((port, text), (original, original_text)) in
            PluginSet::Ports.policies().iter().zip(&rust)
        {
            let file = Path::new("x.policy.yaml");
            let ours = PolicyDocument::parse(text, file).unwrap();
            let theirs = PolicyDocument::parse(original_text, file).unwrap();
            assert_eq!(ours.metadata.name, *port);
            assert_eq!(
                ours.spec, theirs.spec,
                "{port} runs under {original}'s grants"
            );
            let policy = Policy::from_document(&ours, port, file).unwrap();
            assert_eq!(policy.mode, Mode::Enforce, "{port}");
            if port != original {
                let mut sample =
                    PolicyDocument::read(&samples.join(format!("{port}.policy.yaml"))).unwrap();
                assert_eq!(sample.spec.grants.mode, Mode::DryRun);
                sample.spec.grants.mode = Mode::Enforce;
                assert_eq!(sample.spec, theirs.spec, "{port}'s sample grants drifted");
            }
        }
    }

    #[test]
    fn alternate_runs_the_ports_on_odd_schedules() {
        let sets: Vec<PluginSet> = (0..4)
            .map(|i| PluginChoice::Alternate.for_schedule(i))
            .collect();
        use PluginSet::{Ports, Rust};
        assert_eq!(sets, vec![Rust, Ports, Rust, Ports]);
        assert_eq!(PluginChoice::Ports.for_schedule(0), Ports);
        assert_eq!(PluginChoice::Rust.for_schedule(1), Rust);
    }
}
