//! Deployment status simulation, standing in for the deployment controller and kubelets:
//! after a configurable delay, `status` reports `observedGeneration = generation`, all replica
//! counts equal to `spec.replicas`, and conditions Available and Progressing true.

use super::objects::Sub;
use super::patch::fields::now;
use super::state::Shared;
use super::store::EventType;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

const RESOURCE: &str = "deployments.apps";
const MANAGER: &str = "kube-controller-manager";

/// The status a settled Deployment reports.
fn settled_status(object: &Value) -> Value {
    let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
    let previous = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let condition = |type_: &str, reason: &str, message: String| {
        let since = previous
            .iter()
            .find(|c| c["type"] == type_ && c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
            .unwrap_or_else(now);
        json!({"type": type_, "status": "True", "reason": reason, "message": message,
               "lastUpdateTime": since, "lastTransitionTime": since})
    };
    let mut status = json!({
        "observedGeneration": generation,
        "conditions": [
            condition("Available", "MinimumReplicasAvailable", "Deployment has minimum availability.".into()),
            condition("Progressing", "NewReplicaSetAvailable", format!("ReplicaSet \"{name}\" has successfully progressed.")),
        ],
    });
    if replicas > 0 {
        for field in [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ] {
            status[field] = json!(replicas);
        }
    }
    status
}

/// Whether the status lags behind spec.
fn needs_update(object: &Value) -> bool {
    if object["metadata"]["deletionTimestamp"].is_string() {
        return false;
    }
    let status = &object["status"];
    let target = settled_status(object);
    [
        "observedGeneration",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .any(|f| status[*f] != target[*f])
        || status["conditions"].as_array().is_none_or(|c| c.len() != 2)
}

/// Runs until the store closes: watches Deployments and settles their status after the delay.
pub async fn run(shared: Arc<Shared>) {
    let mut events = shared.store.subscribe();
    let pending: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let (items, _, _) = shared.store.list(RESOURCE, None, None, None, needs_update);
    for item in items {
        schedule(&shared, &pending, &item);
    }
    loop {
        match events.recv().await {
            Ok(event) if &*event.resource == RESOURCE && event.event_type != EventType::Deleted => {
                if needs_update(&event.object) {
                    schedule(&shared, &pending, &event.object);
                }
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                let (items, _, _) = shared.store.list(RESOURCE, None, None, None, needs_update);
                for item in items {
                    schedule(&shared, &pending, &item);
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn schedule(shared: &Arc<Shared>, pending: &Arc<Mutex<HashSet<(String, String)>>>, object: &Value) {
    let key = super::store::key_of(object);
    if !pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone())
    {
        return;
    }
    let shared = Arc::downgrade(shared);
    let pending = pending.clone();
    tokio::spawn(async move {
        let Some(delay) = shared.upgrade().map(|s| s.config.status_delay) else {
            return;
        };
        tokio::time::sleep(delay).await;
        pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Ok(kind) = shared.kind("deployments.apps") else {
            return;
        };
        let result = shared.modify_part(&kind, &key.0, &key.1, MANAGER, Sub::Status, |o| {
            if !needs_update(o) {
                return false;
            }
            o["status"] = settled_status(o);
            true
        });
        if let Err(err) = result
            && err.code != 404
        {
            tracing::warn!(namespace = %key.0, name = %key.1, %err, "could not update simulated Deployment status");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_to_spec() {
        let d = json!({"metadata": {"name": "web", "generation": 3}, "spec": {"replicas": 2}});
        assert!(needs_update(&d));
        let mut settled = d.clone();
        settled["status"] = settled_status(&d);
        assert!(!needs_update(&settled));
        assert_eq!(settled["status"]["availableReplicas"], 2);
        assert_eq!(settled["status"]["observedGeneration"], 3);
        settled["spec"]["replicas"] = json!(0);
        assert!(needs_update(&settled));
    }
}
