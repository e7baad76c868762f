//! What a run ends with, read from the sim once it is quiet: the workload's Deployments,
//! Foos, Customclusters and Pods, reduced to what the controllers are responsible for
//! (generated names, uids, times and versions differ between runs and are left out).

use super::workload::{CRD_NS, PINNED_NS};
use kubeplug_sim::Sim;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A child (Deployment or Pod) and the parent that controls it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Child {
    /// Namespace and name.
    pub key: String,
    /// The controlling owner reference's kind, name and uid, if any.
    pub owner: Option<(String, String, String)>,
    /// The `controller` label, if any (both plugins label their children).
    pub label: Option<String>,
    /// The comparable part (spec and status fields the controllers set or cause).
    pub view: Value,
}

/// A parent (Foo or Customcluster).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parent {
    /// Its uid (children's owner references name it).
    pub uid: String,
    /// Its spec and status.
    pub view: Value,
}

/// The final objects of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Deployments of both namespaces, by namespace/name.
    pub deployments: BTreeMap<String, Child>,
    /// Foos by name.
    pub foos: BTreeMap<String, Parent>,
    /// Customclusters by name.
    pub clusters: BTreeMap<String, Parent>,
    /// Pods of the custom-resource namespace (not being deleted), by namespace/name.
    pub pods: Vec<Child>,
}

impl Snapshot {
    /// Reads the sim's current objects.
    pub fn read(sim: &Sim) -> Self {
        let deployments = [PINNED_NS, CRD_NS]
            .iter()
            .flat_map(|ns| sim.list("deployments", Some(ns)))
            .map(|d| {
                let child = child(&d, deployment_view(&d));
                (child.key.clone(), child)
            })
            .collect();
        let pods = sim
            .list("pods", Some(CRD_NS))
            .iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
            .map(|p| child(p, pod_view(p)))
            .collect();
        Snapshot {
            deployments,
            foos: parents(sim, "foos"),
            clusters: parents(sim, "customclusters"),
            pods,
        }
    }

    /// The comparable form: every object's view, the Pods grouped by owner (their names are
    /// generated) and sorted.
    pub fn comparable(&self) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        for (key, d) in &self.deployments {
            let owner = d.owner.as_ref().map(|(k, n, _)| format!("{k}/{n}"));
            out.insert(
                format!("Deployment {key}"),
                json!({"owner": owner, "label": d.label, "view": d.view}),
            );
        }
        for (name, parent) in &self.foos {
            out.insert(format!("Foo {CRD_NS}/{name}"), parent.view.clone());
        }
        for (name, cc) in &self.clusters {
            out.insert(format!("Customcluster {CRD_NS}/{name}"), cc.view.clone());
        }
        let mut pods: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for pod in &self.pods {
            let owner = pod
                .owner
                .as_ref()
                .map_or("no owner".to_string(), |(k, n, _)| {
                    format!("{k} {CRD_NS}/{n}")
                });
            pods.entry(owner).or_default().push(pod.view.clone());
        }
        for (owner, mut views) in pods {
            views.sort_by_key(Value::to_string);
            out.insert(format!("Pods of {owner}"), Value::Array(views));
        }
        out
    }
}

fn parents(sim: &Sim, resource: &str) -> BTreeMap<String, Parent> {
    sim.list(resource, Some(CRD_NS))
        .into_iter()
        .map(|o| {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let parent = Parent {
                uid: o["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                view: json!({"spec": o["spec"], "status": o["status"]}),
            };
            (name, parent)
        })
        .collect()
}

fn child(object: &Value, view: Value) -> Child {
    let meta = &object["metadata"];
    let owner = meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["controller"] == true)
        .map(|r| {
            let s = |f: &str| r[f].as_str().unwrap_or_default().to_string();
            (s("kind"), s("name"), s("uid"))
        });
    Child {
        key: format!(
            "{}/{}",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default()
        ),
        owner,
        label: meta["labels"]["controller"].as_str().map(str::to_string),
        view,
    }
}

fn deployment_view(d: &Value) -> Value {
    let containers: Vec<Value> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"name": c["name"], "image": c["image"]}))
        .collect();
    let status = &d["status"];
    json!({
        "replicas": d["spec"]["replicas"],
        "containers": containers,
        "status": {
            "replicas": status["replicas"],
            "updatedReplicas": status["updatedReplicas"],
            "readyReplicas": status["readyReplicas"],
            "availableReplicas": status["availableReplicas"],
        },
    })
}

/// A Pod's message (customcluster's `MESSAGE`) and phase.
fn pod_view(p: &Value) -> Value {
    let message = p["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "MESSAGE")
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null);
    json!({"message": message, "phase": p["status"]["phase"]})
}
