//! Which plugin queues a change goes to, and under which key.

use super::unit::PluginUnit;
use crate::cluster::{Change, ChangeType, ObjKey};
use crate::contract::Reason;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// The key and reason a change means for one plugin, if it means anything.
pub(crate) fn route(unit: &PluginUnit, change: &Change) -> Option<(ObjKey, Reason)> {
    let meta = unit.plugin.metadata();
    if change.kind == meta.reconciles {
        let reason = match change.change {
            ChangeType::Added => Reason::Added,
            ChangeType::Changed => Reason::Changed,
            ChangeType::Deleted => Reason::Deleted,
        };
        return Some((change.object.key.clone(), reason));
    }
    if meta.owns.contains(&change.kind) {
        let owner = change.object.controller.as_ref()?;
        if owner.kind == meta.reconciles {
            let key = ObjKey::new(change.object.key.namespace.as_deref(), &owner.name);
            return Some((key, Reason::Changed));
        }
    }
    None
}

/// Routes every change to every plugin it concerns, until the watches stop.
pub(crate) async fn run(mut changes: UnboundedReceiver<Change>, units: Vec<Arc<PluginUnit>>) {
    let namespace_kind = crate::contract::KindRef::new("v1", "Namespace");
    while let Some(change) = changes.recv().await {
        if change.kind == namespace_kind {
            for unit in &units {
                unit.namespace_changed(&change.object.key.name);
            }
        }
        for unit in &units {
            if let Some((key, reason)) = route(unit, &change) {
                unit.enqueue(key, reason);
            }
        }
    }
}
