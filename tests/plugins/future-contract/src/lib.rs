//! A test plugin built against contract version 9.9.0, which no host knows: loading it must
//! fail with an error that names both versions.

// Generated bindings for a contract no host knows: not documented item by item.
#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "plugin" });
}
use bindings::*;

use exports::kubeplug::plugin::reconciler::Guest;
use kubeplug::plugin::types::{Action, KindRef, PluginMetadata, ReconcileError, Request};

struct Future;

impl Guest for Future {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "future-contract".into(),
            version: "9.9.0".into(),
            reconciles: KindRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
            },
            owns: Vec::new(),
            wants_previous: false,
        }
    }

    fn reconcile(_request: Request) -> Result<Vec<Action>, ReconcileError> {
        Ok(Vec::new())
    }
}

bindings::export!(Future with_types_in bindings);
