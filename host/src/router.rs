//! Which plugin queues a change goes to, and under which key.

use crate::cluster::{Change, ChangeType, ObjKey, Routed};
use crate::contract::{PluginMetadata, Reason};
use crate::worker::{RunningPlugins, Trigger};
use tokio::sync::mpsc::UnboundedReceiver;

/// The key and reason a change means for a plugin described by `meta`, if anything: its own
/// key for the kind it reconciles, its controller owner's key for a kind it owns.
pub(crate) fn route(meta: &PluginMetadata, change: &Change) -> Option<(ObjKey, Reason)> {
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

/// Routes every change to every plugin it concerns (the plugins that have joined the feed
/// when the change arrives), and runs each join in its turn, until the watches stop.
pub(crate) async fn run(mut feed: UnboundedReceiver<Routed>, running: RunningPlugins) {
    let namespace_kind = crate::contract::KindRef::new("v1", "Namespace");
    while let Some(routed) = feed.recv().await {
        let change = match routed {
            Routed::Change(change) => change,
            Routed::Join(join) => {
                join();
                continue;
            }
        };
        let running = running.snapshot();
        if change.kind == namespace_kind {
            for plugin in running.iter() {
                plugin.namespace_changed(&change.object.key.name);
            }
        }
        // The fields it changed, computed at most once for all the plugins it queues.
        let changed = std::sync::Arc::default();
        for plugin in running.iter() {
            // Not joined yet: the keys it joins with already hold this change.
            if !plugin.has_joined() {
                continue;
            }
            let revision = plugin.current();
            let meta = revision.plugin.metadata();
            let Some((key, reason)) = route(meta, &change) else {
                continue;
            };
            // Most plugins of a many-tenant host are confined to a namespace of their own:
            // refused here, before a trigger is built for each of them (the queue refuses
            // it again), a change costs them a comparison, not an allocation.
            if !revision.grants_namespace(key.namespace.as_deref()) {
                continue;
            }
            let own = change.object.key == key && change.kind == meta.reconciles;
            let deleted = change.change == ChangeType::Deleted;
            let trigger = Trigger {
                reason,
                via: (!own).then(|| format!("{} {}", change.kind.kind, change.object.key)),
                before: if deleted {
                    Some(change.object.clone())
                } else {
                    change.previous.clone()
                },
                after: (!deleted).then(|| change.object.clone()),
                kind: Some(change.kind.kind.clone()),
                changed: std::sync::Arc::clone(&changed),
            };
            plugin.enqueue_with(key, trigger);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{CachedObject, OwnerRef};
    use crate::contract::KindRef;
    use std::sync::Arc;

    fn meta() -> PluginMetadata {
        PluginMetadata {
            name: "p".into(),
            version: "1".into(),
            reconciles: KindRef::deployment(),
            owns: vec![KindRef::new("v1", "Pod")],
            wants_previous: false,
        }
    }

    fn change(kind: KindRef, change: ChangeType, owner: Option<OwnerRef>) -> Change {
        Change {
            kind,
            change,
            object: Arc::new(CachedObject {
                key: ObjKey::new(Some("ns"), "obj"),
                json: "{}".into(),
                resource_version: "1".into(),
                labels: Default::default(),
                controller: owner,
                manager: None,
            }),
            previous: None,
        }
    }

    fn owner(kind: KindRef) -> Option<OwnerRef> {
        Some(OwnerRef {
            kind,
            name: "parent".into(),
        })
    }

    #[test]
    fn primary_objects_route_to_their_own_key_with_the_reason() {
        let m = meta();
        for (c, r) in [
            (ChangeType::Added, Reason::Added),
            (ChangeType::Changed, Reason::Changed),
            (ChangeType::Deleted, Reason::Deleted),
        ] {
            let routed = route(&m, &change(KindRef::deployment(), c, None));
            assert_eq!(routed, Some((ObjKey::new(Some("ns"), "obj"), r)));
        }
    }

    #[test]
    fn owned_objects_route_to_their_controller_owner() {
        let m = meta();
        let pod = KindRef::new("v1", "Pod");
        let routed = route(
            &m,
            &change(
                pod.clone(),
                ChangeType::Deleted,
                owner(KindRef::deployment()),
            ),
        );
        assert_eq!(
            routed,
            Some((ObjKey::new(Some("ns"), "parent"), Reason::Changed))
        );
        assert_eq!(
            route(&m, &change(pod.clone(), ChangeType::Changed, None)),
            None,
            "no owner"
        );
        let other = owner(KindRef::new("apps/v1", "StatefulSet"));
        assert_eq!(
            route(&m, &change(pod, ChangeType::Changed, other)),
            None,
            "owned by another kind"
        );
    }

    #[test]
    fn other_kinds_route_nowhere() {
        let lease = KindRef::new("coordination.k8s.io/v1", "Lease");
        assert_eq!(
            route(
                &meta(),
                &change(lease, ChangeType::Added, owner(KindRef::deployment()))
            ),
            None
        );
    }
}
