//! The SDKs as packages (issue 29, item 4): their versions follow the contract, the Rust
//! crate passes `cargo package` and the Python SDK builds a wheel, each carrying the WIT
//! files, and a `kubeplug new` project builds and passes its tests against each packed
//! artifact instead of the checkout's sources. Nothing is published.
//!
//! Cost: `cargo package --no-verify` a few seconds; the Rust scaffold against the unpacked
//! crate about 70 s cold (target/scaffolds), the wheel about 5 s (pip fetches setuptools and
//! wheel from PyPI for its isolated build) and the Python scaffold about 25 s.

use crate::common::plugin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(checkout().join(path)).unwrap()
}

/// The first `"..."` value after `key` in `text`.
fn quoted_after(text: &str, key: &str) -> String {
    let rest = &text[text.find(key).unwrap_or_else(|| panic!("no {key}")) + key.len()..];
    let start = rest.find('"').unwrap() + 1;
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].to_string()
}

fn major_minor(version: &str) -> &str {
    let second_dot = version
        .match_indices('.')
        .nth(1)
        .map_or(version.len(), |(i, _)| i);
    &version[..second_dot]
}

fn ok(out: Output, what: &str) -> String {
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn each_sdk_version_follows_the_contract_it_implements() {
    let wit = read("wit/v0.1.0/plugin.wit");
    let contract = wit_package(&wit);
    let rust = read("plugin-sdk/Cargo.toml");
    let py = read("plugin-sdk/python/pyproject.toml");
    let claims = [
        (
            "plugin-sdk/Cargo.toml [package.metadata.kubeplug]",
            quoted_after(&rust, "contract ="),
        ),
        (
            "plugin-sdk/src/lib.rs",
            quoted_after(&read("plugin-sdk/src/lib.rs"), "CONTRACT_VERSION: &str ="),
        ),
        (
            "pyproject.toml [tool.kubeplug]",
            quoted_after(&py, "contract ="),
        ),
        (
            "kubeplug/__init__.py",
            quoted_after(
                &read("plugin-sdk/python/kubeplug/__init__.py"),
                "CONTRACT_VERSION =",
            ),
        ),
        (
            "plugin-sdk/js/src/index.ts",
            quoted_after(&read("plugin-sdk/js/src/index.ts"), "CONTRACT_VERSION ="),
        ),
    ];
    for (file, claimed) in claims {
        assert_eq!(
            claimed, contract,
            "{file} names contract {claimed}, the WIT is {contract}"
        );
    }
    // The workspace version is the Rust SDK's (version.workspace = true).
    let workspace = read("Cargo.toml");
    let rust_version = quoted_after(
        &workspace[workspace.find("[workspace.package]").unwrap()..],
        "version =",
    );
    let py_version = quoted_after(&py, "version =");
    for (what, version) in [
        ("kubeplug-sdk (crate)", rust_version),
        ("kubeplug-sdk (wheel)", py_version),
    ] {
        assert_eq!(
            major_minor(&version),
            major_minor(&contract),
            "{what} {version} for contract {contract}"
        );
    }
}

/// `package kubeplug:plugin@X.Y.Z;` of a WIT file: X.Y.Z.
fn wit_package(wit: &str) -> String {
    let line = wit
        .lines()
        .find(|l| l.starts_with("package kubeplug:plugin@"))
        .unwrap();
    line.trim_start_matches("package kubeplug:plugin@")
        .trim_end_matches(';')
        .to_string()
}

/// A `kubeplug new` project in `lang` made against this checkout, in a temporary folder.
fn scaffold(name: &str, lang: &str) -> tempfile::TempDir {
    plugin("image-pinner"); // make plugins has run: the toolchains are there
    let parent = tempfile::tempdir().unwrap();
    ok(
        Command::new(env!("CARGO_BIN_EXE_kubeplug"))
            .args(["new", name, "--lang", lang, "--sdk"])
            .arg(checkout())
            .current_dir(parent.path())
            .output()
            .unwrap(),
        "kubeplug new",
    );
    parent
}

fn kubeplug_test(dir: &Path, wasm: &str) -> String {
    let cache = tempfile::tempdir().unwrap();
    ok(
        Command::new(env!("CARGO_BIN_EXE_kubeplug"))
            .args(["test", "tests", "--plugin", wasm])
            .current_dir(dir)
            .env("KUBEPLUG_CACHE_DIR", cache.path())
            .output()
            .unwrap(),
        "kubeplug test",
    )
}

#[test]
fn the_rust_crate_packages_with_its_contract_and_a_project_builds_against_it() {
    let root = checkout();
    let target = root.join("target/sdk-package");
    ok(
        Command::new(env!("CARGO"))
            .args([
                "package",
                "-p",
                "kubeplug-sdk",
                "--no-verify",
                "--allow-dirty",
            ])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap(),
        "cargo package",
    );
    let version = env!("CARGO_PKG_VERSION");
    let crate_file = target.join(format!("package/kubeplug-sdk-{version}.crate"));
    let unpacked = tempfile::tempdir().unwrap();
    ok(
        Command::new("tar")
            .arg("xzf")
            .arg(&crate_file)
            .arg("-C")
            .arg(unpacked.path())
            .output()
            .unwrap(),
        "tar",
    );
    let sdk = unpacked.path().join(format!("kubeplug-sdk-{version}"));
    for file in ["README.md", "wit/v0.1.0/plugin.wit", "src/lib.rs"] {
        assert!(sdk.join(file).is_file(), "the crate lacks {file}");
    }
    for absent in ["js", "python"] {
        assert!(!sdk.join(absent).exists(), "the crate holds {absent}/");
    }
    let manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"Apache-2.0\""), "{manifest}");

    // A project whose kubeplug-sdk is the packed crate, not the checkout's folder.
    let parent = scaffold("packed-rust", "rust");
    let dir = parent.path().join("packed-rust");
    let cargo_toml = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&cargo_toml).unwrap();
    let from_checkout = format!("{{ path = \"{}/plugin-sdk\" }}", root.display());
    assert!(text.contains(&from_checkout), "{text}");
    let text = text.replace(
        &from_checkout,
        &format!("{{ path = \"{}\" }}", sdk.display()),
    );
    std::fs::write(&cargo_toml, text).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = ok(
        Command::new("make")
            .arg("test")
            .arg(format!("KUBEPLUG={}", env!("CARGO_BIN_EXE_kubeplug")))
            .current_dir(&dir)
            .env("KUBEPLUG_CACHE_DIR", cache.path())
            .env("CARGO_TARGET_DIR", root.join("target/scaffolds"))
            .env_remove("MAKEFLAGS")
            .env_remove("CARGO_MAKEFLAGS")
            .output()
            .unwrap(),
        "make test against the packed crate",
    );
    assert!(out.contains("2 passed, 0 failed"), "{out}");
}

