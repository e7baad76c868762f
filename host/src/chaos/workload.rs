//! The workload: the objects a run starts with and a writer that changes their specs at a
//! steady pace (Deployment images, Foo replicas and Deployment names, Customcluster counts
//! and messages), drawn from the seed alone, so every schedule of a seed and its fault-free
//! run see the same writes in the same order.

use super::rng::Rng;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The namespace of the Deployments image-pinner pins (one of its sample policy's).
pub const PINNED_NS: &str = "demo";
/// The namespace of the Foos and Customclusters (their sample policies').
pub const CRD_NS: &str = "crd-demo";
/// The image image-pinner's sample policy pins.
pub const PINNED_IMAGE: &str = "nginx:1.13";

const DEPLOYMENTS: usize = 3;
const FOOS: usize = 2;
const CLUSTERS: usize = 2;
/// Time between two writes.
const PACE: Duration = Duration::from_millis(150);

/// One change of a spec.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A demo Deployment's container image (image-pinner sets it back).
    Image {
        /// Its name.
        deployment: String,
        /// The new image.
        image: String,
    },
    /// A Foo's replicas.
    FooReplicas {
        /// Its name.
        name: String,
        /// The new replicas.
        replicas: i64,
    },
    /// A Foo's Deployment name (sample-controller deletes the old one).
    FooDeployment {
        /// Its name.
        name: String,
        /// The new Deployment name.
        deployment: String,
    },
    /// A Customcluster's Pod count.
    Count {
        /// Its name.
        cluster: String,
        /// The new count.
        count: i64,
    },
    /// A Customcluster's message (its Pods are replaced).
    Message {
        /// Its name.
        cluster: String,
        /// The new message.
        message: String,
    },
}

/// A write of the workload, at an offset from its start.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When, after the workload's start.
    pub at: Duration,
    /// What changes.
    pub change: Change,
}

/// What every key should end as once the controllers have caught up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expected {
    /// Demo Deployments (all pinned to [`PINNED_IMAGE`]).
    pub deployments: Vec<String>,
    /// Foo name → (Deployment name, replicas).
    pub foos: BTreeMap<String, (String, i64)>,
    /// Customcluster name → (count, message).
    pub clusters: BTreeMap<String, (i64, String)>,
}

/// The objects and writes of one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Multi-document YAML the sim starts with.
    pub initial: String,
    /// The writes, in order.
    pub steps: Vec<Step>,
    /// One more change of every object, written once the faults have stopped: a host whose
    /// watches died under the faults misses them (its caches would otherwise look right
    /// whenever the last faulty writes happened to land before they died).
    pub probes: Vec<Change>,
}

fn deployment_name(i: usize) -> String {
    format!("web-{i}")
}

fn foo_name(i: usize) -> String {
    format!("foo-{i}")
}

fn cluster_name(i: usize) -> String {
    format!("cc-{i}")
}

impl Workload {
    /// The workload of `seed`, writing for `window`.
    pub fn generate(seed: u64, window: Duration) -> Self {
        let mut rng = Rng::from_parts(&[seed, 0x00c0_ffee]);
        let mut initial = String::new();
        for i in 0..DEPLOYMENTS {
            let name = deployment_name(i);
            initial.push_str(&format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {PINNED_NS}, labels: {{app: {name}}}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: app, image: 'alpine:3.0'}}]}}\n---\n"
            ));
        }
        for i in 0..FOOS {
            let name = foo_name(i);
            initial.push_str(&format!(
                "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata: {{name: {name}, namespace: {CRD_NS}}}\nspec: {{deploymentName: {name}-a, replicas: 1}}\n---\n"
            ));
        }
        for i in 0..CLUSTERS {
            let name = cluster_name(i);
            initial.push_str(&format!(
                "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Customcluster\nmetadata: {{name: {name}, namespace: {CRD_NS}}}\nspec: {{count: 1, message: m0}}\n---\n"
            ));
        }
        let count = (window.as_millis() / PACE.as_millis()).max(1) as u32;
        let steps = (0..count)
            .map(|n| Step {
                at: PACE * n,
                change: change(&mut rng),
            })
            .collect();
        let mut probes: Vec<Change> = (0..DEPLOYMENTS)
            .map(|i| Change::Image {
                deployment: deployment_name(i),
                image: "alpine:3.99".to_string(),
            })
            .collect();
        for i in 0..FOOS {
            probes.push(Change::FooReplicas {
                name: foo_name(i),
                replicas: rng.range(1, 4) as i64,
            });
        }
        for i in 0..CLUSTERS {
            probes.push(Change::Count {
                cluster: cluster_name(i),
                count: rng.range(1, 4) as i64,
            });
        }
        Workload {
            initial,
            steps,
            probes,
        }
    }

    /// The state every key should reach after the last write.
    pub fn expected(&self) -> Expected {
        let mut expected = Expected {
            deployments: (0..DEPLOYMENTS).map(deployment_name).collect(),
            foos: (0..FOOS)
                .map(|i| (foo_name(i), (format!("{}-a", foo_name(i)), 1)))
                .collect(),
            clusters: (0..CLUSTERS)
                .map(|i| (cluster_name(i), (1, "m0".to_string())))
                .collect(),
        };
        let changes = self.steps.iter().map(|s| &s.change).chain(&self.probes);
        for change in changes {
            match change {
                Change::Image { .. } => {}
                Change::FooReplicas { name, replicas } => {
                    expected.foos.get_mut(name).expect("a workload Foo").1 = *replicas;
                }
                Change::FooDeployment { name, deployment } => {
                    expected.foos.get_mut(name).expect("a workload Foo").0 = deployment.clone();
                }
                Change::Count { cluster, count } => {
                    expected
                        .clusters
                        .get_mut(cluster)
                        .expect("a workload Customcluster")
                        .0 = *count;
                }
                Change::Message { cluster, message } => {
                    expected
                        .clusters
                        .get_mut(cluster)
                        .expect("a workload Customcluster")
                        .1 = message.clone();
                }
            }
        }
        expected
    }
}

