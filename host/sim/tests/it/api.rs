//! End-to-end tests of the embedded API server (`kubeplug_sim`) through a real
//! `kube::Client` over HTTP.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kubeplug_sim::{ErrorFault, Sim};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{api_code, lease, sim};

type Result<T = ()> = anyhow::Result<T>;

const WAIT: Duration = Duration::from_secs(10);

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "app", "image": image, "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "sidecar:1"}]}}}
    }))
    .expect("valid deployment")
}

fn api_reason(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.reason.clone(),
        other => other.to_string(),
    }
}

/// Polls `check` until it returns `Some` or the timeout passes.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plain HTTP/1.1 request (Connection: close) for checks the typed client hides.
async fn raw(
    sim: &Sim,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<(u16, String, String)> {
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        sim.addr(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok((status, head.to_lowercase(), body.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_sets_metadata_and_refuses_duplicates() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    let created = api
        .create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let rv: u64 = meta.resource_version.as_deref().unwrap_or("0").parse()?;
    assert!(rv > 0);
    let err = api
        .create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&err), api_reason(&err).as_str()),
        (Some(409), "AlreadyExists")
    );

    let mut generated = deployment("", 1, "nginx:1");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = api.create(&PostParams::default(), &generated).await?;
    let name = generated.metadata.name.unwrap_or_default();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let leases: Api<Lease> = Api::default_namespaced(sim.client()?);
    let lease = leases
        .create(&PostParams::default(), &lease("l", json!({})))
        .await?;
    let lease_rv: u64 = lease
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()?;
    assert!(lease_rv > rv, "one resourceVersion counter across kinds");

    let err = api.get("missing").await.unwrap_err();
    assert_eq!(api_code(&err), Some(404));
    let missing_ns: Api<Deployment> = Api::namespaced(sim.client()?, "nowhere");
    let err = missing_ns
        .create(&PostParams::default(), &deployment("x", 1, "i"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(404));
    assert!(
        err.to_string().contains("namespaces \"nowhere\" not found"),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_created_namespaces_when_enabled() -> Result {
    let sim = Sim::builder().auto_create_namespaces(true).start().await?;
    let api: Api<Deployment> = Api::namespaced(sim.client()?, "team-a");
    api.create(&PostParams::default(), &deployment("x", 1, "i"))
        .await?;
    assert!(sim.get("namespaces", None, "team-a").is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_resource_version_conflicts() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    let first = api
        .create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let mut a = first.clone();
    a.spec.as_mut().unwrap().replicas = Some(2);
    let updated = api.replace("web", &PostParams::default(), &a).await?;
    assert_eq!(updated.spec.unwrap().replicas, Some(2));
    let mut stale = first;
    stale.spec.as_mut().unwrap().replicas = Some(3);
    let err = api
        .replace("web", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&err), api_reason(&err).as_str()),
        (Some(409), "Conflict")
    );
    assert_eq!(api.get("web").await?.spec.unwrap().replicas, Some(2));
    Ok(())
}

/// The resourceVersion of the stored Deployment `web`.
fn stored_rv(sim: &Sim) -> String {
    let web = sim.get("deployments", Some("default"), "web").unwrap();
    web["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A resourceVersion in a patch body (merge, strategic, a JSON patch op setting it, an apply
/// configuration) or in a delete's preconditions is a precondition, as on a real API server:
/// 409 Conflict when the object has moved on, nothing changed; accepted when it is current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_versions_in_patches_and_deletes_are_preconditions() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .start()
        .await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let stale = stored_rv(&sim);
    let label = |v: &str| json!({"metadata": {"labels": {"step": v}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(label("0")))
        .await?;
    let with_rv = |mut body: Value, rv: &str| {
        body["metadata"]["resourceVersion"] = json!(rv);
        body
    };
    let json_ops = |rv: &str, step: &str| -> json_patch::Patch {
        serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/labels/step", "value": step},
            {"op": "add", "path": "/metadata/resourceVersion", "value": rv}
        ]))
        .unwrap()
    };
    let applied = |rv: &str, step: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": rv, "labels": {"step": step}}})
    };
    let manager = PatchParams::apply("fenced").force();
    for (i, kind) in ["merge", "strategic", "json", "apply"].iter().enumerate() {
        let step = (i + 1).to_string();
        let send = |rv: String| {
            let (api, step, manager) = (api.clone(), step.clone(), manager.clone());
            async move {
                match *kind {
                    "merge" => {
                        let body = Patch::Merge(with_rv(label(&step), &rv));
                        api.patch("web", &PatchParams::default(), &body).await
                    }
                    "strategic" => {
                        let body = Patch::Strategic(with_rv(label(&step), &rv));
                        api.patch("web", &PatchParams::default(), &body).await
                    }
                    "json" => {
                        let body = Patch::Json::<()>(json_ops(&rv, &step));
                        api.patch("web", &PatchParams::default(), &body).await
                    }
                    _ => {
                        api.patch("web", &manager, &Patch::Apply(applied(&rv, &step)))
                            .await
                    }
                }
            }
        };
        let before = sim.get("deployments", Some("default"), "web").unwrap();
        let err = send(stale.clone()).await.unwrap_err();
        assert_eq!(
            (api_code(&err), api_reason(&err).as_str()),
            (Some(409), "Conflict"),
            "{kind}"
        );
        assert!(
            err.to_string().contains("the object has been modified"),
            "{kind}: {err}"
        );
        assert_eq!(
            sim.get("deployments", Some("default"), "web").unwrap(),
            before,
            "{kind}: a refused patch changes nothing"
        );
        let patched = send(stored_rv(&sim)).await?;
        assert_eq!(
            patched.metadata.labels.unwrap().get("step"),
            Some(&step),
            "{kind} on the current version"
        );
        assert_ne!(stored_rv(&sim), before["metadata"]["resourceVersion"]);
    }

    // The status subresource through apply, too.
    let status = |rv: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": rv}, "status": {"replicas": 7}})
    };
    let err = api
        .patch_status("web", &manager, &Patch::Apply(status(&stale)))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    let current = stored_rv(&sim);
    let patched = api
        .patch_status("web", &manager, &Patch::Apply(status(&current)))
        .await?;
    assert_eq!(patched.status.unwrap().replicas, Some(7));

    // An empty resourceVersion is no precondition (an unconditional update).
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(with_rv(label("any"), "")),
    )
    .await?;
    // A JSON patch's failed test op is an invalid patch (422), not a conflict.
    let test: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": stale}
    ]))?;
    let err = api
        .patch("web", &PatchParams::default(), &Patch::Json::<()>(test))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(422));

    let err = api
        .delete(
            "web",
            &DeleteParams::background().preconditions(precondition(&stale)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&err), api_reason(&err).as_str()),
        (Some(409), "Conflict")
    );
    assert!(
        err.to_string()
            .contains("Precondition failed: ResourceVersion in precondition"),
        "{err}"
    );
    assert!(sim.get("deployments", Some("default"), "web").is_some());
    let current = stored_rv(&sim);
    api.delete(
        "web",
        &DeleteParams::background().preconditions(precondition(&current)),
    )
    .await?;
    assert!(sim.get("deployments", Some("default"), "web").is_none());
    Ok(())
}

