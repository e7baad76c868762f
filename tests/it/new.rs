//! `kubeplug new`: a project in each language made against this checkout's SDKs (`--sdk`)
//! and built: the Rust one runs its `make test` (its golden tests through `kubeplug test`);
//! the TypeScript and Python ones `make build` only, since the same sources, made without
//! `--sdk`, pass their `make test` against the packed SDKs in tests/it/sdk_packages.rs, and
//! loading a runtime-sized component the first time is what costs (15 to 25 s each).
//!
//! Cost (2 cores, measured alone with warm caches): the Rust project 1.7 s (about 70 s when
//! target/scaffolds is cold: kubeplug-sdk and its dependencies for wasm32-wasip2, shared with
//! sdk_packages and kept between runs); the TypeScript build 10 s (jco), the Python one 13 s
//! (componentize-py).

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

/// Scaffolds `name` in `lang` with `extra` flags, runs its `make GOAL` (`test`, or `build`),
/// returns its folder.
fn scaffold_and_make(name: &str, lang: &str, extra: &[&str], goal: &str) -> tempfile::TempDir {
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
    let out = Command::new("make")
        .arg(goal)
        .arg(format!("KUBEPLUG={}", kubeplug()))
        .current_dir(&dir)
        .env("KUBEPLUG_CACHE_DIR", crate::common::compile_cache())
        .env("CARGO_TARGET_DIR", sdk.join("target/scaffolds"))
        .env_remove("MAKEFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        .output()
        .expect("run make (is it installed?)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "make {goal} in {lang} failed:\n{text}"
    );
    if goal == "test" {
        assert!(text.contains("ok   sample"), "{text}");
        assert!(text.contains("2 passed, 0 failed"), "{text}");
        // `make test` runs `kubeplug test --faults`: the scaffold converges under each fault.
        assert!(text.contains("ok   sample  same event twice ("), "{text}");
        assert!(text.contains("; faults: 8 ok, 0 failed"), "{text}");
    }
    let wasm = std::fs::read(dir.join(format!("{name}.wasm"))).unwrap();
    // A component (layer 1), not a core module.
    assert_eq!(wasm.get(..8), Some(&b"\0asm\x0d\0\x01\0"[..]));
    parent
}

#[test]
fn a_rust_project_builds_and_passes_its_tests() {
    let parent = scaffold_and_make("rusty", "rust", &[], "test");
    let lib = std::fs::read_to_string(parent.path().join("rusty/src/lib.rs")).unwrap();
    assert!(
        lib.contains("KindRef::new(\"apps/v1\", \"Deployment\")"),
        "{lib}"
    );
}

#[test]
fn a_typescript_project_for_another_kind_builds() {
    let parent = scaffold_and_make(
        "tsplug",
        "ts",
        &[
            "--reconciles",
            "v1/ConfigMap",
            "--owns",
            "apps/v1/Deployment",
        ],
        "build",
    );
    let bundle = std::fs::read_to_string(parent.path().join("tsplug/bundle.config.js")).unwrap();
    assert!(bundle.contains("plugin-sdk/js/src/index.ts"), "{bundle}");
}

#[test]
fn a_python_project_for_a_cluster_scoped_kind_builds() {
    let parent = scaffold_and_make("pyplug", "py", &["--reconciles", "v1/Namespace"], "build");
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
