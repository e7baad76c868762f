//! `kubeplug new NAME --lang rust|ts|py`: a plugin project in a new folder that builds, with
//! a sample fixture, its expectation (a passing `kubeplug test`) and a policy that grants
//! exactly what the sample reconcile does.
//!
//! The sample labels every object of the kind it reconciles with
//! `kubeplug.dev/reconciled-by: NAME` (a merge patch and a log line) and does nothing to an
//! object that carries the label already, so it never loops on its own write. The policy
//! grants that one label path on that one kind, in namespace `default` (or on cluster-scoped
//! objects, for the built-in cluster-scoped kinds).
//!
//! The SDK comes from its package (crates.io, npm, PyPI) unless `--sdk PATH` names a kubeplug
//! checkout: then the project uses that checkout's SDK sources, WIT files and the toolchains
//! its `make plugins` installed (jco, componentize-py), and a Rust project starts from the
//! checkout's Cargo.lock.

use super::eval::CLUSTER_SCOPED;
use anyhow::{Context, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The contract (WIT package) version the scaffolds build against.
const CONTRACT: &str = "0.1.0";
/// The SDK package versions a scaffold depends on without `--sdk`.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");
/// componentize-py, as the checkout's Makefile pins it.
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The label the sample sets.
const LABEL: &str = "kubeplug.dev/reconciled-by";

/// The languages a plugin can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with kubeplug-sdk (cargo, wasm32-wasip2).
    Rust,
    /// TypeScript, with kubeplug-sdk on npm (jco componentize).
    Ts,
    /// Python, with kubeplug-sdk on PyPI (componentize-py).
    Py,
}

/// Options of `kubeplug new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: a DNS-1123 label (it names the folder, the .wasm file and the
    /// plugin instance).
    pub name: String,
    /// The language of the plugin.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The kind it reconciles, as GROUP/VERSION/KIND (`v1/ConfigMap` or `core/v1/ConfigMap`
    /// for the core group).
    #[arg(
        long,
        value_name = "GROUP/VERSION/KIND",
        default_value = "apps/v1/Deployment"
    )]
    pub reconciles: String,
    /// A kind it creates and owns (repeatable): a change to one enqueues its owner.
    #[arg(long, value_name = "GROUP/VERSION/KIND")]
    pub owns: Vec<String>,
    /// The root of a kubeplug checkout whose SDKs, WIT files and toolchains the project
    /// uses instead of the published packages.
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
    /// Where to create the project (default: ./NAME). It must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
}

/// A kind named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gvk {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, in CamelCase.
    pub kind: String,
}

impl Gvk {
    /// Parses `GROUP/VERSION/KIND` or `VERSION/KIND` (core group); `flag` names the option in
    /// errors.
    pub fn parse(text: &str, flag: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let (group, version, kind) = match parts[..] {
            [version, kind] => ("", version, kind),
            [group, version, kind] => (group, version, kind),
            _ => bail!(
                "{flag} {text:?} is not GROUP/VERSION/KIND (for example apps/v1/Deployment, or v1/ConfigMap for the core group)"
            ),
        };
        let group = if group == "core" { "" } else { group };
        if !group.is_empty() && !crate::contract::names::is_dns_subdomain(group) {
            bail!("{flag} {text:?}: the group {group:?} is not a DNS subdomain");
        }
        let version_ok = version.starts_with('v')
            && version.len() <= 63
            && version
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !version_ok {
            bail!("{flag} {text:?}: the version {version:?} is not like v1, v1beta1, v2alpha1");
        }
        let kind_ok = kind.len() <= 63
            && kind.starts_with(|c: char| c.is_ascii_uppercase())
            && kind.bytes().all(|b| b.is_ascii_alphanumeric());
        if !kind_ok {
            bail!(
                "{flag} {text:?}: the kind {kind:?} is not a CamelCase name of ASCII letters and digits"
            );
        }
        let api_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Ok(Gvk {
            api_version,
            kind: kind.to_string(),
        })
    }

    fn cluster_scoped(&self) -> bool {
        CLUSTER_SCOPED.contains(&self.kind.as_str())
    }
}

/// Everything a template is filled with.
struct Project {
    name: String,
    lang: Lang,
    reconciles: Gvk,
    owns: Vec<Gvk>,
    /// The checkout (absolute), with `--sdk`.
    sdk: Option<PathBuf>,
}