fn precondition(rv: &str) -> kube::api::Preconditions {
    kube::api::Preconditions {
        resource_version: Some(rv.to_string()),
        uid: None,
    }
}

/// A held write waits until released; a change made meanwhile makes it conflict when it
/// carries the version it was decided on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_lands_after_the_release() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .start()
        .await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let decided_on = stored_rv(&sim);
    sim.faults()
        .hold(kubeplug_sim::HoldFault::writes(["patch"], ["deployments"]));
    let write = tokio::spawn({
        let api = api.clone();
        let body = json!({"metadata": {"resourceVersion": decided_on, "labels": {"late": "yes"}}});
        async move {
            api.patch("web", &PatchParams::default(), &Patch::Merge(body))
                .await
        }
    });
    eventually("the write held", || async {
        (sim.faults().held() == 1).then_some(())
    })
    .await?;
    assert_eq!(sim.faults().state().held, 1);
    // Another client's change meanwhile (not through HTTP: not held).
    sim.apply_yaml(
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web, other: client}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: 'nginx:1'}]}",
    )?;
    assert!(!write.is_finished());
    sim.faults().release();
    let err = write.await?.unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    assert_eq!(sim.faults().held(), 0);
    let web = sim.get("deployments", Some("default"), "web").unwrap();
    assert_eq!(web["metadata"]["labels"]["other"], "client");
    assert!(web["metadata"]["labels"].get("late").is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_bumps_on_spec_changes_only() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .start()
        .await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await?;
    assert_eq!(labelled.metadata.generation, Some(1));
    let status = api
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"replicas": 7}})),
        )
        .await?;
    assert_eq!(status.metadata.generation, Some(1));
    let spec = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await?;
    assert_eq!(spec.metadata.generation, Some(2));
    let same = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await?;
    assert_eq!(same.metadata.generation, Some(2));
    assert_eq!(
        same.metadata.resource_version, spec.metadata.resource_version,
        "no-op patch writes nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_spec_are_separate() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .start()
        .await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    let mut d = deployment("web", 1, "nginx:1");
    d.status = Some(serde_json::from_value(json!({"replicas": 9}))?);
    let created = api.create(&PostParams::default(), &d).await?;
    assert!(
        created.status.is_none_or(|s| s.replicas.is_none()),
        "status dropped on create"
    );

    let mut status_write = api.get("web").await?;
    status_write.spec.as_mut().unwrap().replicas = Some(5);
    status_write.status = Some(serde_json::from_value(json!({"replicas": 3}))?);
    let after = api
        .replace_status("web", &PostParams::default(), &status_write)
        .await?;
    assert_eq!(
        after.spec.as_ref().unwrap().replicas,
        Some(1),
        "spec ignored on status write"
    );
    assert_eq!(after.status.as_ref().unwrap().replicas, Some(3));

    let mut main_write = after;
    main_write.spec.as_mut().unwrap().replicas = Some(2);
    main_write.status = Some(serde_json::from_value(json!({"replicas": 100}))?);
    let after = api
        .replace("web", &PostParams::default(), &main_write)
        .await?;
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        after.status.as_ref().unwrap().replicas,
        Some(3),
        "status ignored on main write"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_delay_deletion() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    let mut l = lease("held", json!({}));
    l.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    api.create(&PostParams::default(), &l).await?;
    api.delete("held", &DeleteParams::default()).await?;
    let still = api.get("held").await?;
    assert!(still.metadata.deletion_timestamp.is_some());
    let err = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep", "new"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(403));
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    assert!(
        api.get_opt("held").await?.is_none(),
        "removed when the last finalizer goes"
    );
    Ok(())
}

