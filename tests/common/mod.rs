//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

pub mod cluster;
pub mod host_process;
pub mod sandbox;

use std::path::{Path, PathBuf};

fn dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(default)
    })
}

fn find(dir: PathBuf, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the plugins first with `make plugins` (or run `make test`)",
        path.display()
    );
    path
}

/// A reference plugin from `plugins/`, built by `make plugins`.
pub fn plugin(name: &str) -> PathBuf {
    find(dir("KUBEPLUG_PLUGIN_DIR", "plugins"), name)
}

/// A test plugin from `tests/plugins/`, built by `make plugins`.
pub fn test_plugin(name: &str) -> PathBuf {
    find(dir("KUBEPLUG_TEST_PLUGIN_DIR", "test-plugins"), name)
}

/// A fixture file from `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}
