//! The Rust scaffold: a `cdylib` crate on kubeplug-sdk built for wasm32-wasip2 (from
//! crates.io, or the checkout's `plugin-sdk` with `--sdk`).

use super::SDK_VERSION;
use super::project::Project;

/// The Rust project's own files: its crate, its Makefile and, with `--sdk`, the
/// checkout's Cargo.lock; `owns` are the owned kinds as a kind constructor's arguments.
pub(super) fn files(project: &Project, owns: &[String]) -> Vec<(String, String)> {
    let owns_calls: String = owns
        .iter()
        .map(|k| format!("\n            .owns_kind(KindRef::new({k}))"))
        .collect();
    let dependency = match project.sdk_str() {
        Some(sdk) => format!("{{ path = \"{sdk}/plugin-sdk\" }}"),
        None => format!("\"{SDK_VERSION}\""),
    };
    let mut files = vec![
        (
            "Cargo.toml".into(),
            project
                .fill(CARGO_TOML)
                .replace("{{sdk_dependency}}", &dependency),
        ),
        (
            "src/lib.rs".into(),
            project.fill(LIB_RS).replace("{{owns}}", &owns_calls),
        ),
        ("Makefile".into(), project.fill(MAKEFILE)),
        (".gitignore".into(), "/target\n/*.wasm\n".into()),
    ];
    if let Some(sdk) = &project.sdk
        && let Ok(lock) = std::fs::read_to_string(sdk.join("Cargo.lock"))
    {
        files.push(("Cargo.lock".into(), lock));
    }
    files
}

/// Cargo.toml: its own workspace, a small release build.
const CARGO_TOML: &str = r#"[package]
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

/// src/lib.rs: the sample reconcile.
const LIB_RS: &str = r#"//! {{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.
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

/// The Makefile: `make build`, `make test`.
const MAKEFILE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
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