fn owned_pod(name: &str, owner: &Deployment) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
            "name": owner.metadata.name, "uid": owner.metadata.uid}]},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("valid pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_and_orphaning() -> Result {
    let sim = sim().await?;
    let client = sim.client()?;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    let owner = deployments
        .create(&PostParams::default(), &deployment("owner", 1, "i"))
        .await?;
    pods.create(&PostParams::default(), &owned_pod("child", &owner))
        .await?;
    deployments
        .delete("owner", &DeleteParams::background())
        .await?;
    eventually("child collected", || async {
        pods.get_opt("child")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await?;

    let owner = deployments
        .create(&PostParams::default(), &deployment("owner2", 1, "i"))
        .await?;
    pods.create(&PostParams::default(), &owned_pod("orphan", &owner))
        .await?;
    deployments
        .delete("owner2", &DeleteParams::orphan())
        .await?;
    assert!(deployments.get_opt("owner2").await?.is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let orphan = pods.get("orphan").await?;
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_deletes_its_objects() -> Result {
    let sim = sim().await?;
    let client = sim.client()?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?,
        )
        .await?;
    let leases: Api<Lease> = Api::namespaced(client, "doomed");
    leases
        .create(&PostParams::default(), &lease("a", json!({})))
        .await?;
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await?;
    eventually("namespace gone", || async {
        namespaces
            .get_opt("doomed")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await?;
    assert_eq!(sim.count("leases", Some("doomed")), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_with_limit_and_continue() -> Result {
    let sim = Sim::builder().history(30).start().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    for i in 0..25 {
        api.create(
            &PostParams::default(),
            &lease(&format!("l{i:02}"), json!({})),
        )
        .await?;
    }
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(10);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await?;
        pages += 1;
        names.extend(page.items.iter().filter_map(|l| l.metadata.name.clone()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 25);
    assert!(names.windows(2).all(|w| w[0] < w[1]));

    let first = api.list(&ListParams::default().limit(5)).await?;
    let token = first.metadata.continue_.unwrap();
    for i in 0..40 {
        api.patch(
            "l00",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"leaseTransitions": i}})),
        )
        .await?;
    }
    let err = api
        .list(&ListParams::default().limit(5).continue_token(&token))
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&err), api_reason(&err).as_str()),
        (Some(410), "Expired")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_field_selectors() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    api.create(
        &PostParams::default(),
        &lease("a", json!({"app": "web", "tier": "front"})),
    )
    .await?;
    api.create(&PostParams::default(), &lease("b", json!({"app": "api"})))
        .await?;
    api.create(&PostParams::default(), &lease("c", json!({})))
        .await?;
    let names = |selector: &'static str, fields: bool| {
        let api = api.clone();
        async move {
            let lp = if fields {
                ListParams::default().fields(selector)
            } else {
                ListParams::default().labels(selector)
            };
            let list = api.list(&lp).await.expect("list");
            list.items
                .into_iter()
                .filter_map(|l| l.metadata.name)
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    assert_eq!(names("app=web", false).await, "a");
    assert_eq!(names("app==api", false).await, "b");
    assert_eq!(names("app!=web", false).await, "b,c");
    assert_eq!(names("app in (web,api)", false).await, "a,b");
    assert_eq!(names("app notin (web)", false).await, "b,c");
    assert_eq!(names("tier", false).await, "a");
    assert_eq!(names("!app", false).await, "c");
    assert_eq!(names("metadata.name=b", true).await, "b");
    assert_eq!(
        names("metadata.name!=b,metadata.namespace=default", true).await,
        "a,c"
    );
    let err = api
        .list(&ListParams::default().fields("spec.holderIdentity=a"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(400));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_from_resource_version_and_expires() -> Result {
    let sim = Sim::builder().history(20).start().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    let first = api
        .create(&PostParams::default(), &lease("w", json!({})))
        .await?;
    let rv = first.metadata.resource_version.clone().unwrap();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"leaseTransitions": 1}})),
    )
    .await?;
    api.delete("w", &DeleteParams::default()).await?;
    let stream = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await?;
    let events: Vec<_> = stream.try_collect().await?;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Added(_) => "ADDED",
            _ => "OTHER",
        })
        .collect();
    assert_eq!(
        kinds,
        vec!["MODIFIED", "DELETED"],
        "replayed after rv, then ended at timeoutSeconds"
    );

    for i in 0..30 {
        api.create(&PostParams::default(), &lease(&format!("n{i}"), json!({})))
            .await?;
    }
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    match stream.try_next().await? {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => anyhow::bail!("expected a 410 ERROR event, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_bookmarks_and_selector_transitions() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &lease("x", json!({"app": "a"})))
        .await?;
    let rv = sim.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=a"), &rv)
        .await?
        .boxed();
    match tokio::time::timeout(WAIT, stream.try_next()).await?? {
        Some(WatchEvent::Bookmark(b)) => assert_eq!(b.metadata.resource_version, rv),
        other => anyhow::bail!("expected a bookmark, got {other:?}"),
    }
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "b"}}})),
    )
    .await?;
    loop {
        match tokio::time::timeout(WAIT, stream.try_next()).await?? {
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(WatchEvent::Deleted(l)) => {
                assert_eq!(l.metadata.name.as_deref(), Some("x"));
                break;
            }
            other => {
                anyhow::bail!("expected DELETED for an object leaving the selector, got {other:?}")
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_with_initial_events_ends_them_with_a_bookmark() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &lease("a", json!({})))
        .await?;
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "")
        .await?
        .boxed();
    assert!(matches!(
        stream.try_next().await?,
        Some(WatchEvent::Added(_))
    ));
    match stream.try_next().await? {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            )
        }
        other => anyhow::bail!("expected the initial-events-end bookmark, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_watcher_sees_changes_cluster_wide() -> Result {
    let sim = sim().await?;
    let client = sim.client()?;
    let all: Api<Deployment> = Api::all(client.clone());
    let mut events = watcher(all, watcher::Config::default()).boxed();
    let api: Api<Deployment> = Api::default_namespaced(client);
    let mut seen_init_done = false;
    while !seen_init_done {
        if let Some(watcher::Event::InitDone) =
            tokio::time::timeout(WAIT, events.try_next()).await??
        {
            seen_init_done = true;
        }
    }
    api.create(&PostParams::default(), &deployment("watched", 1, "i"))
        .await?;
    loop {
        if let Some(watcher::Event::Apply(d)) =
            tokio::time::timeout(WAIT, events.try_next()).await??
            && d.metadata.name.as_deref() == Some("watched")
        {
            break;
        }
    }

    // Dropped watches and a forced 410 make the watcher re-watch and relist; it keeps
    // delivering changes.
    let requests = |verb: &str| {
        sim.requests()
            .records()
            .iter()
            .filter(|r| r.verb == verb)
            .count()
    };
    sim.faults().drop_watches();
    sim.faults().gone_next_watches(1);
    // The watcher re-watches only while polled; the change is made once it has, so it cannot
    // slip out through the dropped watch before the drop takes effect.
    let start = Instant::now();
    while requests("watch") < 2 {
        assert!(start.elapsed() < WAIT, "the watcher never re-watched");
        let polled = tokio::time::timeout(Duration::from_millis(50), events.next()).await;
        if let Ok(None) = polled {
            anyhow::bail!("watcher stream ended");
        }
    }
    api.create(&PostParams::default(), &deployment("after-faults", 1, "i"))
        .await?;
    loop {
        match tokio::time::timeout(WAIT, events.next()).await? {
            Some(Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)))
                if d.metadata.name.as_deref() == Some("after-faults") =>
            {
                break;
            }
            Some(_) => continue,
            None => anyhow::bail!("watcher stream ended"),
        }
    }
    // The re-watch got the 410: the change came through a relist or the watch after it.
    let lists = requests("list");
    assert!(lists >= 2, "the watcher relisted ({lists} lists)");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_and_json_patches() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let pp = PatchParams::default();
    let merged = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await?;
    assert_eq!(
        merged
            .metadata
            .annotations
            .unwrap()
            .get("a")
            .map(String::as_str),
        Some("b")
    );

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copied"},
        {"op": "move", "from": "/metadata/labels/copied", "path": "/metadata/labels/moved"},
        {"op": "replace", "path": "/spec/replicas", "value": 3}
    ]))?;
    let patched = api.patch("web", &pp, &Patch::Json::<()>(ops)).await?;
    assert_eq!(patched.spec.unwrap().replicas, Some(3));
    let labels = patched.metadata.labels.unwrap();
    assert_eq!(labels.get("moved").map(String::as_str), Some("web"));
    assert!(!labels.contains_key("copied"));

    let before = sim.get("deployments", Some("default"), "web").unwrap();
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 9},
        {"op": "test", "path": "/spec/replicas", "value": 1}
    ]))?;
    let err = api
        .patch("web", &pp, &Patch::Json::<()>(failing))
        .await
        .unwrap_err();
    assert_eq!(
        (api_code(&err), api_reason(&err).as_str()),
        (Some(422), "Invalid")
    );
    assert_eq!(
        sim.get("deployments", Some("default"), "web").unwrap(),
        before,
        "failed patch leaves state alone"
    );

    let err = api
        .patch("missing", &pp, &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(404));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_uses_list_keys() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await?;
    let pp = PatchParams::default();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]}]}}}});
    let patched = api.patch("web", &pp, &Patch::Strategic(patch)).await?;
    let containers = patched.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 2, "merged by name, sidecar kept");
    assert_eq!(containers[0].image.as_deref(), Some("nginx:2"));
    assert_eq!(
        containers[0].env.as_ref().unwrap().len(),
        2,
        "env merged by name"
    );

    let delete = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}});
    let patched = api.patch("web", &pp, &Patch::Strategic(delete)).await?;
    let containers = patched.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(
        containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["app"]
    );

    let err = api
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"$patch": "explode"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(400));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_tracks_owners() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    let config = |replicas: i64, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": image}]}}}})
    };
    let created = api
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(config(1, "a:1")),
        )
        .await?;
    assert_eq!(
        created.metadata.generation,
        Some(1),
        "apply creates the object"
    );
    let managers: Vec<String> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["alice".to_string()]);

    let err = api
        .patch(
            "web",
            &PatchParams::apply("bob"),
            &Patch::Apply(config(3, "a:1")),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    assert!(err.to_string().contains("conflict with \"alice\""), "{err}");
    assert!(err.to_string().contains(".spec.replicas"), "{err}");

    let forced = api
        .patch(
            "web",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(config(3, "a:1")),
        )
        .await?;
    assert_eq!(forced.spec.unwrap().replicas, Some(3));

    let err = api
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(config(1, "a:1")),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("conflict with \"bob\""),
        "ownership moved to bob: {err}"
    );

    let err = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Apply(config(1, "a:1")),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(422), "fieldManager required");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_subresource() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 2, "i"))
        .await?;
    let scale = api.get_scale("web").await?;
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await?;
    assert_eq!(api.get("web").await?.spec.unwrap().replicas, Some(4));
    let mut scale = api.get_scale("web").await?;
    scale.spec.as_mut().unwrap().replicas = Some(6);
    let replaced = api
        .replace_scale("web", &PostParams::default(), &scale)
        .await?;
    assert_eq!(replaced.spec.unwrap().replicas, Some(6));
    let err = api
        .replace_scale("web", &PostParams::default(), &scale)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409), "stale Scale resourceVersion");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_become_running_and_ready_after_the_status_delay() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(500))
        .start()
        .await?;
    let api: Api<Pod> = Api::default_namespaced(sim.client()?);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "busybox"}]}}))?;
    api.create(&PostParams::default(), &pod).await?;
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    assert_ne!(
        phase(&api.get("p").await?).as_deref(),
        Some("Running"),
        "not before the delay"
    );
    let status = eventually("Pod running", || async {
        let p = api.get("p").await.ok()?;
        (phase(&p).as_deref() == Some("Running")).then_some(p.status?)
    })
    .await?;
    let conditions = status.conditions.unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    let containers = status.container_statuses.unwrap_or_default();
    assert_eq!(containers.len(), 2);
    assert!(
        containers
            .iter()
            .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
    );
    // The simulated kubelet writes through the status subresource under its own manager.
    let stored = sim.get("pods", None, "p").unwrap();
    let managers: Vec<_> = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or("").to_string(),
                m["subresource"].clone(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kubelet".to_string(), json!("status"))),
        "{managers:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_status_reaches_readiness() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_millis(1000))
        .start()
        .await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 3, "i"))
        .await?;
    let immediately = api.get("web").await?;
    assert!(
        immediately
            .status
            .is_none_or(|s| s.available_replicas.is_none()),
        "not ready before the delay"
    );
    let ready = eventually("deployment available", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status.clone()?;
        (s.available_replicas == Some(3) && s.observed_generation == d.metadata.generation)
            .then_some(s)
    })
    .await?;
    assert_eq!(ready.ready_replicas, Some(3));
    assert_eq!(ready.updated_replicas, Some(3));
    let conditions = ready.conditions.unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
    );
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Progressing" && c.status == "True")
    );

    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await?;
    eventually("rescaled", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status?;
        (s.available_replicas == Some(5) && s.observed_generation == Some(2)).then_some(())
    })
    .await?;
    Ok(())
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_kinds_from_crd_yaml() -> Result {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("crd.yaml");
    std::fs::write(&path, CRD)?;
    let sim = Sim::builder().crd_file(&path).start().await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client()?, "default", &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}, "status": {"ok": true}
    }))?;
    let created = api.create(&PostParams::default(), &widget).await?;
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status subresource: status dropped on create"
    );
    let status = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": true}, "spec": {"size": 9}})),
        )
        .await?;
    assert_eq!(status.data["status"]["ok"], true);
    assert_eq!(status.data["spec"]["size"], 1);
    let listed = api.list(&ListParams::default()).await?;
    assert_eq!(listed.items.len(), 1);
    let err = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_code(&err),
        Some(415),
        "no strategic merge patch for custom kinds"
    );
    assert!(
        sim.get("customresourcedefinitions", None, "widgets.example.com")
            .is_some()
    );
    let (code, _, body) = raw(&sim, "GET", "/apis/example.com/v1", "application/json", "").await?;
    assert_eq!(code, 200);
    assert!(body.contains("widgets/status"), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_load_at_start_and_from_yaml() -> Result {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("crd.yaml"), CRD)?;
    std::fs::write(
        dir.path().join("objects.yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: from-dir, namespace: team}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d1}\nspec: {replicas: 2, selector: {matchLabels: {app: d1}}, template: {metadata: {labels: {app: d1}}, spec: {containers: [{name: c, image: i}]}}}\n",
    )?;
    std::fs::write(dir.path().join("ignored.txt"), "not yaml: [")?;
    let sim = Sim::builder()
        .load_dir(dir.path())
        .manifest("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: seeded}\n")
        .start()
        .await?;
    assert!(sim.get("widgets", Some("team"), "from-dir").is_some());
    assert!(sim.get("deployments", Some("default"), "d1").is_some());
    assert!(sim.get("leases", None, "seeded").is_some());
    assert!(sim.get("namespaces", None, "kube-system").is_some());
    let seeded = sim.apply_yaml("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d2, namespace: extra}\nspec: {replicas: 1}\n")?;
    assert_eq!(seeded.len(), 1);
    let api: Api<Deployment> = Api::namespaced(sim.client()?, "extra");
    assert_eq!(api.get("d2").await?.spec.unwrap().replicas, Some(1));
    assert!(
        Sim::builder()
            .manifest("kind: Nope\napiVersion: v9\nmetadata: {name: x}\n")
            .start()
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_drop_watches_ends_open_watches() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    let rv = sim.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    sim.faults().drop_watches();
    let next = tokio::time::timeout(WAIT, stream.try_next()).await??;
    assert!(next.is_none(), "stream ended, got {next:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_gone_on_next_watches() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    let rv = sim.resource_version().to_string();
    sim.faults().gone_next_watches(1);
    let mut stream = api.watch(&WatchParams::default(), &rv).await?.boxed();
    assert!(matches!(stream.try_next().await?, Some(WatchEvent::Error(s)) if s.code == 410));
    let mut stream = api
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv)
        .await?
        .boxed();
    assert!(
        stream.try_next().await?.is_none(),
        "only the next watch failed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_errors_every_nth_and_by_verb() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    sim.faults().inject_errors(
        ErrorFault::every_nth(500, 2)
            .verbs(["list"])
            .resources(["leases"]),
    );
    let results: Vec<bool> = futures::future::join_all(
        (0..4).map(|_| async { api.list(&ListParams::default()).await.is_ok() }),
    )
    .await;
    assert_eq!(results.iter().filter(|ok| !**ok).count(), 2);
    assert!(api.get_opt("nothing").await.is_ok(), "get not affected");
    sim.faults().clear_errors();
    assert!(api.list(&ListParams::default()).await.is_ok());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_429_carries_retry_after_and_kube_retries() -> Result {
    let sim = sim().await?;
    sim.faults()
        .inject_errors(ErrorFault::every_nth(429, 1).retry_after(2).times(1));
    let (code, head, body) = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 429);
    assert!(head.contains("retry-after: 2"), "{head}");
    assert!(body.contains("\"reason\":\"TooManyRequests\""), "{body}");

    sim.faults()
        .inject_errors(ErrorFault::ratio(503, 1.0, 7).times(1));
    let pods: Api<Pod> = Api::default_namespaced(sim.client()?);
    let cursor = sim.requests().cursor();
    pods.list(&ListParams::default()).await?;
    let statuses: Vec<u16> = sim
        .requests()
        .since(cursor)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![503, 200], "kube retried the injected 503");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_conflicts_and_latency() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &lease("c", json!({})))
        .await?;
    sim.faults().conflict_next_writes(1);
    let patch = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    let err = api
        .patch("c", &PatchParams::default(), &patch)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409));
    api.patch("c", &PatchParams::default(), &patch).await?;

    sim.faults().set_latency(Duration::from_millis(150));
    let start = Instant::now();
    api.get("c").await?;
    assert!(start.elapsed() >= Duration::from_millis(150));
    sim.faults().reset();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_admin_endpoint() -> Result {
    let sim = sim().await?;
    let (code, _, body) = raw(
        &sim,
        "POST",
        "/sim/faults",
        "application/json",
        r#"{"conflicts": 2, "error": {"status": 503, "everyNth": 3}}"#,
    )
    .await?;
    assert_eq!(code, 200);
    let state: Value = serde_json::from_str(&body)?;
    assert_eq!(state["conflicts"], 2);
    assert_eq!(state["error"]["status"], 503);
    assert_eq!(sim.faults().state().conflicts, 2);
    let (code, _, _) = raw(&sim, "POST", "/sim/faults", "application/json", "{not json").await?;
    assert_eq!(code, 400);
    let (code, _, _) = raw(&sim, "DELETE", "/sim/faults", "application/json", "").await?;
    assert_eq!(code, 200);
    assert_eq!(sim.faults().state(), Default::default());
    let (code, _, body) = raw(&sim, "GET", "/sim/requests", "application/json", "").await?;
    assert_eq!(code, 200);
    assert!(serde_json::from_str::<Vec<Value>>(&body).is_ok());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_log_records_what_the_client_did() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "i"))
        .await?;
    sim.requests().clear();
    api.get("web").await?;
    api.patch("web", &PatchParams::apply("tester").force(), &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}}))).await?;
    api.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {}})),
    )
    .await?;
    let _ = api.get("nope").await;
    let log = sim.requests().records();
    let summary: Vec<String> = log
        .iter()
        .map(|r| {
            let name = r.name.as_deref().unwrap_or("-");
            let sub = r.subresource.as_deref().unwrap_or("-");
            let patch = r.patch_type.as_deref().unwrap_or("-");
            format!("{} {name} {sub} {patch} {}", r.verb, r.status)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            "get web - - 200",
            "patch web - apply 200",
            "patch web status merge 200",
            "get nope - - 404"
        ]
    );
    assert_eq!(log[1].field_manager.as_deref(), Some("tester"));
    assert_eq!(log[0].resource, "deployments");
    assert_eq!(log[0].group, "apps");
    assert_eq!(log[0].namespace.as_deref(), Some("default"));
    assert_eq!(
        log[0].path,
        "/apis/apps/v1/namespaces/default/deployments/web"
    );
    Ok(())
}

