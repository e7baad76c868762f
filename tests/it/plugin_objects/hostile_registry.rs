//! Finding 2 of issue 35 as a tenant meets it: a Plugin naming an image on an allowed
//! registry that answers 403 with a body (an internal service's answer, read back) and one
//! whose registry points its token realm at a host no policy lists. The status and Events
//! say what happened (the status code; the refused host) and carry nothing of the body, and
//! the unlisted host is never contacted.

use super::*;
use crate::registry_hostile::{Answer, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_cannot_read_back_or_redirect_through_a_plugin() -> Result<()> {
    if !crate::common::has_kubectl() {
        println!("SKIPPED: kubectl is not on PATH");
        return Ok(());
    }
    let (internal, internal_seen) = serve(|_, _| Answer {
        status: "403 Forbidden",
        headers: Vec::new(),
        body: b"internal-admin-token=hunter2".to_vec(),
    })
    .await;
    let realm = format!("http://{internal}/token/private?leak=1");
    let (reg, _) = serve(move |req, _| {
        if req.path.contains("/realm/") {
            Answer {
                status: "401 Unauthorized",
                headers: vec![format!(
                    "WWW-Authenticate: Bearer realm=\"{realm}\",service=\"r\""
                )],
                body: Vec::new(),
            }
        } else {
            Answer {
                status: "403 Forbidden",
                headers: Vec::new(),
                body: b"internal-admin-token=hunter2".to_vec(),
            }
        }
    })
    .await;
    let cache = tempfile::tempdir()?;
    let registries = kubeplug::oci::Registries::new(&kubeplug::oci::RegistryArgs {
        insecure_registry: vec![reg.clone(), internal.clone()],
        module_cache: Some(cache.path().to_path_buf()),
        max_module_mib: 64,
        ..kubeplug::oci::RegistryArgs::default()
    })?;
    let t = start(|c| {
        c.objects.as_mut().unwrap().registries = Some(registries.clone());
    })
    .await?;
    t.apply(&format!(
        "{POLICY}  modules: {{images: [\"{reg}/team-a\"]}}\n"
    ))
    .await?;
    let plugin = |name: &str| {
        PluginYaml::image("team-a", name, format!("oci://{reg}/team-a/{name}/m:v1"))
            .config("{image: \"nginx:1.25\"}")
            .patching(IMAGE_FIELD)
            .yaml()
    };
    t.apply(&plugin("forbidden")).await?;
    t.apply(&plugin("realm")).await?;

    let why = t
        .reason_becomes("team-a", "forbidden", "ImageInvalid")
        .await;
    assert!(why.contains("HTTP 403"), "{why}");
    let why = t.reason_becomes("team-a", "realm", "ImageNotAllowed").await;
    assert!(
        why.contains(&format!("{internal} is neither the registry")),
        "{why}"
    );
    assert!(!why.contains("private") && !why.contains("leak"), "{why}");
    assert!(
        internal_seen.lock().unwrap().is_empty(),
        "the unlisted realm was contacted"
    );
    // Nothing of the body anywhere the tenant reads: status, Events.
    t.event_with("team-a", "forbidden", "ImageInvalid").await;
    let everything = format!(
        "{} {} {}",
        t.plugin("team-a", "forbidden").unwrap()["status"],
        t.plugin("team-a", "realm").unwrap()["status"],
        serde_json::to_string(&t.sim.list("events", Some("team-a")))?
    );
    assert!(
        !everything.contains("hunter2") && !everything.contains("admin-token"),
        "{everything}"
    );
    Ok(())
}
