//! The SDKs as packages (issue 29, item 4): their versions follow the contract; the Rust
//! crate passes `cargo package`, the TypeScript SDK `npm pack` and the Python SDK builds a
//! wheel, each carrying the WIT files; a `kubeplug new` project made without `--sdk` (so
//! naming the packages as a user outside this repository gets them) builds and passes its
//! tests against each packed artifact, the test adding only the override a registry would
//! make unnecessary (a `[patch.crates-io]`, the tarball in `node_modules`, the wheel in the
//! virtualenv). Nothing is published. And the TypeScript and Python SDKs' own unit tests.
//!
//! Cost (2 cores, measured alone with warm caches on a loaded machine): the Rust crate and its
//! scaffold 3 s (about 70 s when target/scaffolds is cold; shared with tests/it/new.rs); the
//! TypeScript package and scaffold 30 s (npm pack 3 s with tsc, jco 10 s, the component's
//! first load by kubeplug test the rest); the wheel and the Python scaffold 37 s
//! (componentize-py and the first load; pip fetches setuptools and wheel from PyPI for the
//! isolated build); the unit tests 1.7 s (TypeScript, tsc included) and 0.1 s (Python).
//! Toolchains (jco, componentize-py) are the checkout's, installed by `make plugins`, not
//! downloaded again.

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
    let npm: serde_json::Value = serde_json::from_str(&read("plugin-sdk/js/package.json")).unwrap();
    assert_eq!(
        npm["kubeplug"]["contract"], contract,
        "plugin-sdk/js/package.json kubeplug.contract"
    );
    let npm_version = npm["version"].as_str().unwrap().to_string();
    for (what, version) in [
        ("kubeplug-sdk (crate)", rust_version),
        ("kubeplug-sdk (wheel)", py_version),
        ("kubeplug-sdk (npm)", npm_version),
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

/// A `kubeplug new` project in `lang` made without `--sdk` (as outside this repository), in a
/// temporary folder; `extra` flags added.
fn scaffold(name: &str, lang: &str, extra: &[&str]) -> tempfile::TempDir {
    plugin("image-pinner"); // make plugins has run: the toolchains are there
    let parent = tempfile::tempdir().unwrap();
    let said = ok(
        Command::new(env!("CARGO_BIN_EXE_kubeplug"))
            .args(["new", name, "--lang", lang])
            .args(extra)
            .current_dir(parent.path())
            .output()
            .unwrap(),
        "kubeplug new",
    );
    assert!(
        said.contains("has not published yet"),
        "without --sdk, new warns that the package names are not ours yet: {said}"
    );
    parent
}

/// `make test` in a scaffolded project, `vars` given on make's command line; a fresh compile
/// cache at `cache`. Returns the output, checked to report both cases passing.
fn make_test(dir: &Path, cache: &Path, vars: &[String]) -> String {
    let out = ok(
        Command::new("make")
            .arg("test")
            .arg(format!("KUBEPLUG={}", env!("CARGO_BIN_EXE_kubeplug")))
            .args(vars)
            .current_dir(dir)
            .env("KUBEPLUG_CACHE_DIR", cache)
            .env("CARGO_TARGET_DIR", checkout().join("target/scaffolds"))
            .env_remove("MAKEFLAGS")
            .env_remove("CARGO_MAKEFLAGS")
            .output()
            .unwrap(),
        "make test",
    );
    assert!(out.contains("2 passed, 0 failed"), "{out}");
    assert!(out.contains("; faults: 8 ok, 0 failed"), "{out}");
    out
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

    // The project names the crate as crates.io would serve it; the test points crates.io's
    // kubeplug-sdk at the packed crate, and starts from the checkout's Cargo.lock (the
    // dependency versions this repository builds with).
    let parent = scaffold("packed-rust", "rust", &[]);
    let dir = parent.path().join("packed-rust");
    let cargo_toml = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&cargo_toml).unwrap();
    assert!(
        text.contains(&format!("kubeplug-sdk = \"{version}\"")),
        "{text}"
    );
    assert!(!dir.join("Cargo.lock").exists());
    std::fs::write(
        &cargo_toml,
        format!(
            "{text}\n[patch.crates-io]\nkubeplug-sdk = {{ path = \"{}\" }}\n",
            sdk.display()
        ),
    )
    .unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    make_test(&dir, cache.path(), &[]);
    // Built from the packed crate: the lock names it without a registry source.
    let lock = std::fs::read_to_string(dir.join("Cargo.lock")).unwrap();
    let entry = &lock[lock.find("name = \"kubeplug-sdk\"").unwrap()..];
    let entry = &entry[..entry.find("\n\n").unwrap_or(entry.len())];
    assert!(!entry.contains("source ="), "{entry}");
}

