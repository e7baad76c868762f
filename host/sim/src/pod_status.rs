//! Pod status, standing in for the scheduler and a kubelet: after the status delay a Pod
//! that is not being deleted reports phase `Running`, a start time, conditions
//! `PodScheduled`, `Initialized`, `ContainersReady` and `Ready` true, and one ready, started,
//! running status per container. Pods never fail, restart or finish.

use super::patch::fields::now;
use serde_json::{Value, json};

/// The condition types a running Pod reports, all `True`.
const CONDITIONS: [&str; 4] = ["PodScheduled", "Initialized", "ContainersReady", "Ready"];

/// The status of a Pod that has started all its containers.
pub fn settled_status(object: &Value) -> Value {
    let status = &object["status"];
    let since = status["startTime"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(now);
    let conditions: Vec<Value> = CONDITIONS
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": since}))
        .collect();
    let containers: Vec<Value> = object["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true,
                   "started": true, "restartCount": 0,
                   "state": {"running": {"startedAt": since}}})
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": containers,
        "qosClass": "BestEffort",
        "startTime": since,
    })
}

/// Whether a Pod has yet to report `Running` with every container ready.
pub fn needs_update(object: &Value) -> bool {
    if object["metadata"]["deletionTimestamp"].is_string() {
        return false;
    }
    let status = &object["status"];
    let ready = status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let containers = object["spec"]["containers"].as_array().map_or(0, Vec::len);
    status["phase"] != "Running"
        || !ready
        || status["containerStatuses"].as_array().map_or(0, Vec::len) != containers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_pod_settles_running_and_ready() {
        let pod = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "busybox"}]}});
        assert!(needs_update(&pod));
        let mut settled = pod.clone();
        settled["status"] = settled_status(&pod);
        assert!(!needs_update(&settled));
        assert_eq!(settled["status"]["phase"], "Running");
        let ready = settled["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(settled["status"]["containerStatuses"][1]["name"], "b");
        assert_eq!(settled["status"]["containerStatuses"][1]["ready"], true);
        let mut deleting = pod;
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(
            !needs_update(&deleting),
            "a Pod being deleted is left alone"
        );
    }
}