/// Creates the project; prints what was created and the next commands.
pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    crate::controller::InstanceName::parse(&args.name)
        .map_err(|why| anyhow::anyhow!("NAME: {why}"))?;
    let reconciles = Gvk::parse(&args.reconciles, "--reconciles")?;
    let owns = args
        .owns
        .iter()
        .map(|o| Gvk::parse(o, "--owns"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sdk = args.sdk.as_deref().map(checkout).transpose()?;
    let project = Project {
        name: args.name.clone(),
        lang: args.lang,
        reconciles,
        owns,
        sdk,
    };
    let dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} already exists and is not empty: kubeplug new creates a new project",
            dir.display()
        );
    }
    let files = project.files();
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "created {} ({} plugin, {} files)",
        dir.display(),
        match args.lang {
            Lang::Rust => "Rust",
            Lang::Ts => "TypeScript",
            Lang::Py => "Python",
        },
        files.len()
    );
    println!(
        "next: cd {} && make test   (builds {}.wasm, then runs `kubeplug test tests`)",
        dir.display(),
        args.name
    );
    if args.sdk.is_none() {
        eprintln!(
            "note: the project names the kubeplug-sdk packages, which this project has not published yet: a package of that name in a public registry is not ours. Build with --sdk PATH or against packed SDKs (README, \"Writing a plugin\")"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkout `--sdk` names, absolute, checked to hold the SDKs.
fn checkout(path: &Path) -> anyhow::Result<PathBuf> {
    let root = std::fs::canonicalize(path)
        .with_context(|| format!("--sdk {}: cannot read this folder", path.display()))?;
    for part in [
        "plugin-sdk/Cargo.toml",
        "plugin-sdk/js/src/index.ts",
        "plugin-sdk/python/kubeplug/__init__.py",
    ] {
        if !root.join(part).exists() {
            bail!(
                "--sdk {}: not the root of a kubeplug checkout ({part} is missing)",
                path.display()
            );
        }
    }
    let wit = root.join("wit").join(format!("v{CONTRACT}"));
    if !wit.is_dir() {
        bail!(
            "--sdk {}: {} is missing: this checkout does not implement contract {CONTRACT}",
            path.display(),
            wit.display()
        );
    }
    if root
        .to_str()
        .is_none_or(|s| s.contains([' ', '"', '\'', '$']))
    {
        bail!(
            "--sdk {}: the path must be UTF-8 without spaces, quotes or '$' (it is written into a Makefile)",
            root.display()
        );
    }
    Ok(root)
}

impl Project {
    fn sdk_str(&self) -> Option<String> {
        self.sdk.as_ref().map(|p| p.display().to_string())
    }

    fn fill(&self, template: &str) -> String {
        let sample_namespace = if self.reconciles.cluster_scoped() {
            String::new()
        } else {
            "\n  namespace: default".to_string()
        };
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.name.replace('-', "_"))
            .replace("{{api_version}}", &self.reconciles.api_version)
            .replace("{{kind}}", &self.reconciles.kind)
            .replace("{{contract}}", CONTRACT)
            .replace("{{sdk_version}}", SDK_VERSION)
            .replace("{{componentize_py}}", COMPONENTIZE_PY_VERSION)
            .replace("{{label}}", LABEL)
            .replace("{{label_path}}", &LABEL.replace('/', "~1"))
            .replace("{{sample_namespace}}", &sample_namespace)
            .replace(
                "{{target_namespace}}",
                &sample_namespace.replace("\n  ", "\n    "),
            )
            .replace(
                "{{sample_key}}",
                if self.reconciles.cluster_scoped() {
                    "sample"
                } else {
                    "default/sample"
                },
            )
            .replace("{{sdk}}", &self.sdk_str().unwrap_or_default())
    }

    /// The files of the project, by path relative to its folder.
    fn files(&self) -> Vec<(String, String)> {
        let mut files = vec![
            ("policy.yaml".into(), self.fill(&self.policy())),
            (
                "tests/sample.object.yaml".into(),
                self.fill(&self.sample(false)),
            ),
            ("tests/sample.expect.yaml".into(), self.fill(EXPECT_PATCH)),
            (
                "tests/labelled.object.yaml".into(),
                self.fill(&self.sample(true)),
            ),
            (
                "tests/labelled.expect.yaml".into(),
                "# Already labelled: the plugin leaves it alone.\nactions: []\n".into(),
            ),
            ("README.md".into(), self.fill(&self.readme())),
        ];
        // Each owned kind as the arguments of a kind constructor: `"apps/v1", "Deployment"`.
        let owns: Vec<String> = self
            .owns
            .iter()
            .map(|g| format!("\"{}\", \"{}\"", g.api_version, g.kind))
            .collect();
        match self.lang {
            Lang::Rust => {
                let owns_calls: String = owns
                    .iter()
                    .map(|k| format!("\n            .owns_kind(KindRef::new({k}))"))
                    .collect();
                let dependency = match self.sdk_str() {
                    Some(sdk) => format!("{{ path = \"{sdk}/plugin-sdk\" }}"),
                    None => format!("\"{SDK_VERSION}\""),
                };
                files.push((
                    "Cargo.toml".into(),
                    self.fill(RUST_CARGO)
                        .replace("{{sdk_dependency}}", &dependency),
                ));
                files.push((
                    "src/lib.rs".into(),
                    self.fill(RUST_LIB).replace("{{owns}}", &owns_calls),
                ));
                files.push(("Makefile".into(), self.fill(RUST_MAKEFILE)));
                files.push((".gitignore".into(), "/target\n/*.wasm\n".into()));
                if let Some(sdk) = &self.sdk
                    && let Ok(lock) = std::fs::read_to_string(sdk.join("Cargo.lock"))
                {
                    files.push(("Cargo.lock".into(), lock));
                }
            }
            Lang::Ts => {
                let owns_list = owns
                    .iter()
                    .map(|k| format!("kind({k})"))
                    .collect::<Vec<_>>()
                    .join(", ");
                files.push((
                    "plugin.ts".into(),
                    self.fill(TS_PLUGIN).replace("{{owns}}", &owns_list),
                ));
                let (makefile, alias) = match &self.sdk {
                    Some(_) => (
                        TS_MAKEFILE_SDK,
                        "\n  resolve: { alias: { \"kubeplug-sdk\": \"{{sdk}}/plugin-sdk/js/src/index.ts\" } },",
                    ),
                    None => (TS_MAKEFILE_PACKAGE, ""),
                };
                files.push(("Makefile".into(), self.fill(makefile)));
                files.push((
                    "bundle.config.js".into(),
                    self.fill(&TS_BUNDLE.replace("{{alias}}", alias)),
                ));
                files.push(("package.json".into(), self.fill(TS_PACKAGE)));
                files.push((".gitignore".into(), "/node_modules\n/*.wasm\n".into()));
            }
            Lang::Py => {
                let owns_list = owns
                    .iter()
                    .map(|k| format!("kubeplug.kind({k})"))
                    .collect::<Vec<_>>()
                    .join(", ");
                files.push((
                    "app.py".into(),
                    self.fill(PY_APP).replace("{{owns}}", &owns_list),
                ));
                let makefile = if self.sdk.is_some() {
                    PY_MAKEFILE_SDK
                } else {
                    PY_MAKEFILE_PACKAGE
                };
                files.push(("Makefile".into(), self.fill(makefile)));
                files.push((
                    ".gitignore".into(),
                    "/.venv\n/*.wasm\n__pycache__/\n".into(),
                ));
            }
        }
        files
    }

    fn sample(&self, labelled: bool) -> String {
        let labels = if labelled {
            "\n  labels:\n    {{label}}: {{name}}"
        } else {
            ""
        };
        let spec = if self.reconciles.api_version == "apps/v1"
            && self.reconciles.kind == "Deployment"
        {
            "\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: sample}\n  template:\n    metadata:\n      labels: {app: sample}\n    spec:\n      containers:\n        - name: app\n          image: nginx:1.25\n"
        } else {
            "\n"
        };
        format!(
            "# A {{{{kind}}}} for `kubeplug test tests`; its expectation is in the .expect.yaml of the same name.\napiVersion: {{{{api_version}}}}\nkind: {{{{kind}}}}\nmetadata:\n  name: sample{{{{sample_namespace}}}}{labels}{spec}"
        )
    }

    fn policy(&self) -> String {
        let namespaces = if self.reconciles.cluster_scoped() {
            "  namespaces:\n    clusterScoped: true\n"
        } else {
            "  namespaces:\n    names: [default]\n"
        };
        let owns_note = if self.owns.is_empty() {
            String::new()
        } else {
            let kinds: Vec<String> = self
                .owns
                .iter()
                .map(|g| format!("{} {}", g.api_version, g.kind))
                .collect();
            format!(
                "# It declares that it owns {} (their changes enqueue their owner), but the sample\n# writes none of them yet: grant those writes (a rule each) when the reconcile makes them.\n",
                kinds.join(", ")
            )
        };
        format!(
            "# The policy the operator gives {{{{name}}}}: exactly what the sample reconcile does, one\n# label on {{{{kind}}}} objects. Widen it as the plugin grows; kubeplug denies (and audits) the rest.\n{owns_note}apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata:\n  name: {{{{name}}}}\nspec:\n  mode: enforce\n{namespaces}  rules:\n    - apiVersion: {{{{api_version}}}}\n      kind: {{{{kind}}}}\n      verbs: [patch]\n      fields:\n        - /metadata/labels/{{{{label_path}}}}\n  limits:\n    writesPerSecond: 5\n    writeBurst: 10\n"
        )
    }

    fn readme(&self) -> String {
        let (lang, source, sdk) = match self.lang {
            Lang::Rust => ("Rust", "src/lib.rs", "kubeplug-sdk (crates.io)"),
            Lang::Ts => ("TypeScript", "plugin.ts", "kubeplug-sdk (npm)"),
            Lang::Py => ("Python", "app.py", "kubeplug-sdk (PyPI)"),
        };
        let sdk = match &self.sdk {
            Some(_) => "the SDK of the kubeplug checkout at {{sdk}}".to_string(),
            None => sdk.to_string(),
        };
        format!(
            "# {{{{name}}}}\n\nA kubeplug plugin in {lang} (contract {{{{contract}}}}, {sdk}). It reconciles\n`{{{{api_version}}}}` `{{{{kind}}}}` objects ({source}).\n\n- `make build` writes `{{{{name}}}}.wasm`.\n- `make test` builds it and runs `kubeplug test tests --plugin {{{{name}}}}.wasm --faults`: each\n  `tests/NAME.object.yaml` is reconciled and its actions compared with `NAME.expect.yaml`,\n  then run to a fixed point under faults (stale reads, a child not yet visible, the same\n  event twice, a crash between two writes).\n  Record a new expectation with\n  `kubeplug eval --plugin {{{{name}}}}.wasm --object tests/NAME.object.yaml --format yaml > tests/NAME.expect.yaml`.\n- Run it: copy `{{{{name}}}}.wasm` into the host's plugins folder and `policy.yaml` to\n  `{{{{name}}}}.policy.yaml` in its policies folder (`kubeplug run --plugins DIR --policies DIR`).\n"
        )
    }
}

/// The expectation of the unlabelled sample, identical in every language.
const EXPECT_PATCH: &str = "# What the plugin returns for sample.object.yaml (record it again with\n# `kubeplug eval --plugin {{name}}.wasm --object tests/sample.object.yaml --format yaml`).\nactions:\n- action: patch\n  target:\n    apiVersion: {{api_version}}\n    kind: {{kind}}{{target_namespace}}\n    name: sample\n  patchType: merge\n  body:\n    metadata:\n      labels:\n        {{label}}: {{name}}\n- action: log\n  level: info\n  message: labelled {{sample_key}}\n";

const RUST_CARGO: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
kubeplug-sdk = {{sdk_dependency}}
serde_json = "1"

# Its own workspace, even inside another project's folder.
[workspace]

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true
"#;

const RUST_LIB: &str = r#"//! {{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.
//!
//! The sample logic labels each object with `{{label}}: {{name}}` and leaves an object
//! that carries the label alone (so it never loops on its own write). Replace it with your
//! controller's, then tests/ and policy.yaml with what it does.

use kubeplug_sdk::{Action, Error, KindRef, Metadata, Reconciler, Request};
use serde_json::{Value, json};

const LABEL: &str = "{{label}}";
const NAME: &str = "{{name}}";

struct Plugin;

impl Reconciler for Plugin {
    fn metadata() -> Metadata {
        Metadata::new(NAME, env!("CARGO_PKG_VERSION"))
            .reconciles_kind(KindRef::new("{{api_version}}", "{{kind}}")){{owns}}
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let Some(object) = req.object::<Value>()? else {
            return Ok(vec![]); // deleted: nothing to undo
        };
        let labels = object.pointer("/metadata/labels");
        if labels.and_then(|l| l.get(LABEL)).and_then(Value::as_str) == Some(NAME) {
            return Ok(vec![]);
        }
        Ok(vec![
            Action::merge_patch(&req.target, json!({"metadata": {"labels": {LABEL: NAME}}})),
            Action::info(format!("labelled {}", req.key())),
        ])
    }
}

kubeplug_sdk::export!(Plugin);
"#;

const RUST_MAKEFILE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
KUBEPLUG ?= kubeplug
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: build test
build: {{name}}.wasm

{{name}}.wasm: Cargo.toml $(wildcard src/*.rs)
	rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
	$(CARGO) build --release --target wasm32-wasip2
	cp $(TARGET_DIR)/wasm32-wasip2/release/{{crate}}.wasm $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

const TS_PLUGIN: &str = r#"/**
 * {{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.
 *
 * The sample logic labels each object with `{{label}}: {{name}}` and leaves an object that
 * carries the label alone (so it never loops on its own write). Replace it with your
 * controller's, then tests/ and policy.yaml with what it does.
 */
import { type Action, type Reconciler, Request, actions, exportReconciler, kind, metadata } from "kubeplug-sdk";

const LABEL = "{{label}}";
const NAME = "{{name}}";

interface Labelled {
  metadata?: { labels?: { [key: string]: string } };
}

class Plugin implements Reconciler {
  metadata() {
    return metadata(NAME, "0.1.0", { reconciles: kind("{{api_version}}", "{{kind}}"), owns: [{{owns}}] });
  }

  reconcile(req: Request): Action[] {
    const object = req.object<Labelled>();
    if (object === undefined) return []; // deleted: nothing to undo
    if (object.metadata?.labels?.[LABEL] === NAME) return [];
    return [
      actions.mergePatch(req.target, { metadata: { labels: { [LABEL]: NAME } } }),
      actions.info(`labelled ${req.key()}`),
    ];
  }
}

export const reconciler = exportReconciler(new Plugin());
"#;

const TS_BUNDLE: &str = r#"// Options for the bundler `jco componentize` runs: the contract's imports come from the host.
export default {
  external: [/^kubeplug:plugin\//],{{alias}}
};
"#;

const TS_PACKAGE: &str = r#"{
  "name": "{{name}}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "dependencies": {
    "kubeplug-sdk": "^{{sdk_version}}"
  },
  "devDependencies": {
    "@bytecodealliance/componentize-js": "0.22.0",
    "@bytecodealliance/jco": "1.35.0"
  },
  "overrides": {
    "@bytecodealliance/preview2-shim": "0.25.0"
  }
}
"#;

/// With `--sdk`: the checkout's jco (its `make polyglot-toolchains` installs it) and WIT.
const TS_MAKEFILE_SDK: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
# The SDK, WIT files and jco come from the kubeplug checkout at SDK.
KUBEPLUG ?= kubeplug
SDK := {{sdk}}
JCO := $(SDK)/plugin-sdk/js/node_modules/.bin/jco
WIT := $(SDK)/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

$(JCO):
	$(MAKE) -C $(SDK) polyglot-toolchains

{{name}}.wasm: plugin.ts bundle.config.js $(JCO)
	$(JCO) componentize plugin.ts -w $(WIT) -n plugin -d http fetch-event --bundle-config bundle.config.js -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

/// Without `--sdk`: the SDK and jco from npm; the WIT files ship in the SDK's package.
const TS_MAKEFILE_PACKAGE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
KUBEPLUG ?= kubeplug
JCO := node_modules/.bin/jco
WIT := node_modules/kubeplug-sdk/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

node_modules/.installed: package.json
	npm install --no-audit --no-fund
	touch $@

{{name}}.wasm: plugin.ts bundle.config.js node_modules/.installed
	$(JCO) componentize plugin.ts -w $(WIT) -n plugin -d http fetch-event --bundle-config bundle.config.js -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

const PY_APP: &str = r#""""{{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.

The sample logic labels each object with ``{{label}}: {{name}}`` and leaves an object that
carries the label alone (so it never loops on its own write). Replace it with your
controller's, then tests/ and policy.yaml with what it does.
"""

import kubeplug
from kubeplug import actions

LABEL = "{{label}}"
NAME = "{{name}}"


class Plugin(kubeplug.Reconciler):
    def metadata(self):
        return kubeplug.Metadata(
            NAME, "0.1.0", reconciles=kubeplug.kind("{{api_version}}", "{{kind}}"), owns=[{{owns}}]
        )

    def reconcile(self, req):
        obj = req.object()
        if obj is None:
            return []  # deleted: nothing to undo
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL) == NAME:
            return []
        return [
            actions.merge_patch(req.target, {"metadata": {"labels": {LABEL: NAME}}}),
            actions.info(f"labelled {req.key()}"),
        ]


Reconciler = kubeplug.export(Plugin)
"#;

/// With `--sdk`: the checkout's componentize-py (its `make polyglot-toolchains` installs
/// it), SDK sources and WIT.
const PY_MAKEFILE_SDK: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
# The SDK, WIT files and componentize-py come from the kubeplug checkout at SDK.
KUBEPLUG ?= kubeplug
SDK := {{sdk}}
COMPONENTIZE_PY := $(SDK)/.tools/py-venv/bin/componentize-py
WIT := $(SDK)/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

$(COMPONENTIZE_PY):
	$(MAKE) -C $(SDK) polyglot-toolchains

{{name}}.wasm: app.py $(COMPONENTIZE_PY)
	$(COMPONENTIZE_PY) -d $(WIT) -w plugin componentize -p . -p $(SDK)/plugin-sdk/python app -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

/// Without `--sdk`: kubeplug-sdk and componentize-py from PyPI in a virtualenv; the WIT
/// files ship in the SDK's package.
const PY_MAKEFILE_PACKAGE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
KUBEPLUG ?= kubeplug
VENV := .venv
SITE = $(shell $(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

.PHONY: build test
build: {{name}}.wasm

$(VENV)/.installed:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet kubeplug-sdk==$(or $(KUBEPLUG_SDK_VERSION),{{sdk_version}}) componentize-py=={{componentize_py}}
	touch $@

{{name}}.wasm: app.py $(VENV)/.installed
	$(VENV)/bin/componentize-py -d $(SITE)/kubeplug/wit/v{{contract}} -w plugin componentize -p . -p $(SITE) app -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Action, ObjectRef, PatchType, Scope};
    use crate::policy::{Grants, PolicyDocument};
    use serde_json::{Value, json};

    fn project(lang: Lang, reconciles: &str, owns: &[&str]) -> Project {
        Project {
            name: "my-plugin".into(),
            lang,
            reconciles: Gvk::parse(reconciles, "--reconciles").unwrap(),
            owns: owns
                .iter()
                .map(|o| Gvk::parse(o, "--owns").unwrap())
                .collect(),
            sdk: None,
        }
    }

    fn file<'a>(files: &'a [(String, String)], name: &str) -> &'a str {
        &files.iter().find(|(p, _)| p == name).unwrap().1
    }

    #[test]
    fn kinds_parse_with_and_without_a_group() {
        let g = Gvk::parse("apps/v1/Deployment", "--reconciles").unwrap();
        assert_eq!(
            (g.api_version.as_str(), g.kind.as_str()),
            ("apps/v1", "Deployment")
        );
        assert_eq!(Gvk::parse("v1/ConfigMap", "x").unwrap().api_version, "v1");
        assert_eq!(
            Gvk::parse("core/v1/ConfigMap", "x").unwrap().api_version,
            "v1"
        );
        for (bad, why) in [
            ("Deployment", "is not GROUP/VERSION/KIND"),
            ("a/b/c/d", "is not GROUP/VERSION/KIND"),
            ("apps/v1/deployment", "is not a CamelCase name"),
            ("apps/1/Deployment", "is not like v1"),
            ("Apps_x/v1/Foo", "is not a DNS subdomain"),
        ] {
            let err = Gvk::parse(bad, "--owns").unwrap_err().to_string();
            assert!(err.starts_with(&format!("--owns {bad:?}")), "{err}");
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    /// The policy grants the sample's patch and nothing wider: not another label, not
    /// another kind, not another namespace.
    #[test]
    fn the_policy_grants_exactly_the_sample_patch() {
        for (reconciles, namespace) in [
            ("apps/v1/Deployment", Some("default")),
            ("example.com/v1/Widget", Some("default")),
            ("v1/Namespace", None),
        ] {
            let p = project(Lang::Rust, reconciles, &["v1/ConfigMap"]);
            let files = p.files();
            let doc = PolicyDocument::parse(file(&files, "policy.yaml"), Path::new("policy.yaml"))
                .unwrap();
            assert_eq!(doc.metadata.name, "my-plugin");
            let grants = Grants::from_spec(&doc.spec.grants).unwrap();
            let target = ObjectRef {
                api_version: p.reconciles.api_version.clone(),
                kind: p.reconciles.kind.clone(),
                namespace: namespace.map(str::to_string),
                name: "sample".into(),
            };
            let scope = if namespace.is_some() {
                Scope::Namespaced
            } else {
                Scope::Cluster
            };
            let patch = |target: &ObjectRef, body: Value| Action::Patch {
                target: target.clone(),
                patch_type: PatchType::Merge,
                subresource: None,
                body,
            };
            let expected = sample_label();
            grants
                .check(&patch(&target, expected.clone()), scope)
                .unwrap_or_else(|d| panic!("{reconciles}: {d:?}"));
            let other_label = json!({"metadata": {"labels": {"team": "x"}}});
            assert!(grants.check(&patch(&target, other_label), scope).is_err());
            let mut other_kind = target.clone();
            other_kind.kind = "Other".into();
            assert!(
                grants
                    .check(&patch(&other_kind, expected.clone()), scope)
                    .is_err()
            );
            if namespace.is_some() {
                let mut elsewhere = target.clone();
                elsewhere.namespace = Some("kube-system".into());
                assert!(grants.check(&patch(&elsewhere, expected), scope).is_err());
            }
            assert!(file(&files, "policy.yaml").contains("owns v1 ConfigMap"));
        }
    }

    fn sample_label() -> Value {
        json!({"metadata": {"labels": {LABEL: "my-plugin"}}})
    }

    #[test]
    fn the_expectation_and_fixtures_are_what_eval_reads() {
        for lang in [Lang::Rust, Lang::Ts, Lang::Py] {
            for reconciles in ["apps/v1/Deployment", "v1/Namespace"] {
                let files = project(lang, reconciles, &[]).files();
                let expectation = crate::cli::golden::Expectation::parse(file(
                    &files,
                    "tests/sample.expect.yaml",
                ))
                .unwrap();
                assert_eq!(expectation.action_count(), 2);
                for object in ["tests/sample.object.yaml", "tests/labelled.object.yaml"] {
                    let docs =
                        crate::manifest::parse_documents(file(&files, object), object).unwrap();
                    assert_eq!(docs.len(), 1);
                    assert_eq!(
                        docs[0]["metadata"].get("namespace").is_some(),
                        reconciles.starts_with("apps"),
                        "{object}"
                    );
                }
            }
        }
    }

    #[test]
    fn owned_kinds_reach_the_metadata_of_each_language() {
        let owns = ["v1/ConfigMap", "apps/v1/Deployment"];
        let rust = project(Lang::Rust, "example.com/v1/Widget", &owns).files();
        assert!(file(&rust, "src/lib.rs").contains(
            ".owns_kind(KindRef::new(\"v1\", \"ConfigMap\"))\n            .owns_kind(KindRef::new(\"apps/v1\", \"Deployment\"))"
        ));
        assert!(file(&rust, "src/lib.rs").contains("KindRef::new(\"example.com/v1\", \"Widget\")"));
        let ts = project(Lang::Ts, "example.com/v1/Widget", &owns).files();
        assert!(
            file(&ts, "plugin.ts")
                .contains("owns: [kind(\"v1\", \"ConfigMap\"), kind(\"apps/v1\", \"Deployment\")]")
        );
        let py = project(Lang::Py, "example.com/v1/Widget", &owns).files();
        assert!(file(&py, "app.py").contains(
            "owns=[kubeplug.kind(\"v1\", \"ConfigMap\"), kubeplug.kind(\"apps/v1\", \"Deployment\")]"
        ));
        let none = project(Lang::Ts, "example.com/v1/Widget", &[]).files();
        assert!(file(&none, "plugin.ts").contains("owns: []"));
        assert!(!file(&none, "policy.yaml").contains("owns"));
    }

    #[test]
    fn no_placeholder_is_left_unfilled() {
        for lang in [Lang::Rust, Lang::Ts, Lang::Py] {
            for sdk in [None, Some(PathBuf::from("/opt/kubeplug"))] {
                let mut p = project(lang, "apps/v1/Deployment", &["v1/Pod"]);
                p.sdk = sdk.clone();
                for (path, text) in p.files() {
                    if path == "Cargo.lock" {
                        continue;
                    }
                    assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
                    if sdk.is_some() && path == "Makefile" && lang != Lang::Rust {
                        assert!(text.contains("/opt/kubeplug"), "{path}: {text}");
                    }
                }
            }
        }
    }
}