/// Write bodies are kept only when asked for, and only for writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_log_keeps_write_bodies_when_asked() -> Result {
    for keep in [false, true] {
        let sim = Sim::builder().record_write_bodies(keep).start().await?;
        let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
        api.create(&PostParams::default(), &deployment("web", 1, "i"))
            .await?;
        api.get("web").await?;
        let patch = json!({"spec": {"replicas": 2}});
        api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let log = sim.requests().records();
        let bodies: Vec<(&str, Option<&Value>)> = log
            .iter()
            .map(|r| (r.verb.as_str(), r.body.as_ref()))
            .collect();
        if keep {
            assert_eq!(bodies[1], ("get", None));
            assert_eq!(bodies[2], ("patch", Some(&patch)));
            assert_eq!(bodies[0].1.unwrap()["metadata"]["name"], "web");
        } else {
            assert!(bodies.iter().all(|(_, b)| b.is_none()), "{bodies:?}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_status_objects_and_do_not_corrupt_state() -> Result {
    let sim = sim().await?;
    let (code, _, body) = raw(
        &sim,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/json",
        "{bad",
    )
    .await?;
    assert_eq!(code, 400);
    let status: Value = serde_json::from_str(&body)?;
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("BadRequest"))
    );
    let (code, _, body) = raw(
        &sim,
        "GET",
        "/apis/apps/v1/namespaces/default/gizmos",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 404);
    assert!(body.contains("\"reason\":\"NotFound\""));
    let wrong_ns = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x","namespace":"other"}}"#;
    let (code, _, _) = raw(
        &sim,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/json",
        wrong_ns,
    )
    .await?;
    assert_eq!(code, 400);
    let (code, _, _) = raw(
        &sim,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/x",
        "text/plain",
        "{}",
    )
    .await?;
    assert_eq!(code, 415);
    let rv = sim.resource_version();
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("ok", 1, "i"))
        .await?;
    let (code, _, _) = raw(
        &sim,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/ok",
        "application/merge-patch+json",
        r#"{"metadata":{"name":"renamed"}}"#,
    )
    .await?;
    assert_eq!(code, 400);
    assert!(sim.get("deployments", None, "ok").is_some());
    assert_eq!(sim.count("deployments", None), 1);
    assert!(sim.resource_version() > rv);
    let (code, _, body) = raw(&sim, "GET", "/version", "application/json", "").await?;
    assert_eq!(code, 200);
    assert!(body.contains("gitVersion"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_yields_a_working_client() -> Result {
    let sim = sim().await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let namespaces: Api<Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(
        names,
        vec!["default".to_string(), "kube-system".to_string()]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_is_refused_rather_than_executed() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    let err = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &lease("dry", json!({})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(400));
    assert!(sim.get("leases", None, "dry").is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structurally_invalid_objects_are_refused() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 1, "i"))
        .await?;
    let before = sim.get("deployments", None, "web");
    for patch in [
        json!({"spec": "not an object"}),
        json!({"metadata": {"labels": {"a": 1}}}),
        json!({"spec": {"replicas": -1}}),
        json!({"metadata": {"finalizers": [1]}}),
    ] {
        let err = api
            .patch("web", &PatchParams::default(), &Patch::Merge(patch.clone()))
            .await
            .unwrap_err();
        assert_eq!(
            (api_code(&err), api_reason(&err).as_str()),
            (Some(422), "Invalid"),
            "{patch}"
        );
    }
    assert_eq!(sim.get("deployments", None, "web"), before);
    let (code, _, _) = raw(
        &sim,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 200, "server still healthy");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_both_groups() -> Result {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    let sim = sim().await?;
    let core: Api<CoreEvent> = Api::default_namespaced(sim.client()?);
    let event: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "web.1"}, "involvedObject": {"kind": "Deployment", "name": "web"},
        "reason": "Reconciled", "message": "ok", "type": "Normal"
    }))?;
    core.create(&PostParams::default(), &event).await?;
    let events: Api<Event> = Api::default_namespaced(sim.client()?);
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "web.2"}, "regarding": {"kind": "Deployment", "name": "web"},
        "reason": "Reconciled", "note": "ok", "type": "Normal", "action": "Reconcile",
        "reportingController": "kubeplug", "reportingInstance": "kubeplug-0", "eventTime": "2026-01-01T00:00:00.000000Z"
    }))?;
    events.create(&PostParams::default(), &event).await?;
    // One store, two forms, as on a real API server: each API lists both Events.
    let as_core = core.list(&ListParams::default()).await?.items;
    assert_eq!(as_core.len(), 2);
    let from_v1 = as_core
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some("web.2"))
        .expect("the events.k8s.io Event is listed as a core Event");
    assert_eq!(from_v1.message.as_deref(), Some("ok"));
    assert_eq!(from_v1.involved_object.name.as_deref(), Some("web"));
    assert_eq!(from_v1.reporting_component.as_deref(), Some("kubeplug"));
    let as_v1 = events.list(&ListParams::default()).await?.items;
    assert_eq!(as_v1.len(), 2);
    let from_core = as_v1
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some("web.1"))
        .expect("the core Event is listed as an events.k8s.io Event");
    assert_eq!(from_core.note.as_deref(), Some("ok"));
    assert_eq!(
        from_core.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web")
    );
    assert_eq!(sim.count("events", None), 2);
    assert_eq!(sim.count("events.events.k8s.io", None), 2);
    // kubectl describe's selector, in each API's field names.
    let about_web =
        ListParams::default().fields("involvedObject.kind=Deployment,involvedObject.name=web");
    assert_eq!(core.list(&about_web).await?.items.len(), 2);
    let about_web_v1 = ListParams::default().fields("regarding.name=web,type=Normal");
    assert_eq!(events.list(&about_web_v1).await?.items.len(), 2);
    let about_other = ListParams::default().fields("involvedObject.name=other");
    assert!(core.list(&about_other).await?.items.is_empty());
    let unsupported = core
        .list(&ListParams::default().fields("note=ok"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&unsupported), Some(400));
    // A patch through events.k8s.io names its fields, and the core form follows.
    events
        .patch(
            "web.1",
            &PatchParams::default(),
            &Patch::Merge(json!({"note": "patched"})),
        )
        .await?;
    assert_eq!(core.get("web.1").await?.message.as_deref(), Some("patched"));
    // A watch on the core API sees an Event created through events.k8s.io.
    let mut watch = core.watch(&WatchParams::default(), "0").await?.boxed();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "web.3"}, "regarding": {"kind": "Deployment", "name": "web"},
        "reason": "Scaled", "note": "Replicas changed: 1 -> 3", "type": "Normal", "action": "Scale",
        "reportingController": "kubeplug", "reportingInstance": "kubeplug-0", "eventTime": "2026-01-01T00:00:00.000000Z"
    }))?;
    events.create(&PostParams::default(), &event).await?;
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(e) = watch.try_next().await? {
            if let WatchEvent::Added(e) = e
                && e.metadata.name.as_deref() == Some("web.3")
            {
                return Ok::<_, anyhow::Error>(e);
            }
        }
        anyhow::bail!("watch ended")
    })
    .await??;
    assert_eq!(seen.message.as_deref(), Some("Replicas changed: 1 -> 3"));
    Ok(())
}

