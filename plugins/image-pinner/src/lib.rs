//! image-pinner: keeps Deployment container images at a configured target.
//!
//! The image-rewrite controller kubeplug grew from, as a plugin: when a matching container's
//! image differs from the target (default `nginx:1.13`), return one strategic merge patch that
//! sets it; when nothing differs, return nothing, so the plugin never loops on its own write.
//!
//! Configuration (all optional): `{"image": "nginx:1.13", "containers": ["web"],
//! "imagePrefixes": ["alpine", "busybox"]}` — a container matches when its name is listed (or
//! the list is empty) and its image starts with a listed prefix (or that list is empty).

use kubeplug_sdk::{Action, Error, Metadata, Reconciler, Request};
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;

/// The plugin's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The image every matching container must run.
    pub image: String,
    /// Container names to manage; empty means all.
    pub containers: Vec<String>,
    /// Only rewrite images starting with one of these; empty means any image.
    pub image_prefixes: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            image: "nginx:1.13".to_string(),
            containers: Vec::new(),
            image_prefixes: Vec::new(),
        }
    }
}

impl Config {
    fn matches(&self, name: &str, image: &str) -> bool {
        (self.containers.is_empty() || self.containers.iter().any(|c| c == name))
            && (self.image_prefixes.is_empty()
                || self
                    .image_prefixes
                    .iter()
                    .any(|p| image.starts_with(p.as_str())))
    }
}

/// The part of a Deployment image-pinner reads. Parsing only this (borrowing the strings)
/// skips the rest of the object instead of building all of it as a k8s-openapi `Deployment`.
#[derive(Deserialize)]
struct DeploymentView<'a> {
    #[serde(borrow)]
    spec: Option<Spec<'a>>,
}

#[derive(Deserialize)]
struct Spec<'a> {
    #[serde(borrow)]
    template: Template<'a>,
}

#[derive(Deserialize)]
struct Template<'a> {
    #[serde(borrow)]
    spec: Option<PodSpec<'a>>,
}

#[derive(Deserialize)]
struct PodSpec<'a> {
    #[serde(borrow)]
    containers: Vec<Container<'a>>,
}

#[derive(Deserialize)]
struct Container<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    image: Cow<'a, str>,
}

/// The image-pinner reconciler.
pub struct ImagePinner;

impl Reconciler for ImagePinner {
    fn metadata() -> Metadata {
        Metadata::new("image-pinner", env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let config: Config = req.config()?;
        let Some(deploy) = req.object_view::<DeploymentView>()? else {
            return Ok(Vec::new());
        };
        let containers = deploy
            .spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers)
            .unwrap_or_default();
        let mut changes = Vec::new();
        let mut fixes = Vec::new();
        for c in &containers {
            let image = &*c.image;
            if image != config.image && config.matches(&c.name, image) {
                changes.push(format!("{}: {image} -> {}", c.name, config.image));
                fixes.push(json!({"name": c.name, "image": config.image}));
            }
        }
        if fixes.is_empty() {
            return Ok(Vec::new());
        }
        let body = json!({"spec": {"template": {"spec": {"containers": fixes}}}});
        Ok(vec![
            Action::strategic_patch(&req.target, body),
            Action::info(format!(
                "pinning images of {}: {}",
                req.key(),
                changes.join(", ")
            )),
        ])
    }
}

kubeplug_sdk::export!(ImagePinner);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kubeplug_sdk::{ObjectRef, PatchType, Reason};

    fn request(images: &[(&str, &str)], config: Option<&str>) -> Request {
        let containers: Vec<_> = images
            .iter()
            .map(|(n, i)| json!({"name": n, "image": i}))
            .collect();
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {}, "template": {"spec": {"containers": containers}}}
        });
        Request {
            target: ObjectRef::new::<Deployment>(Some("default"), "web"),
            object: Some(object.to_string()),
            previous: None,
            reason: Reason::Changed,
            attempt: 1,
            config: config.map(str::to_string),
        }
    }

    fn patch_body(actions: &[Action]) -> serde_json::Value {
        let patches: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Patch(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(patches.len(), 1, "exactly one patch");
        assert_eq!(patches[0].patch_type, PatchType::Strategic);
        serde_json::from_str(&patches[0].body).unwrap()
    }

    #[test]
    fn rewrites_a_differing_image_to_the_default_target() {
        let actions = ImagePinner::reconcile(request(&[("app", "alpine")], None)).unwrap();
        let body = patch_body(&actions);
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:1.13"}])
        );
    }

    #[test]
    fn returns_nothing_when_already_pinned() {
        let actions = ImagePinner::reconcile(request(&[("app", "nginx:1.13")], None)).unwrap();
        assert!(actions.is_empty());
    }

    #[test]
    fn only_touches_matching_containers() {
        let config =
            r#"{"image": "nginx:1.25", "containers": ["web"], "imagePrefixes": ["alpine"]}"#;
        let images = [
            ("web", "alpine:3"),
            ("sidecar", "alpine:3"),
            ("web2", "busybox"),
        ];
        let actions = ImagePinner::reconcile(request(&images, Some(config))).unwrap();
        let body = patch_body(&actions);
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:1.25"}])
        );
        let images = [("web", "busybox")];
        assert!(
            ImagePinner::reconcile(request(&images, Some(config)))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn reads_escaped_strings_and_containers_without_an_image() {
        let mut req = request(&[], None);
        req.object = Some(
            r#"{"spec": {"template": {"spec": {"containers": [
                {"name": "w\u0065b", "image": "alp\u0069ne"}, {"name": "bare"}]}}}}"#
                .into(),
        );
        let body = patch_body(&ImagePinner::reconcile(req).unwrap());
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:1.13"}, {"name": "bare", "image": "nginx:1.13"}])
        );
    }

    #[test]
    fn deleted_objects_need_nothing() {
        let mut req = request(&[], None);
        req.object = None;
        assert!(ImagePinner::reconcile(req).unwrap().is_empty());
    }

    #[test]
    fn a_bad_configuration_is_a_permanent_error() {
        let err = ImagePinner::reconcile(request(&[("a", "b")], Some(r#"{"imag": 1}"#)));
        assert!(matches!(err, Err(Error::Permanent(m)) if m.contains("configuration")));
    }
}
