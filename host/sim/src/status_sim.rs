//! Status simulation, standing in for the deployment controller, the scheduler and kubelets:
//! after a configurable delay, a Deployment's `status` reports `observedGeneration =
//! generation`, all replica counts equal to `spec.replicas`, and conditions Available and
//! Progressing true; a Pod's reports `Running` and `Ready` (see [`super::pod_status`]).

use super::objects::Sub;
use super::patch::fields::now;
use super::state::Shared;
use super::store::EventType;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::pod_status;

const DEPLOYMENTS: &str = "deployments.apps";
const PODS: &str = "pods";
const MANAGER: &str = "kube-controller-manager";
/// The field manager of the simulated kubelet's Pod status writes.
const KUBELET: &str = "kubelet";

/// The resources whose status is simulated.
const RESOURCES: [&str; 2] = [DEPLOYMENTS, PODS];

/// Whether an object of `resource` has a status to settle.
fn lags(resource: &str, object: &Value) -> bool {
    match resource {
        DEPLOYMENTS => needs_update(object),
        PODS => pod_status::needs_update(object),
        _ => false,
    }
}

/// The settled status of an object of `resource`.
fn settle(resource: &str, object: &Value) -> Value {
    match resource {
        PODS => pod_status::settled_status(object),
        _ => settled_status(object),
    }
}

/// The field manager that writes the status of `resource`.
fn manager(resource: &str) -> &'static str {
    if resource == PODS { KUBELET } else { MANAGER }
}

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

/// Whether the status lags behind spec. Allocates nothing: a lagging watch receiver checks
/// every stored Deployment (100,000 in the e2e bench's large run), and building the settled
/// status for each took most of that scan's time.
fn needs_update(object: &Value) -> bool {
    if object["metadata"]["deletionTimestamp"].is_string() {
        return false;
    }
    let status = &object["status"];
    let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
    let counts = [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ];
    let counts_settled = if replicas > 0 {
        counts.iter().all(|f| status[*f].as_i64() == Some(replicas))
    } else {
        counts.iter().all(|f| status[*f].is_null())
    };
    status["observedGeneration"].as_i64() != Some(generation)
        || !counts_settled
        || status["conditions"].as_array().is_none_or(|c| c.len() != 2)
}

/// Objects waiting for their delay, by resource and key.
type Pending = Arc<Mutex<HashSet<(&'static str, (String, String))>>>;

/// Runs until the store closes: watches Deployments and Pods and settles their status after
/// the delay.
pub async fn run(shared: Arc<Shared>) {
    let mut events = shared.store.subscribe();
    let pending: Pending = Arc::default();
    schedule_lagging(&shared, &pending);
    loop {
        match events.recv().await {
            Ok(event) if event.event_type != EventType::Deleted => {
                if let Some(resource) = RESOURCES.into_iter().find(|r| *r == &*event.resource)
                    && lags(resource, &event.object)
                {
                    schedule(&shared, &pending, resource, &event.object);
                }
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                // Skip to the newest event first: every event missed so far is covered by
                // one scan, instead of one scan per overflow of the channel (quadratic when
                // the settling of 100,000 loaded objects overflowed it again and again).
                events = events.resubscribe();
                schedule_lagging(&shared, &pending);
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Schedules every stored object whose status lags (at start, and after missed events). The
/// check runs on a snapshot, not under the store's lock, which writes need.
fn schedule_lagging(shared: &Arc<Shared>, pending: &Pending) {
    for resource in RESOURCES {
        let (items, _, _) = shared.store.list(resource, None, None, None, |_| true);
        for item in items.iter().filter(|o| lags(resource, o)) {
            schedule(shared, pending, resource, item);
        }
    }
}

fn schedule(shared: &Arc<Shared>, pending: &Pending, resource: &'static str, object: &Value) {
    let key = (resource, super::store::key_of(object));
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
        let Ok(kind) = shared.kind(resource) else {
            return;
        };
        let (_, (ns, name)) = &key;
        let result = shared.modify_part(&kind, ns, name, manager(resource), Sub::Status, |o| {
            if !lags(resource, o) {
                return false;
            }
            o["status"] = settle(resource, o);
            true
        });
        if let Err(err) = result
            && err.code != 404
        {
            tracing::warn!(resource, namespace = %ns, name = %name, %err, "could not update simulated status");
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
        settled["status"] = settled_status(&settled);
        assert!(!needs_update(&settled));
        settled["metadata"]["generation"] = json!(4);
        assert!(needs_update(&settled));
        settled["status"]["observedGeneration"] = json!(4);
        assert!(!needs_update(&settled));
        settled["status"]["conditions"] = json!([]);
        assert!(needs_update(&settled));
    }
}
