//! Contract 0.1.0 (`wit/v0.1.0`): its bindings, its linker, the conversions between its
//! generated types and the host's version-independent ones (`crate::contract`), and its host
//! imports. Everything here is glue: the bounds, budgets and deadline checks are shared by
//! every version (`plugin/imports.rs`, `plugin/reply.rs`, `contract::validate`).

use self::kubeplug::plugin::{host, types};
use crate::contract::validate::parse_json;
use crate::contract::{
    Action, EventType, KindRef, LogLevel, ObjectRef, OutputLimits, OutputViolation, PatchType,
    PluginMetadata, Reason, ReconcileRequest,
};
use crate::plugin::error::CallError;
use crate::plugin::log_gate::cap_line;
use crate::plugin::reply;
use crate::plugin::sandbox::SandboxState;
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

wasmtime::component::bindgen!({
    path: "../wit/v0.1.0",
    world: "plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});

/// The version this module implements, as a component names it in its exports.
pub(crate) const VERSION: &str = "0.1.0";

/// A linker with WASI p2 (which Rust guests import even when unused) and this version's host
/// imports.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<SandboxState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// The component pre-linked against `linker`, checked to have this version's exports.
pub(crate) fn pre(
    linker: &Linker<SandboxState>,
    component: &Component,
) -> wasmtime::Result<PluginPre<SandboxState>> {
    PluginPre::new(linker.instantiate_pre(component)?)
}

/// Calls the reconcile export and converts its answer into checked actions or the error the
/// plugin reported.
pub(crate) async fn reconcile(
    exports: &Plugin,
    store: &mut Store<SandboxState>,
    request: &ReconcileRequest,
    output: OutputLimits,
) -> wasmtime::Result<Result<Vec<Action>, CallError>> {
    let answer = exports
        .kubeplug_plugin_reconciler()
        .call_reconcile(store, &request_to_wit(request))
        .await?;
    Ok(match answer {
        Ok(actions) => actions_from_wit(actions, output).map_err(CallError::from),
        Err(types::ReconcileError::Transient(m)) => Err(reply::transient(&m)),
        Err(types::ReconcileError::Permanent(m)) => Err(reply::permanent(&m)),
    })
}

/// Calls the metadata export; the answer is converted as it is (moved, not copied) and checked
/// by the caller.
pub(crate) async fn metadata(
    exports: &Plugin,
    store: &mut Store<SandboxState>,
) -> wasmtime::Result<PluginMetadata> {
    let m = exports
        .kubeplug_plugin_reconciler()
        .call_metadata(store)
        .await?;
    Ok(PluginMetadata {
        name: m.name,
        version: m.version,
        reconciles: kind_from_wit(m.reconciles),
        owns: m.owns.into_iter().map(kind_from_wit).collect(),
        wants_previous: m.wants_previous,
    })
}

fn kind_from_wit(k: types::KindRef) -> KindRef {
    KindRef {
        api_version: k.api_version,
        kind: k.kind,
    }
}

fn level_from_wit(level: types::LogLevel) -> LogLevel {
    match level {
        types::LogLevel::Trace => LogLevel::Trace,
        types::LogLevel::Debug => LogLevel::Debug,
        types::LogLevel::Info => LogLevel::Info,
        types::LogLevel::Warn => LogLevel::Warn,
        types::LogLevel::Error => LogLevel::Error,
    }
}

fn request_to_wit(req: &ReconcileRequest) -> types::Request {
    types::Request {
        target: ref_to_wit(&req.target),
        object: req.object.as_deref().map(str::to_string),
        previous: req.previous.as_deref().map(str::to_string),
        reason: match req.reason {
            Reason::Added => types::Reason::Added,
            Reason::Changed => types::Reason::Changed,
            Reason::Deleted => types::Reason::Deleted,
            Reason::Resync => types::Reason::Resync,
            Reason::Retry => types::Reason::Retry,
            Reason::Requeue => types::Reason::Requeue,
        },
        attempt: req.attempt,
        config: req.config.as_deref().map(str::to_string),
    }
}

fn ref_to_wit(r: &ObjectRef) -> types::ObjectRef {
    types::ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    }
}

fn ref_from_wit(r: types::ObjectRef) -> ObjectRef {
    ObjectRef {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    }
}

/// Bytes of text an action carries, for the output size limit.
fn text_len(a: &types::Action) -> usize {
    let r = |r: &types::ObjectRef| {
        r.api_version.len()
            + r.kind.len()
            + r.name.len()
            + r.namespace.as_ref().map_or(0, String::len)
    };
    match a {
        types::Action::Patch(p) => {
            r(&p.target) + p.body.len() + p.subresource.as_ref().map_or(0, String::len)
        }
        types::Action::Create(m) => m.len(),
        types::Action::Delete(t) => r(t),
        types::Action::Event(e) => {
            r(&e.regarding) + e.reason.len() + e.message.len() + e.action.len()
        }
        types::Action::Log(l) => l.message.len(),
        types::Action::RequeueAfter(_) => 8,
    }
}

/// Converts and checks a plugin's actions: count and size before any parsing, then the
/// version-independent checks.
fn actions_from_wit(
    actions: Vec<types::Action>,
    limits: OutputLimits,
) -> Result<Vec<Action>, OutputViolation> {
    reply::check_count(actions.len(), limits)?;
    reply::check_bytes(actions.iter().map(text_len).sum(), limits)?;
    let converted = actions
        .into_iter()
        .enumerate()
        .map(|(index, a)| action_from_wit(index, a))
        .collect::<Result<Vec<_>, OutputViolation>>()?;
    reply::check_actions(&converted, limits)?;
    Ok(converted)
}

fn action_from_wit(index: usize, a: types::Action) -> Result<Action, OutputViolation> {
    Ok(match a {
        types::Action::Patch(p) => Action::Patch {
            body: parse_json(index, "patch", &p.body)?,
            target: ref_from_wit(p.target),
            patch_type: match p.patch_type {
                types::PatchType::Merge => PatchType::Merge,
                types::PatchType::Json => PatchType::Json,
                types::PatchType::Strategic => PatchType::Strategic,
                types::PatchType::Apply => PatchType::Apply,
            },
            subresource: p.subresource,
        },
        types::Action::Create(m) => Action::Create {
            manifest: parse_json(index, "create", &m)?,
        },
        types::Action::Delete(t) => Action::Delete {
            target: ref_from_wit(t),
        },
        types::Action::Event(e) => Action::Event {
            regarding: ref_from_wit(e.regarding),
            event_type: match e.event_type {
                types::EventType::Normal => EventType::Normal,
                types::EventType::Warning => EventType::Warning,
            },
            reason: e.reason,
            message: e.message,
            event_action: if e.action.is_empty() {
                "Reconcile".into()
            } else {
                e.action
            },
        },
        types::Action::Log(l) => Action::Log {
            level: level_from_wit(l.level),
            message: cap_line(&l.message),
        },
        types::Action::RequeueAfter(ms) => Action::RequeueAfter { after_ms: ms },
    })
}

impl types::Host for SandboxState {}

/// The imports of 0.1.0: each converts its arguments and hands them to the shared,
/// version-independent import (deadline, bounds, read budget: `plugin/imports.rs`).
impl host::Host for SandboxState {
    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        self.import_log(level_from_wit(level), &message)
    }

    async fn get_object(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        self.import_get(kind_from_wit(kind), namespace, name).await
    }

    async fn list_objects(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        self.import_list(kind_from_wit(kind), namespace, label_selector)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::imports::DeadlineExceeded;
    use crate::plugin::imports::tests::{Untouchable, state};
    use host::Host;
    use std::sync::Arc;
    use std::time::Instant;

    fn pod() -> types::KindRef {
        types::KindRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    #[tokio::test]
    async fn imports_after_the_deadline_fail_the_call_as_a_timeout() {
        let mut s = state(Arc::new(Untouchable), Instant::now());
        let err = s.list_objects(pod(), None, None).await.unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
        let err = s.get_object(pod(), None, "a".into()).await.unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
        let err = s
            .log(types::LogLevel::Info, "late".into())
            .await
            .unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
    }

    #[test]
    fn the_bindings_are_those_of_the_version_this_module_names() {
        let wit = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../wit/v{VERSION}/plugin.wit")),
        )
        .unwrap();
        assert!(
            wit.contains(&format!("package kubeplug:plugin@{VERSION};")),
            "wit/v{VERSION}/plugin.wit does not declare version {VERSION}"
        );
    }

    #[test]
    fn requests_and_actions_convert_field_for_field() {
        let target = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        };
        let req = ReconcileRequest {
            target: target.clone(),
            object: Some("{}".into()),
            previous: None,
            reason: Reason::Requeue,
            attempt: 3,
            config: Some("{\"a\":1}".into()),
        };
        let w = request_to_wit(&req);
        assert_eq!(ref_from_wit(w.target), target);
        assert_eq!((w.object.as_deref(), w.previous), (Some("{}"), None));
        assert!(matches!(w.reason, types::Reason::Requeue));
        assert_eq!((w.attempt, w.config.as_deref()), (3, Some("{\"a\":1}")));

        let actions = actions_from_wit(
            vec![
                types::Action::Event(types::Event {
                    regarding: ref_to_wit(&target),
                    event_type: types::EventType::Warning,
                    reason: "Pinned".into(),
                    message: "m".into(),
                    action: String::new(),
                }),
                types::Action::RequeueAfter(1500),
            ],
            OutputLimits::default(),
        )
        .unwrap();
        assert_eq!(
            actions,
            vec![
                Action::Event {
                    regarding: target,
                    event_type: EventType::Warning,
                    reason: "Pinned".into(),
                    message: "m".into(),
                    event_action: "Reconcile".into(),
                },
                Action::RequeueAfter { after_ms: 1500 },
            ]
        );
    }
}
