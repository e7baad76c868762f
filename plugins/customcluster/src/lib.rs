//! customcluster: the Customcluster controller as a plugin.
//!
//! For each `Customcluster` (`samplecontroller.k8s.io/v1alpha1`): keep exactly `spec.count`
//! Pods labelled `controller: <name>` and controlled by it, each running `nginx:latest` with
//! env `MESSAGE=<spec.message>` (a shell echoes it and sleeps). Missing Pods are created
//! (named `<name>-<i>`, the lowest indexes no Pod has: see [`free_names`]), extras deleted, Pods running another message replaced; Pods carrying
//! the label without being controlled by it (created by hand) are deleted. Status:
//! `count` = controlled Pods that are Running, `message` = the message they run.
//!
//! Unlike the original, which blocked a worker for up to 5 minutes polling for running Pods,
//! the call returns at once and asks to be called again after 2 s while Pods are not all
//! Running (their status changes re-queue it too). Pods already being deleted are left to
//! finish: they count neither as present nor as running, so replacements start at once.

use k8s_openapi::api::core::v1::Pod;
use kubeplug_sdk::owner::{is_controlled_by, is_deleting, owner_reference};
use kubeplug_sdk::{
    Action, CustomResource, Error, KindRef, Metadata, ObjectRef, Reconciler, Request, custom_kind,
    host, pool,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

/// The desired state of a Customcluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CustomclusterSpec {
    /// How many Pods to run.
    #[serde(default)]
    pub count: i64,
    /// What each Pod prints (its `MESSAGE`).
    #[serde(default)]
    pub message: String,
}

/// The observed state of a Customcluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CustomclusterStatus {
    /// Controlled Pods that are Running and not being deleted.
    #[serde(default)]
    pub count: i64,
    /// The message those Pods run (empty while none runs).
    #[serde(default)]
    pub message: String,
}

custom_kind!(
    CustomclusterSpec,
    status = CustomclusterStatus,
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Customcluster",
    plural = "customclusters"
);

/// A Customcluster object.
pub type Customcluster = CustomResource<CustomclusterSpec>;

/// How soon to look again while Pods are not yet Running.
const RECHECK_STARTING: Duration = Duration::from_secs(2);
/// At most this many Pods are created per call (the rest on the next calls, as a
/// ReplicaSet's burst), so a huge count never exceeds the host's action limit.
const CREATE_BURST: usize = 100;

/// The Customcluster reconciler.
pub struct CustomclusterController;

impl Reconciler for CustomclusterController {
    fn metadata() -> Metadata {
        Metadata::new("customcluster", env!("CARGO_PKG_VERSION"))
            .reconciles::<Customcluster>()
            .owns::<Pod>()
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let Some(cc) = req.object::<Customcluster>()? else {
            return Ok(Vec::new()); // its Pods go by garbage collection
        };
        if is_deleting(&cc.metadata) {
            return Ok(Vec::new());
        }
        let count = usize::try_from(cc.spec.count)
            .map_err(|_| Error::permanent(format!("{}: spec.count must be >= 0", req.key())))?;
        let name = cc.metadata.name.clone().unwrap_or_default();
        let selector = format!("controller={name}");
        let labelled: Vec<Pod> = host::list(
            &KindRef::of::<Pod>(),
            cc.metadata.namespace.as_deref(),
            Some(&selector),
        )?;
        let (owned, foreign): (Vec<Pod>, Vec<Pod>) = labelled
            .into_iter()
            .partition(|p| is_controlled_by(&p.metadata, &cc.metadata));
        let mut actions = Vec::new();
        for pod in foreign.iter().filter(|p| !is_deleting(&p.metadata)) {
            let pod = ObjectRef::to(pod);
            actions.push(Action::info(format!(
                "deleting Pod {}: labelled {selector} but not owned",
                pod.name
            )));
            actions.push(Action::delete(&pod));
        }
        // Every labelled Pod's name, its own (being deleted too) and foreign ones: a new Pod
        // can take none of them.
        let taken: Vec<String> = owned
            .iter()
            .chain(&foreign)
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let message = cc.spec.message.as_str();
        let plan = pool::plan(owned, count, |p| message_of(p) == Some(message));
        actions.extend(
            plan.delete
                .iter()
                .map(|p| Action::delete(&ObjectRef::to(p))),
        );
        for pod_name in free_names(&name, &taken, plan.create.min(CREATE_BURST)) {
            actions.push(Action::create(&new_pod(&cc, &name, &pod_name)?));
        }
        let running = plan.keep.iter().filter(|p| is_running(p)).count();
        let status = CustomclusterStatus {
            count: i64::try_from(running).unwrap_or(i64::MAX),
            message: if running > 0 {
                message.to_string()
            } else {
                String::new()
            },
        };
        actions.extend(cc.update_status(status)?);
        if running < count {
            actions.push(Action::requeue_after(RECHECK_STARTING));
        }
        Ok(actions)
    }
}

/// The `MESSAGE` a Pod's first container runs with.
fn message_of(pod: &Pod) -> Option<&str> {
    let container = pod.spec.as_ref()?.containers.first()?;
    let env = container
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == "MESSAGE")?;
    Some(env.value.as_deref().unwrap_or(""))
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// `n` names for new Pods of Customcluster `name`: `<name>-<i>` for the lowest indexes `i`
/// that no name in `taken` has. The same object and Pods give the same names, so a call
/// repeated (the same event twice, a cache that does not show the last creates yet, a rerun
/// after a crash between two creates) makes no Pod twice: the API server answers
/// AlreadyExists, which the host takes as done. (Generated names made a second set.)
fn free_names(name: &str, taken: &[String], n: usize) -> Vec<String> {
    // `-` and up to 5 digits after it keep a name within 63 characters (a Pod's hostname).
    let prefix: String = name.chars().take(57).collect();
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|candidate| !taken.contains(candidate))
        .take(n)
        .collect()
}

/// Pod `pod_name` of `cc`: label `controller: <name>`, controlled by it.
fn new_pod(cc: &Customcluster, name: &str, pod_name: &str) -> Result<Value, Error> {
    Ok(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": cc.metadata.namespace,
            "labels": {"controller": name},
            "ownerReferences": [owner_reference(cc)?],
        },
        "spec": {"containers": [{
            "name": "app",
            "image": "nginx:latest",
            "command": ["sh", "-c", "echo \"$MESSAGE\"; sleep infinity"],
            "env": [{"name": "MESSAGE", "value": cc.spec.message}],
        }]},
    }))
}

kubeplug_sdk::export!(CustomclusterController);

#[cfg(test)]
mod tests {
    use super::free_names;

    #[test]
    fn new_pods_take_the_lowest_free_indexes_the_same_every_time() {
        let taken = vec!["web-0".to_string(), "web-2".to_string()];
        assert_eq!(free_names("web", &taken, 3), ["web-1", "web-3", "web-4"]);
        assert_eq!(free_names("web", &taken, 3), free_names("web", &taken, 3));
        assert!(free_names("web", &taken, 0).is_empty());
        let long = "x".repeat(63);
        assert_eq!(free_names(&long, &[], 1)[0].len(), 59);
    }
}
