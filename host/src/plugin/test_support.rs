//! Helpers for the plugin unit tests that run the built test plugins
//! (`target/test-plugins`, from `make plugins`).

use super::engine::{PluginRuntime, RuntimeConfig};
use super::limits::Limits;
use super::loaded::{CallContext, Plugin};
use crate::contract::NoObjects;
use crate::contract::{ObjectRef, Reason, ReconcileRequest};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A built test plugin.
pub(crate) fn test_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("KUBEPLUG_TEST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins")
        });
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    path
}

/// A runtime with the tests' compile cache.
pub(crate) fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-compile-cache"),
        ),
        max_sandboxes: 16,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// The hostile test plugin, loaded.
pub(crate) async fn hostile(rt: &PluginRuntime) -> Arc<Plugin> {
    rt.load_file(&test_plugin("hostile")).await.unwrap()
}

/// A request for `default/web` with the plugin configuration `config`.
pub(crate) fn request(config: &str) -> ReconcileRequest {
    ReconcileRequest {
        target: ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        },
        object: Some("{}".into()),
        previous: None,
        reason: Reason::Changed,
        attempt: 1,
        config: Some(config.into()),
    }
}

/// A context with nothing readable and a call timeout of `ms` milliseconds.
pub(crate) fn ctx_ms(ms: u64) -> CallContext {
    CallContext::new(
        Limits {
            timeout: Duration::from_millis(ms),
            ..Limits::default()
        },
        Arc::new(NoObjects),
    )
}

/// The hostile-meta test plugin with its metadata variant rewritten (see its header).
pub(crate) fn hostile_meta(variant: &str) -> Vec<u8> {
    const MARKER: &[u8] = b"KUBEPLUG-META-VARIANT:";
    let mut wasm = std::fs::read(test_plugin("hostile-meta")).unwrap();
    let at = wasm
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .expect("variant marker in hostile-meta.wasm")
        + MARKER.len();
    let field = &mut wasm[at..at + 26];
    field.fill(b' ');
    field[..variant.len()].copy_from_slice(variant.as_bytes());
    wasm
}
