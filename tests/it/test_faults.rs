//! `kubeplug test --faults`: golden cases run to a fixed point under a stale read, a child
//! not yet visible after its create, the same event twice and a crash between two writes.
//! The seed plugins pass; the hostile plugin's `create-child` mode (a generateName create
//! guarded only by what the cache shows) fails, naming the perturbation.

use crate::common::{fixture, plugin, test_plugin};
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `kubeplug ARGS` with the tests' compile cache: exit status and stdout (stderr appended).
fn kubeplug(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(args)
        .env("KUBEPLUG_CACHE_DIR", crate::common::compile_cache())
        .output()
        .expect("run kubeplug");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Writes case `name` into `dir`: `object`, the plugin's own output as its expectation, and
/// `config` when given.
fn case(dir: &Path, plugin: &Path, name: &str, object: &str, config: Option<&str>) {
    let object_file = dir.join(format!("{name}.object.yaml"));
    std::fs::write(&object_file, object).unwrap();
    // An empty cache (DIR/cache, which `kubeplug test` reads): the plugins may read.
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let mut args = vec![
        "eval",
        "--plugin",
        s(plugin),
        "--object",
        s(&object_file),
        "--cache",
        s(&cache),
        "--format",
        "yaml",
    ];
    if let Some(config) = config {
        args.extend(["--config", config]);
        std::fs::write(dir.join(format!("{name}.config.json")), config).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(dir.join(format!("{name}.expect.yaml")), &out.stdout).unwrap();
}

#[test]
fn the_seed_plugins_converge_under_every_perturbation() {
    for (name, object) in [
        ("image-pinner", "web-alpine.yaml"),
        ("sample-controller", "crd/foo.yaml"),
        // It failed "same event twice" while it created its Pods with generateName.
        ("customcluster", "crd/customcluster.yaml"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let wasm = plugin(name);
        let text = std::fs::read_to_string(fixture(object)).unwrap();
        case(dir.path(), &wasm, "first", &text, None);
        let (ok, out) = kubeplug(&["test", s(dir.path()), "--plugin", s(&wasm), "--faults"]);
        assert!(ok, "{name}:\n{out}");
        assert!(out.contains("ok   first\n"), "{out}");
        for family in [
            "stale read",
            "child not yet visible",
            "same event twice",
            "crash and re-run",
        ] {
            assert!(out.contains(&format!("ok   first  {family} (")), "{out}");
        }
        assert!(out.contains("1 passed, 0 failed"), "{out}");
        assert!(out.contains("; faults: 4 ok, 0 failed"), "{out}");
    }
}

#[test]
fn a_generate_name_create_guarded_by_the_cache_fails_naming_the_perturbation() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = test_plugin("hostile");
    let object = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: shop}\n";
    case(
        dir.path(),
        &hostile,
        "parent",
        object,
        Some(r#"{"mode": "create-child"}"#),
    );
    // Without --faults the golden case passes: the first call is right.
    let (ok, out) = kubeplug(&["test", s(dir.path()), "--plugin", s(&hostile)]);
    assert!(ok, "{out}");
    assert!(!out.contains("faults:"), "{out}");

    let (ok, out) = kubeplug(&["test", s(dir.path()), "--plugin", s(&hostile), "--faults"]);
    assert!(!ok, "{out}");
    assert!(out.contains("ok   parent\n"), "{out}");
    assert!(
        out.contains(
            "FAIL parent  same event twice: not idempotent: the same event delivered twice (call 1) created ConfigMap from generateName web- twice (web-bbbbb, then web-bbbbc)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL parent  stale read: does not converge after a stale read (call 2 read the other objects as call 1 saw them): the final state differs from the fault-free run's: an extra ConfigMap shop/web-bbbbc"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL parent  child not yet visible: does not converge after a child not yet visible after its create (call 2 did not see ConfigMap shop/web-bbbbb, created by call 1): the final state differs from the fault-free run's: an extra ConfigMap shop/web-bbbbc (one more from generateName web-)"
        ),
        "{out}"
    );
    // One create, nothing between two writes to crash in.
    assert!(
        out.contains("ok   parent  crash and re-run (nothing to perturb)"),
        "{out}"
    );
    assert!(out.contains("0 passed, 1 failed"), "{out}");
    assert!(out.contains("; faults: 1 ok, 3 failed"), "{out}");
}