/// A protobuf field: tag, wire type 2 (length-delimited), length, bytes.
fn pb(field: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![field << 3 | 2];
    let mut n = bytes.len();
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(bytes);
    out
}

/// kubectl's typed commands send protobuf: the `k8s\0` magic and a `runtime.Unknown`.
fn pb_body(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [pb(1, api_version.as_bytes()), pb(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), pb(1, &type_meta), pb(2, raw)].concat()
}

async fn raw_bytes(
    sim: &Sim,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nAccept: application/vnd.kubernetes.protobuf, application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        sim.addr(),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok((status, body.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_create_built_in_kinds() -> Result {
    let sim = sim().await?;
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    // Namespace{metadata: {name: team-a, labels: {team: a}}}
    let labels = pb(11, &[pb(1, b"team"), pb(2, b"a")].concat());
    let namespace = pb(1, &[pb(1, b"team-a"), labels].concat());
    let (code, body) = raw_bytes(
        &sim,
        "/api/v1/namespaces",
        PROTOBUF,
        &pb_body("v1", "Namespace", &namespace),
    )
    .await?;
    assert_eq!(code, 201, "{body}");
    let ns: Api<Namespace> = Api::all(sim.client()?);
    let created = ns.get("team-a").await?;
    assert_eq!(
        created
            .metadata
            .labels
            .unwrap_or_default()
            .get("team")
            .map(String::as_str),
        Some("a")
    );
    // Deployment{metadata: {name: web}, spec: {replicas: 2, selector, template}} (replicas is
    // field 1 of the spec, varint).
    let match_labels = pb(1, &[pb(1, b"app"), pb(2, b"web")].concat());
    let container = pb(2, &[pb(1, b"app"), pb(2, b"nginx:1")].concat());
    let template = [
        pb(1, &pb(11, &[pb(1, b"app"), pb(2, b"web")].concat())),
        pb(2, &container),
    ]
    .concat();
    let spec = [vec![0x08, 0x02], pb(2, &match_labels), pb(3, &template)].concat();
    let deployment = [pb(1, &pb(1, b"web")), pb(2, &spec)].concat();
    let (code, body) = raw_bytes(
        &sim,
        "/apis/apps/v1/namespaces/team-a/deployments",
        PROTOBUF,
        &pb_body("apps/v1", "Deployment", &deployment),
    )
    .await?;
    assert_eq!(code, 201, "{body}");
    let web: Deployment = Api::namespaced(sim.client()?, "team-a").get("web").await?;
    let spec = web.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let containers = spec.template.spec.expect("pod spec").containers;
    assert_eq!(containers[0].image.as_deref(), Some("nginx:1"));
    // A protobuf body that is not one is a 400 naming it; the store is unchanged.
    let namespaces = sim.count("namespaces", None);
    let (code, body) = raw_bytes(
        &sim,
        "/api/v1/namespaces",
        PROTOBUF,
        b"{\"kind\": \"Namespace\"}",
    )
    .await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("without the k8s"), "{body}");
    assert_eq!(sim.count("namespaces", None), namespaces);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_accepts_yaml_and_status_subresource() -> Result {
    let sim = Sim::builder()
        .status_delay(Duration::from_secs(3600))
        .start()
        .await?;
    let yaml = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: from-yaml\nspec:\n  holderIdentity: me\n";
    let (code, _, body) = raw(
        &sim,
        "PATCH",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/from-yaml?fieldManager=yaml-user",
        "application/apply-patch+yaml",
        yaml,
    )
    .await?;
    assert_eq!(code, 201, "{body}");
    let lease = sim.get("leases", None, "from-yaml").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "me");
    assert_eq!(
        lease["metadata"]["managedFields"][0]["manager"],
        "yaml-user"
    );

    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &deployment("web", 2, "i"))
        .await?;
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 9}, "status": {"readyReplicas": 1}});
    let applied = api
        .patch_status(
            "web",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(status),
        )
        .await?;
    assert_eq!(applied.status.unwrap().ready_replicas, Some(1));
    assert_eq!(
        applied.spec.unwrap().replicas,
        Some(2),
        "spec ignored on status apply"
    );
    let entry = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("status-writer"))
        .expect("status-writer entry");
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_kind_registered_in_code() -> Result {
    use kubeplug_sim::ResourceKind;
    let sim = Sim::builder()
        .kind(ResourceKind::custom(
            "example.com",
            "v1alpha1",
            "Gadget",
            "gadgets",
            false,
        ))
        .start()
        .await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1alpha1", "Gadget"),
        "gadgets",
    );
    let api: Api<DynamicObject> = Api::all_with(sim.client()?, &resource);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1alpha1", "kind": "Gadget", "metadata": {"name": "g"},
        "spec": {"n": 1}, "status": {"kept": true}
    }))?;
    let created = api.create(&PostParams::default(), &gadget).await?;
    assert_eq!(created.metadata.namespace, None, "cluster-scoped");
    assert_eq!(
        created.data["status"]["kept"], true,
        "no status subresource: status stored"
    );
    let err = api
        .patch_status("g", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(404), "no status subresource served");
    let (code, _, _) = raw(
        &sim,
        "GET",
        "/apis/example.com/v1alpha1/namespaces/default/gadgets",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 404, "cluster-scoped kind has no namespaced path");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_one_is_chunked_json_lines_and_delete_returns_the_object() -> Result {
    let sim = sim().await?;
    let api: Api<Lease> = Api::default_namespaced(sim.client()?);
    api.create(&PostParams::default(), &lease("a", json!({})))
        .await?;
    let (code, head, body) = raw(
        &sim,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases?watch=1&timeoutSeconds=1",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 200);
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let line = body
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("an event line");
    let event: Value = serde_json::from_str(line)?;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "a");

    let deleted = api.delete("a", &DeleteParams::default()).await?;
    let object = deleted.left().expect("the deleted object, not a Status");
    assert_eq!(object.metadata.name.as_deref(), Some("a"));
    Ok(())
}