#[test]
fn the_python_sdk_builds_a_wheel_and_a_project_builds_against_it() {
    let root = checkout();
    let pip = root.join(".tools/py-venv/bin/pip");
    plugin("image-pinner"); // make plugins installed the venv
    // Build from a copy (symlinks followed: kubeplug/wit is one), leaving the checkout clean.
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    ok(
        Command::new("cp")
            .arg("-rL")
            .arg(root.join("plugin-sdk/python"))
            .arg(&src)
            .output()
            .unwrap(),
        "cp",
    );
    let dist = work.path().join("dist");
    ok(
        Command::new(&pip)
            .args([
                "wheel",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "-w",
            ])
            .arg(&dist)
            .arg(&src)
            .output()
            .unwrap(),
        "pip wheel",
    );
    let wheel = dist.join("kubeplug_sdk-0.1.0-py3-none-any.whl");
    assert!(
        wheel.is_file(),
        "{:?}",
        std::fs::read_dir(&dist).unwrap().collect::<Vec<_>>()
    );
    // Installed (unzipped) where componentize-py reads it, WIT files included.
    let site = work.path().join("site");
    ok(
        Command::new(&pip)
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-index",
                "--target",
            ])
            .arg(&site)
            .arg(&wheel)
            .output()
            .unwrap(),
        "pip install",
    );
    let wit = site.join("kubeplug/wit/v0.1.0");
    assert!(wit.join("plugin.wit").is_file());
    let metadata = std::fs::read_dir(&site)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
        .map(|e| std::fs::read_to_string(e.path().join("METADATA")).unwrap())
        .unwrap();
    assert!(
        metadata.contains("Version: 0.1.0") && metadata.contains("License: Apache-2.0"),
        "{metadata}"
    );

    let parent = scaffold("packed-py", "py");
    let dir = parent.path().join("packed-py");
    ok(
        Command::new(root.join(".tools/py-venv/bin/componentize-py"))
            .arg("-d")
            .arg(&wit)
            .args(["-w", "plugin", "componentize", "-p", ".", "-p"])
            .arg(&site)
            .args(["app", "-o", "packed-py.wasm"])
            .current_dir(&dir)
            .output()
            .unwrap(),
        "componentize-py against the wheel",
    );
    let out = kubeplug_test(&dir, "packed-py.wasm");
    assert!(out.contains("2 passed, 0 failed"), "{out}");
}
