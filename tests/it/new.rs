//! `kubeplug new`: a project in each language, made against this checkout's SDKs (`--sdk`),
//! built, and its `make test` (its golden tests through `kubeplug test`) run.
//!
//! Cost: the TypeScript and Python builds take about 30 s each (jco, componentize-py); the
//! Rust one about 70 s cold (kubeplug-sdk and its dependencies for wasm32-wasip2, in
//! target/scaffolds, kept between runs), seconds warm.

use crate::common::plugin;
use std::path::{Path, PathBuf};
use std::process::Command;

fn kubeplug() -> &'static str {
    env!("CARGO_BIN_EXE_kubeplug")
}

/// The root of this checkout.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn new(args: &[&str], cwd: &Path) -> (bool, String) {
    let out = Command::new(kubeplug())
        .arg("new")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run kubeplug new");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Scaffolds `name` in `lang` with `extra` flags, runs its `make test`, returns its folder.
fn scaffold_and_test(name: &str, lang: &str, extra: &[&str]) -> tempfile::TempDir {
    // `make plugins` has installed the toolchains the --sdk projects use: fail, not skip,
    // when it has not run.
    plugin("image-pinner");
    let parent = tempfile::tempdir().unwrap();
    let sdk = checkout();
    let mut args = vec![name, "--lang", lang, "--sdk", sdk.to_str().unwrap()];
    args.extend(extra);
    let (ok, text) = new(&args, parent.path());
    assert!(ok, "{text}");
    assert!(text.contains(&format!("created {name}")), "{text}");
    let dir = parent.path().join(name);
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .arg("test")
        .arg(format!("KUBEPLUG={}", kubeplug()))
        .current_dir(&dir)
        .env("KUBEPLUG_CACHE_DIR", cache.path())
        .env("CARGO_TARGET_DIR", sdk.join("target/scaffolds"))
        .env_remove("MAKEFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        .output()
        .expect("run make (is it installed?)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "make test in {lang} failed:\n{text}");
    assert!(text.contains("ok   sample"), "{text}");
    assert!(text.contains("2 passed, 0 failed"), "{text}");
    assert!(dir.join(format!("{name}.wasm")).exists());
    parent
}

#[test]
fn a_rust_project_builds_and_passes_its_tests() {
    let parent = scaffold_and_test("rusty", "rust", &[]);
    let lib = std::fs::read_to_string(parent.path().join("rusty/src/lib.rs")).unwrap();
    assert!(
        lib.contains("KindRef::new(\"apps/v1\", \"Deployment\")"),
        "{lib}"
    );
}

#[test]
fn a_typescript_project_for_another_kind_builds_and_passes_its_tests() {
    let parent = scaffold_and_test(
        "tsplug",
        "ts",
        &[
            "--reconciles",
            "v1/ConfigMap",
            "--owns",
            "apps/v1/Deployment",
        ],
    );
    // The plugin declares what it was scaffolded for.
    let wasm = parent.path().join("tsplug/tsplug.wasm");
    let out = Command::new(kubeplug())
        .args(["eval", "--plugin", wasm.to_str().unwrap(), "--object"])
        .arg(parent.path().join("tsplug/tests/sample.object.yaml"))
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["target"]["kind"], "ConfigMap");
}

#[test]
fn a_python_project_for_a_cluster_scoped_kind_builds_and_passes_its_tests() {
    let parent = scaffold_and_test("pyplug", "py", &["--reconciles", "v1/Namespace"]);
    let policy = std::fs::read_to_string(parent.path().join("pyplug/policy.yaml")).unwrap();
    assert!(policy.contains("clusterScoped: true"), "{policy}");
}

#[test]
fn bad_input_is_refused_naming_what_and_where() {
    let parent = tempfile::tempdir().unwrap();
    let (ok, text) = new(&["My_Plugin", "--lang", "rust"], parent.path());
    assert!(
        !ok && text.contains("NAME: \"My_Plugin\" contains"),
        "{text}"
    );
    let (ok, text) = new(
        &["p", "--lang", "ts", "--reconciles", "Deployment"],
        parent.path(),
    );
    assert!(
        !ok && text.contains("--reconciles \"Deployment\" is not GROUP/VERSION/KIND"),
        "{text}"
    );
    let (ok, text) = new(
        &["p", "--lang", "py", "--sdk", "/nonexistent"],
        parent.path(),
    );
    assert!(
        !ok && text.contains("--sdk /nonexistent: cannot read this folder"),
        "{text}"
    );
    let (ok, text) = new(&["p", "--lang", "py", "--sdk", "/tmp"], parent.path());
    assert!(
        !ok && text.contains("not the root of a kubeplug checkout"),
        "{text}"
    );
    let (ok, text) = new(&["p", "--lang", "go"], parent.path());
    assert!(!ok && text.contains("invalid value 'go'"), "{text}");
    std::fs::create_dir(parent.path().join("taken")).unwrap();
    std::fs::write(parent.path().join("taken/x"), "").unwrap();
    let (ok, text) = new(&["taken", "--lang", "rust"], parent.path());
    assert!(
        !ok && text.contains("taken already exists and is not empty"),
        "{text}"
    );
    // Nothing was left behind by the refused commands.
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
}
