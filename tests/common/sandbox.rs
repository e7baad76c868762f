//! Helpers for tests that call plugins through the runtime directly.

use super::test_plugin;
use kubeplug::contract::{Action, ObjectRef, Reason, ReconcileRequest};
use kubeplug::plugin::{
    CallContext, CallReport, Limits, NoObjects, Plugin, PluginRuntime, RuntimeConfig,
};
use std::sync::Arc;

pub fn runtime(cache: Option<&std::path::Path>) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: cache.map(Into::into),
        max_sandboxes: 16,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

pub fn request(config: &str) -> ReconcileRequest {
    ReconcileRequest {
        target: ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        },
        object: Some(r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"}}"#.into()),
        previous: None,
        reason: Reason::Changed,
        attempt: 1,
        config: Some(config.into()),
    }
}

pub fn ctx(limits: Limits) -> CallContext {
    CallContext::new(limits, Arc::new(NoObjects))
}

pub async fn call(p: &Plugin, config: &str) -> CallReport {
    p.reconcile(&request(config), &ctx(Limits::default())).await
}

pub async fn hostile(rt: &PluginRuntime) -> Arc<Plugin> {
    rt.load_file(&test_plugin("hostile")).await.unwrap()
}

pub fn messages(report: &CallReport) -> Vec<String> {
    match &report.outcome {
        Ok(actions) => actions
            .iter()
            .filter_map(|a| match a {
                Action::Log { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect(),
        Err(e) => panic!("call failed: {e}"),
    }
}

/// The plugin still answers normally: containment did not break the runtime.
pub async fn still_behaves(p: &Plugin) {
    assert_eq!(
        messages(&call(p, r#"{"mode": "behave"}"#).await),
        ["reconciled default/web"]
    );
}