fn change(rng: &mut Rng) -> Change {
    match rng.range(0, 9) {
        0..=2 => Change::Image {
            deployment: deployment_name(rng.range(0, DEPLOYMENTS as u64 - 1) as usize),
            image: format!("alpine:3.{}", rng.range(1, 20)),
        },
        3 | 4 => Change::FooReplicas {
            name: foo_name(rng.range(0, FOOS as u64 - 1) as usize),
            replicas: rng.range(1, 4) as i64,
        },
        5 => {
            let name = foo_name(rng.range(0, FOOS as u64 - 1) as usize);
            let suffix = rng.pick(&["a", "b"]);
            Change::FooDeployment {
                deployment: format!("{name}-{suffix}"),
                name,
            }
        }
        6..=8 => Change::Count {
            cluster: cluster_name(rng.range(0, CLUSTERS as u64 - 1) as usize),
            count: rng.range(0, 4) as i64,
        },
        _ => Change::Message {
            cluster: cluster_name(rng.range(0, CLUSTERS as u64 - 1) as usize),
            message: format!("m{}", rng.range(1, 9)),
        },
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Sends one change (retrying a few times on errors: the writer is not under test).
pub async fn apply(client: &kube::Client, change: &Change) -> anyhow::Result<()> {
    let custom = |kind, plural| resource("samplecontroller.k8s.io", "v1alpha1", kind, plural);
    let (ns, resource, name, patch): (&str, ApiResource, &str, Patch<Value>) = match change {
        Change::Image { deployment, image } => (
            PINNED_NS,
            resource("apps", "v1", "Deployment", "deployments"),
            deployment,
            Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}),
            ),
        ),
        Change::FooReplicas { name, replicas } => (
            CRD_NS,
            custom("Foo", "foos"),
            name,
            Patch::Merge(json!({"spec": {"replicas": replicas}})),
        ),
        Change::FooDeployment { name, deployment } => (
            CRD_NS,
            custom("Foo", "foos"),
            name,
            Patch::Merge(json!({"spec": {"deploymentName": deployment}})),
        ),
        Change::Count { cluster, count } => (
            CRD_NS,
            custom("Customcluster", "customclusters"),
            cluster,
            Patch::Merge(json!({"spec": {"count": count}})),
        ),
        Change::Message { cluster, message } => (
            CRD_NS,
            custom("Customcluster", "customclusters"),
            cluster,
            Patch::Merge(json!({"spec": {"message": message}})),
        ),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let mut last = None;
    for _ in 0..5 {
        match api.patch(name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(()),
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(anyhow::anyhow!(
        "the workload could not write {name}: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_workload_and_its_expected_state_follows_the_last_writes() {
        let window = Duration::from_secs(3);
        let w = Workload::generate(1, window);
        assert_eq!(w, Workload::generate(1, window));
        assert_ne!(w.steps, Workload::generate(2, window).steps);
        assert_eq!(w.steps.len(), 20);
        assert_eq!(w.probes.len(), 7);
        let expected = w.expected();
        let last_count = w.steps.iter().rev().find_map(|s| match &s.change {
            Change::Count { cluster, count } if cluster == "cc-0" => Some(*count),
            _ => None,
        });
        assert_eq!(expected.clusters["cc-0"].0, last_count.unwrap_or(1));
        assert_eq!(expected.deployments, ["web-0", "web-1", "web-2"]);
    }
}