#[test]
fn the_typescript_sdk_packs_with_its_types_and_a_project_builds_against_it() {
    let root = checkout();
    let js = root.join("plugin-sdk/js");
    plugin("image-pinner"); // make plugins ran npm ci: tsc and jco are in node_modules
    let work = tempfile::tempdir().unwrap();
    // npm pack runs the package's prepack (node build.mjs: dist/ and wit/, both ignored).
    ok(
        Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(work.path())
            .current_dir(&js)
            .output()
            .unwrap(),
        "npm pack",
    );
    let tarball = work.path().join("kubeplug-sdk-0.1.0.tgz");
    let listing = ok(
        Command::new("tar")
            .arg("tzf")
            .arg(&tarball)
            .output()
            .unwrap(),
        "tar",
    );
    let files: Vec<&str> = listing.lines().collect();
    for file in [
        "package/package.json",
        "package/README.md",
        "package/dist/index.js",
        "package/dist/index.d.ts",
        "package/dist/conditions.d.ts",
        "package/generated/interfaces/kubeplug-plugin-types.d.ts",
        "package/wit/v0.1.0/plugin.wit",
    ] {
        assert!(files.contains(&file), "the package lacks {file}: {files:?}");
    }
    for file in &files {
        assert!(
            !file.starts_with("package/src/")
                && !file.starts_with("package/test/")
                && !file.contains("node_modules"),
            "the package holds {file}"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&read("plugin-sdk/js/package.json")).unwrap();
    assert_eq!(manifest["license"], "Apache-2.0");
    assert_eq!(manifest["exports"]["."]["types"], "./dist/index.d.ts");
    assert!(
        manifest.get("private").is_none(),
        "a private package cannot be published"
    );

    // A project for another kind, naming kubeplug-sdk as npm would serve it. npm installs the
    // tarball (in a scratch folder: in the project it would also fetch the toolchain, which
    // the test takes from the checkout instead); make's JCO is the checkout's jco.
    let parent = scaffold(
        "packed-ts",
        "ts",
        &[
            "--reconciles",
            "v1/ConfigMap",
            "--owns",
            "apps/v1/Deployment",
        ],
    );
    let dir = parent.path().join("packed-ts");
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("package.json")).unwrap()).unwrap();
    assert_eq!(package["dependencies"]["kubeplug-sdk"], "^0.1.0");
    let scratch = work.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::write(scratch.join("package.json"), "{\"private\": true}\n").unwrap();
    ok(
        Command::new("npm")
            .args([
                "install",
                "--no-save",
                "--no-package-lock",
                "--no-audit",
                "--no-fund",
                "--offline",
            ])
            .arg(&tarball)
            .current_dir(&scratch)
            .output()
            .unwrap(),
        "npm install of the tarball",
    );
    std::fs::rename(scratch.join("node_modules"), dir.join("node_modules")).unwrap();
    std::fs::write(dir.join("node_modules/.installed"), "").unwrap();
    // The declarations type-check the project as a user's editor or tsc would see them.
    std::fs::write(
        dir.join("tsconfig.json"),
        r#"{"compilerOptions": {"strict": true, "noEmit": true, "target": "ES2022", "lib": ["ES2022"],
  "module": "ESNext", "moduleResolution": "Bundler", "types": []}, "files": ["plugin.ts"]}"#,
    )
    .unwrap();
    ok(
        Command::new(js.join("node_modules/.bin/tsc"))
            .args(["-p", "."])
            .current_dir(&dir)
            .output()
            .unwrap(),
        "tsc against the package's declarations",
    );
    let cache = tempfile::tempdir().unwrap();
    let jco = js.join("node_modules/.bin/jco");
    make_test(&dir, cache.path(), &[format!("JCO={}", jco.display())]);
    // The plugin declares what it was scaffolded for.
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(["eval", "--plugin", "packed-ts.wasm", "--object"])
        .arg("tests/sample.object.yaml")
        .current_dir(&dir)
        .env("KUBEPLUG_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["target"]["kind"], "ConfigMap");
}