/// kubeplug's CRDs from one multi-document `--crd` file; their schema (defaults, pruning, 422
/// with the field path) through a kube client; ConfigMaps and Secrets with binary data; a CRD
/// changed or created at runtime (over HTTP or through the library) re-registers its kinds at
/// once (printer columns included); a CRD that cannot be served is refused, not stored; the
/// OpenAPI v3 documents tell kubectl the server validates fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_crds_configmaps_and_crd_changes_at_runtime() -> Result {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let dir = tempfile::tempdir()?;
    let both = dir.path().join("crds.yaml");
    std::fs::write(
        &both,
        format!(
            "{}\n---\n{}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: team-a}}\n",
            std::fs::read_to_string(crds.join("plugins.yaml"))?,
            std::fs::read_to_string(crds.join("pluginpolicies.yaml"))?
        ),
    )?;
    let sim = Sim::builder().crd_file(&both).start().await?;
    let (code, _, body) = raw(
        &sim,
        "GET",
        "/apis/kubeplug.dev/v1alpha1",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 200);
    for resource in [
        "\"plugins\"",
        "\"plugins/status\"",
        "\"pluginpolicies\"",
        "\"kpp\"",
    ] {
        assert!(body.contains(resource), "{resource}: {body}");
    }
    assert!(
        sim.get("namespaces", None, "team-a").is_some(),
        "other documents load too"
    );
    let crd = sim
        .get("customresourcedefinitions", None, "plugins.kubeplug.dev")
        .unwrap();
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "{crd}");
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Plugin");
    assert_eq!(crd["status"]["acceptedNames"]["listKind"], "PluginList");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1alpha1"]));

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeplug.dev", "v1alpha1", "Plugin"),
        "plugins",
    );
    let plugins: Api<DynamicObject> = Api::namespaced_with(sim.client()?, "team-a", &resource);
    let plugin = |spec: Value| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kubeplug.dev/v1alpha1", "kind": "Plugin",
            "metadata": {"name": "pinner"}, "spec": spec, "status": {"mode": "enforce"}
        }))?)
    };
    let err = plugins
        .create(
            &PostParams::default(),
            &plugin(json!({"module": {"configMap": {}}, "mode": "loud"}))?,
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");
    assert!(
        status
            .message
            .starts_with("Plugin.kubeplug.dev \"pinner\" is invalid: ["),
        "{}",
        status.message
    );
    assert!(
        status
            .message
            .contains("spec.module.configMap.name: Required value"),
        "{}",
        status.message
    );
    let fields: Vec<String> = status
        .details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.field.clone()).collect())
        .unwrap_or_default();
    assert_eq!(
        fields,
        ["spec.mode", "spec.module.configMap.name"],
        "{status:?}"
    );
    assert_eq!(sim.count("plugins", Some("team-a")), 0, "nothing stored");

    let created = plugins
        .create(
            &PostParams::default(),
            &plugin(json!({"module": {"configMap": {"name": "pinner"}}, "unknown": 1}))?,
        )
        .await?;
    assert_eq!(
        created.data["spec"],
        json!({"module": {"configMap": {"name": "pinner", "key": "plugin.wasm"}}, "mode": "enforce"}),
        "defaulted and pruned"
    );
    assert!(
        created.data.get("status").is_none(),
        "status only through /status"
    );

    // Unknown fields: pruned, and reported as the fieldValidation directive asks.
    let path = "/apis/kubeplug.dev/v1alpha1/namespaces/team-a/plugins/pinner";
    let patch = r#"{"spec": {"modul": 1}}"#;
    let (code, head, _) = raw(&sim, "PATCH", path, "application/merge-patch+json", patch).await?;
    assert_eq!(code, 200);
    assert!(
        head.contains("warning: 299 - \"unknown field \\\"spec.modul\\\"\""),
        "{head}"
    );
    let strict = format!("{path}?fieldValidation=Strict");
    let (code, _, body) = raw(
        &sim,
        "PATCH",
        &strict,
        "application/merge-patch+json",
        patch,
    )
    .await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains(r#"Plugin in version \"v1alpha1\" cannot be handled as a Plugin: strict decoding error: unknown field \"spec.modul\""#),
        "{body}"
    );
    let ignore = format!("{path}?fieldValidation=Ignore");
    let (code, head, _) = raw(
        &sim,
        "PATCH",
        &ignore,
        "application/merge-patch+json",
        patch,
    )
    .await?;
    assert_eq!(code, 200);
    assert!(!head.contains("warning"), "{head}");
    assert!(
        sim.get("plugins", Some("team-a"), "pinner").unwrap()["spec"]
            .get("modul")
            .is_none()
    );

    // ConfigMaps keep binary data byte for byte; Secrets fold stringData into data.
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client()?, "team-a");
    let bytes: Vec<u8> = (0..=255u8).collect();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "pinner"}}))?;
    let cm = ConfigMap {
        binary_data: Some([("plugin.wasm".to_string(), ByteString(bytes.clone()))].into()),
        ..cm
    };
    config_maps.create(&PostParams::default(), &cm).await?;
    let read = config_maps.get("pinner").await?;
    assert_eq!(read.binary_data.unwrap()["plugin.wasm"].0, bytes);
    let (code, _, body) = raw(
        &sim,
        "POST",
        "/api/v1/namespaces/team-a/configmaps",
        "application/json",
        r#"{"metadata": {"name": "bad"}, "binaryData": {"k": "%%%"}}"#,
    )
    .await?;
    assert_eq!(code, 400, "{body}");
    let secrets: Api<Secret> = Api::namespaced(sim.client()?, "team-a");
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "token"}, "stringData": {"token": "s3cret"}}),
    )?;
    let stored = secrets.create(&PostParams::default(), &secret).await?;
    assert_eq!(stored.data.unwrap()["token"].0, b"s3cret");
    assert!(stored.string_data.is_none());
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));

    // A CRD changed over the API: its new printer column is in the next Table.
    let table = |path: &'static str| {
        let sim = &sim;
        async move {
            raw(
                sim,
                "GET",
                path,
                "application/json\r\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io",
                "",
            )
            .await
        }
    };
    let (_, _, body) = table("/apis/kubeplug.dev/v1alpha1/namespaces/team-a/plugins").await?;
    let before: Value = serde_json::from_str(&body)?;
    assert_eq!(
        before["columnDefinitions"].as_array().map(Vec::len),
        Some(6),
        "{body}"
    );
    let crds_api: Api<DynamicObject> = Api::all_with(
        sim.client()?,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let mut crd = crds_api.get("plugins.kubeplug.dev").await?;
    crd.data["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "Key", "type": "string", "jsonPath": ".spec.module.configMap.key"}));
    crds_api
        .replace("plugins.kubeplug.dev", &PostParams::default(), &crd)
        .await?;
    let (_, _, body) = table("/apis/kubeplug.dev/v1alpha1/namespaces/team-a/plugins").await?;
    let after: Value = serde_json::from_str(&body)?;
    assert_eq!(after["columnDefinitions"][6]["name"], "Key", "{body}");
    assert_eq!(after["rows"][0]["cells"][6], "plugin.wasm", "{body}");

    // A CRD that cannot be served is refused; one the library applies is served at once.
    let (code, _, body) = raw(
        &sim,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gadgets.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Gadget", "plural": "gadgets"}, "scope": "Namespaced", "versions": []}}"#,
    )
    .await?;
    assert_eq!(code, 422, "{body}");
    assert!(
        sim.get("customresourcedefinitions", None, "gadgets.example.com")
            .is_none()
    );
    sim.apply_yaml(CRD)?;
    let (code, _, _) = raw(
        &sim,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        "application/json",
        "",
    )
    .await?;
    assert_eq!(code, 200, "registered by apply_yaml");

    // OpenAPI v3: the PATCH operation of each kind accepts fieldValidation.
    let (code, _, body) = raw(&sim, "GET", "/openapi/v3", "application/json", "").await?;
    assert_eq!(code, 200);
    let root: Value = serde_json::from_str(&body)?;
    let url = root["paths"]["apis/kubeplug.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    assert!(root["paths"]["api/v1"].is_object(), "{body}");
    let (code, _, body) = raw(&sim, "GET", &url, "application/json", "").await?;
    assert_eq!(code, 200, "{url}");
    let doc: Value = serde_json::from_str(&body)?;
    let patch =
        &doc["paths"]["/apis/kubeplug.dev/v1alpha1/namespaces/{namespace}/plugins/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"]["kind"], "Plugin",
        "{body}"
    );
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
        "{body}"
    );
    let schema = &doc["components"]["schemas"]["dev.kubeplug.v1alpha1.Plugin"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"][0]["kind"],
        "Plugin"
    );
    assert!(
        schema["properties"]["spec"]["description"].is_string(),
        "{schema}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_says_whether_each_write_changed_the_object() -> Result {
    let sim = sim().await?;
    let api: Api<Deployment> = Api::default_namespaced(sim.client()?);
    let cursor = sim.requests().cursor();
    api.create(&PostParams::default(), &deployment("w", 1, "i"))
        .await?;
    let replicas = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
    api.patch("w", &PatchParams::default(), &replicas(2))
        .await?;
    // The same patch again changes nothing: the server answers the stored object.
    api.patch("w", &PatchParams::default(), &replicas(2))
        .await?;
    let stale =
        Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 3}}));
    assert!(
        api.patch("w", &PatchParams::default(), &stale)
            .await
            .is_err()
    );
    api.get("w").await?;
    let writes: Vec<(String, u16, Option<bool>)> = sim
        .requests()
        .since(cursor)
        .into_iter()
        .map(|r| (r.verb, r.status, r.changed))
        .collect();
    let w = |verb: &str, status: u16, changed: Option<bool>| (verb.to_string(), status, changed);
    assert_eq!(
        writes,
        vec![
            w("create", 201, Some(true)),
            w("patch", 200, Some(true)),
            w("patch", 200, Some(false)),
            w("patch", 409, Some(false)),
            w("get", 200, None),
        ]
    );
    Ok(())
}
