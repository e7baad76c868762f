//! Garbage collection of dependents, standing in for the controller-manager's collector:
//! when an object is removed, objects whose ownerReferences name its uid are deleted in the
//! background (or just lose the dangling reference when another owner still exists).
//! `propagationPolicy=Orphan` is handled at delete time by removing the references first.

use super::delete::{DeleteOptions, remove_owner};
use super::state::Shared;
use super::store::EventType;
use std::collections::HashSet;
use std::sync::Arc;

const MANAGER: &str = "generic-garbage-collector";

/// Runs until the store closes.
pub async fn run(shared: Arc<Shared>) {
    let mut events = shared.store.subscribe();
    collect_dangling(&shared);
    loop {
        match events.recv().await {
            Ok(event) if event.event_type == EventType::Deleted => {
                if let Some(uid) = event.object["metadata"]["uid"].as_str() {
                    collect(&shared, uid);
                }
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => collect_dangling(&shared),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Handles every object with a reference to a missing owner (after a missed event).
fn collect_dangling(shared: &Shared) {
    let mut gone = HashSet::new();
    for (_, object) in &shared.store.all() {
        for r in object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(uid) = r["uid"].as_str()
                && !shared.store.uid_exists(uid)
            {
                gone.insert(uid.to_string());
            }
        }
    }
    for uid in gone {
        collect(shared, &uid);
    }
}

/// Deletes (or detaches) the dependents of the removed owner `uid`.
fn collect(shared: &Shared, uid: &str) {
    if shared.store.uid_exists(uid) {
        return;
    }
    for (resource, object) in shared.store.dependents(uid) {
        let Some(kind) = shared.registry().by_resource(&resource) else {
            continue;
        };
        let (ns, name) = super::store::key_of(&object);
        let other_owner = object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .any(|u| u != uid && shared.store.uid_exists(u));
        let result = if other_owner {
            shared.modify(&kind, &ns, &name, MANAGER, |o| {
                remove_owner(o, uid);
                true
            })
        } else {
            tracing::debug!(resource = %resource, namespace = %ns, name = %name, owner = uid, "garbage collecting dependent");
            shared.delete(
                &kind,
                &ns,
                &name,
                &DeleteOptions {
                    propagation: Some("Background".into()),
                    ..Default::default()
                },
            )
        };
        if let Err(err) = result
            && err.code != 404
        {
            tracing::warn!(resource = %resource, namespace = %ns, name = %name, %err, "garbage collection failed");
        }
    }
}