#[test]
fn the_python_sdk_builds_a_wheel_and_a_project_builds_against_it() {
    let root = checkout();
    let venv = root.join(".tools/py-venv");
    let pip = venv.join("bin/pip");
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

    // A project naming kubeplug-sdk as PyPI would serve it. Its Makefile's virtualenv is
    // made by the test: the wheel installed by pip from the file, componentize-py the
    // checkout's (what `pip install componentize-py` would put there).
    // For a cluster-scoped kind: the sample and its expectation have no namespace.
    let parent = scaffold("packed-py", "py", &["--reconciles", "v1/Namespace"]);
    let dir = parent.path().join("packed-py");
    let policy = std::fs::read_to_string(dir.join("policy.yaml")).unwrap();
    assert!(policy.contains("clusterScoped: true"), "{policy}");
    let makefile = std::fs::read_to_string(dir.join("Makefile")).unwrap();
    assert!(
        makefile.contains("kubeplug-sdk==$(or $(KUBEPLUG_SDK_VERSION),0.1.0)"),
        "{makefile}"
    );
    let dot_venv = dir.join(".venv");
    ok(
        Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&dot_venv)
            .output()
            .unwrap(),
        "python3 -m venv",
    );
    let site = ok(
        Command::new(dot_venv.join("bin/python"))
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .unwrap(),
        "python",
    );
    let site = PathBuf::from(site.trim());
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
        "pip install of the wheel",
    );
    assert!(site.join("kubeplug/wit/v0.1.0/plugin.wit").is_file());
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
    std::os::unix::fs::symlink(
        venv.join("bin/componentize-py"),
        dot_venv.join("bin/componentize-py"),
    )
    .unwrap();
    std::fs::write(dot_venv.join(".installed"), "").unwrap();
    let cache = tempfile::tempdir().unwrap();
    make_test(&dir, cache.path(), &[]);
}

/// The TypeScript SDK's unit tests (plugin-sdk/js/test: conditions and finalizers), compiled
/// by tsc into a temporary folder and run by node's test runner.
#[test]
fn the_typescript_sdk_unit_tests_pass() {
    plugin("image-pinner"); // make plugins ran npm ci: tsc is in node_modules
    let out = ok(
        Command::new("node")
            .args(["build.mjs", "--test"])
            .current_dir(checkout().join("plugin-sdk/js"))
            .output()
            .unwrap(),
        "node build.mjs --test",
    );
    assert!(
        out.contains("# fail 0") && !out.contains("# pass 0"),
        "{out}"
    );
}

/// The Python SDK's unit tests (plugin-sdk/python/tests: conditions and finalizers), against
/// the bindings componentize-py generates, outside any wasm runtime.
#[test]
fn the_python_sdk_unit_tests_pass() {
    plugin("image-pinner"); // make plugins installed the venv
    let root = checkout();
    let venv = root.join(".tools/py-venv/bin");
    let bindings = tempfile::tempdir().unwrap();
    ok(
        Command::new(venv.join("componentize-py"))
            .arg("-d")
            .arg(root.join("wit/v0.1.0"))
            .args(["-w", "plugin", "bindings"])
            .arg(bindings.path())
            .output()
            .unwrap(),
        "componentize-py bindings",
    );
    let out = ok(
        Command::new(venv.join("python"))
            .args(["-m", "unittest", "discover", "-v", "-s"])
            .arg(root.join("plugin-sdk/python/tests"))
            .env(
                "PYTHONPATH",
                format!(
                    "{}:{}",
                    bindings.path().display(),
                    root.join("plugin-sdk/python").display()
                ),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap(),
        "python -m unittest",
    );
    assert!(
        out.contains("\nOK") && out.contains("test_add_does_nothing_when_present"),
        "{out}"
    );
}
