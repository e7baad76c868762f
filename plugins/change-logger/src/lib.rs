//! change-logger: reports what changed in each Deployment.
//!
//! The Deployment change logger kubeplug grew from, as a plugin. It asks the host for the
//! version it last saw, and for each change returns a log line (which the host streams to
//! live viewers) and a Kubernetes Event:
//! `Deployment <name> updated - Replicas changed: <old> -> <new>`,
//! `Deployment <name> updated - Image changed: <old> -> <new>`,
//! `Deployment <ns>/<name> has been deleted`, and a line when it first sees a Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use kubeplug_sdk::{Action, Error, EventType, Metadata, Reconciler, Request};

/// The change-logger reconciler.
pub struct ChangeLogger;

/// What the logger compares between two versions of a Deployment.
#[derive(Debug, PartialEq)]
struct Summary {
    replicas: i32,
    /// (container name, image), in spec order.
    images: Vec<(String, String)>,
}

impl Summary {
    fn of(d: &Deployment) -> Self {
        let spec = d.spec.as_ref();
        let images = spec
            .and_then(|s| s.template.spec.as_ref())
            .map(|p| {
                p.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        Summary {
            // The API server defaults an absent replicas field to 1.
            replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
            images,
        }
    }
}

impl Reconciler for ChangeLogger {
    fn metadata() -> Metadata {
        Metadata::new("change-logger", env!("CARGO_PKG_VERSION")).wants_previous()
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let target = &req.target;
        let name = &target.name;
        let Some(current) = req.object::<Deployment>()? else {
            let message = format!("Deployment {} has been deleted", req.key());
            return Ok(vec![
                Action::info(&message),
                Action::event(target, EventType::Normal, "Deleted", message),
            ]);
        };
        let now = Summary::of(&current);
        let Some(previous) = req.previous::<Deployment>()? else {
            let images: Vec<_> = now.images.iter().map(|(_, i)| i.as_str()).collect();
            let message = format!(
                "Deployment {name} added - Replicas: {}, Image: {}",
                now.replicas,
                images.join(", ")
            );
            return Ok(vec![
                Action::info(&message),
                Action::event(target, EventType::Normal, "Added", message),
            ]);
        };
        let before = Summary::of(&previous);
        let mut changes = Vec::new();
        if before.replicas != now.replicas {
            changes.push((
                "ReplicasChanged",
                format!("Replicas changed: {} -> {}", before.replicas, now.replicas),
            ));
        }
        let many = now.images.len() > 1;
        for (container, image) in &now.images {
            let old = before.images.iter().find(|(c, _)| c == container);
            if let Some((_, old_image)) = old.filter(|(_, i)| i != image) {
                let which = if many {
                    format!(" (container {container})")
                } else {
                    String::new()
                };
                changes.push((
                    "ImageChanged",
                    format!("Image changed: {old_image} -> {image}{which}"),
                ));
            }
        }
        Ok(changes
            .into_iter()
            .flat_map(|(reason, what)| {
                let message = format!("Deployment {name} updated - {what}");
                [
                    Action::info(&message),
                    Action::event(target, EventType::Normal, reason, message),
                ]
            })
            .collect())
    }
}

kubeplug_sdk::export!(ChangeLogger);

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_sdk::{ObjectRef, Reason};
    use serde_json::json;

    fn deploy(replicas: i32, image: &str) -> String {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": replicas, "selector": {},
                     "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
        })
        .to_string()
    }

    fn run(object: Option<String>, previous: Option<String>) -> Vec<String> {
        let req = Request {
            target: ObjectRef::new::<Deployment>(Some("shop"), "web"),
            object,
            previous,
            reason: Reason::Changed,
            attempt: 1,
            config: None,
        };
        ChangeLogger::reconcile(req)
            .unwrap()
            .into_iter()
            .filter_map(|a| match a {
                Action::Log(l) => Some(l.message),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn logs_replica_changes_with_both_numbers() {
        let lines = run(Some(deploy(3, "nginx")), Some(deploy(1, "nginx")));
        assert_eq!(lines, ["Deployment web updated - Replicas changed: 1 -> 3"]);
    }

    #[test]
    fn logs_image_changes() {
        let lines = run(Some(deploy(1, "nginx:1.13")), Some(deploy(1, "alpine")));
        assert_eq!(
            lines,
            ["Deployment web updated - Image changed: alpine -> nginx:1.13"]
        );
    }

    #[test]
    fn logs_additions_and_deletions() {
        assert_eq!(
            run(Some(deploy(2, "alpine")), None),
            ["Deployment web added - Replicas: 2, Image: alpine"]
        );
        assert_eq!(
            run(None, Some(deploy(2, "alpine"))),
            ["Deployment shop/web has been deleted"]
        );
    }

    #[test]
    fn says_nothing_when_nothing_it_tracks_changed() {
        assert!(run(Some(deploy(2, "alpine")), Some(deploy(2, "alpine"))).is_empty());
    }

    #[test]
    fn every_log_line_comes_with_an_event() {
        let req = Request {
            target: ObjectRef::new::<Deployment>(Some("shop"), "web"),
            object: Some(deploy(3, "b")),
            previous: Some(deploy(1, "a")),
            reason: Reason::Changed,
            attempt: 1,
            config: None,
        };
        let actions = ChangeLogger::reconcile(req).unwrap();
        let reasons: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Event(e) => Some(e.reason.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasons, ["ReplicasChanged", "ImageChanged"]);
    }
}
