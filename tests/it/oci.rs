//! Modules from OCI registries (issue 26) against a real registry: Debian's `docker-registry`
//! (CNCF distribution 2.8), started here on 127.0.0.1 with a temporary folder. Without it the
//! tests say so and skip, except under `CI=true`, where they fail (`make test-deps` installs
//! it).

use super::registry::Registry;
use kubeplug::oci::transfer::{self, CNCF_CONFIG, CNCF_LAYER, KUBEWARDEN_CONFIG, KUBEWARDEN_LAYER};
use kubeplug::oci::{OciRef, Registries, RegistryArgs};
use sha2::{Digest, Sha256};
use std::process::Command;
use std::time::Instant;

fn kubeplug(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What a user types: push prints the pinned reference, pull by tag writes the same bytes and
/// prints the same digest, a second pull comes from the cache, and a pinned pull needs no
/// registry at all once cached.
#[test]
fn push_then_pull_round_trip_and_cache() {
    let Some(reg) = Registry::start() else { return };
    let wasm = crate::common::plugin("image-pinner");
    let module = std::fs::read(&wasm).unwrap();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let addr = reg.addr.clone();
    let flags = [
        "--insecure-registry",
        addr.as_str(),
        "--module-cache",
        cache.to_str().unwrap(),
    ];
    let tagged = format!("oci://{}/team-a/image-pinner:v1", reg.addr);
    let mut push = vec!["push", wasm.to_str().unwrap(), tagged.as_str()];
    push.extend(flags);
    let (ok, out, err) = kubeplug(&push);
    assert!(ok, "{err}");
    let pinned = out.trim().to_string();
    assert!(pinned.starts_with(&format!("{tagged}@sha256:")), "{pinned}");

    let out_file = work.path().join("pulled.wasm");
    let mut pull = vec!["pull", tagged.as_str(), "-o", out_file.to_str().unwrap()];
    pull.extend(flags);
    let started = Instant::now();
    let (ok, out, err) = kubeplug(&pull);
    let cold = started.elapsed();
    assert!(ok, "{err}");
    assert_eq!(out.trim(), pinned);
    assert_eq!(std::fs::read(&out_file).unwrap(), module);
    assert!(
        err.contains(&format!("module sha256:{}", sha256(&module))),
        "{err}"
    );
    assert!(!err.contains("from the cache"), "{err}");

    let started = Instant::now();
    let (ok, _, err) = kubeplug(&pull);
    let warm = started.elapsed();
    assert!(ok && err.contains("from the cache"), "{err}");
    eprintln!(
        "pull of {} bytes: {cold:?} cold, {warm:?} from the cache",
        module.len()
    );

    // Pinned and cached: no request at all, so a stopped registry does not matter.
    drop(reg);
    let mut pinned_pull = vec!["pull", pinned.as_str()];
    pinned_pull.extend(flags);
    let (ok, out, err) = kubeplug(&pinned_pull);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), pinned);
    // A tag needs the registry to resolve it: the error names the reference.
    let (ok, _, err) = kubeplug(&pull);
    assert!(!ok && err.contains(&format!("resolving {tagged}")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_layouts_pulled_and_everything_else_refused_by_name() {
    let Some(reg) = Registry::start() else { return };
    let cache = tempfile::tempdir().unwrap();
    let client = Registries::new(&reg.args(cache.path())).unwrap();
    let module = b"\0asm\x0d\0\x01\0 a component".to_vec();

    // Kubewarden's layout, pushed by hand.
    let kw = reg.reference("kw/policy:v1");
    let kw_digest = transfer::push_manifest_of(
        &client,
        &kw,
        &module,
        KUBEWARDEN_LAYER,
        b"{}",
        KUBEWARDEN_CONFIG,
    )
    .await
    .unwrap();
    let pulled = transfer::pull(&client, &kw).await.unwrap();
    assert_eq!(pulled.bytes, module);
    assert_eq!(pulled.manifest_digest, kw_digest);
    assert_eq!(pulled.module_digest, sha256(&module));

    // The CNCF layout, as push writes it; the same module is not downloaded again.
    let cncf = reg.reference("cncf/mod:v1");
    transfer::push(&client, &cncf, &module).await.unwrap();
    let pulled = transfer::pull(&client, &cncf).await.unwrap();
    assert!(pulled.cached && pulled.bytes == module);

    // A container image.
    let image = reg.reference("library/alpine:3");
    transfer::push_manifest_of(
        &client,
        &image,
        b"not really a tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        b"{\"architecture\":\"amd64\",\"os\":\"linux\"}",
        "application/vnd.oci.image.config.v1+json",
    )
    .await
    .unwrap();
    let err = format!("{:#}", transfer::pull(&client, &image).await.unwrap_err());
    assert!(
        err.contains("a container image")
            && err.contains("application/vnd.oci.image.layer.v1.tar+gzip"),
        "{err}"
    );

    // Two wasm layers.
    let two = reg.reference("two/layers:v1");
    let other = b"\0asm another".to_vec();
    let desc = |t: &str, b: &[u8]| serde_json::json!({"mediaType": t, "digest": format!("sha256:{}", sha256(b)), "size": b.len()});
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": transfer::OCI_MANIFEST,
        "config": desc(CNCF_CONFIG, b"{}"),
        "layers": [desc(CNCF_LAYER, &module), desc(KUBEWARDEN_LAYER, &other)],
    });
    transfer::push_raw(
        &client,
        &two,
        &[&module, &other, b"{}"],
        &serde_json::to_vec(&manifest).unwrap(),
    )
    .await
    .unwrap();
    let err = format!("{:#}", transfer::pull(&client, &two).await.unwrap_err());
    assert!(err.contains("2 wasm layers"), "{err}");

    // A digest the registry does not hold.
    let missing = reg.reference(&format!("cncf/mod@sha256:{}", "0".repeat(64)));
    let err = format!("{:#}", transfer::pull(&client, &missing).await.unwrap_err());
    assert!(err.contains(&"0".repeat(64)), "{err}");

    // Not a wasm file, and a digest reference, are refused before any request.
    assert!(transfer::push(&client, &cncf, b"MZ...").await.is_err());
    let err = transfer::push(&client, &pulled.pinned, &module)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("push to a tag"), "{err}");
}

/// A registry that serves other bytes than the manifest names (changed on its disk here):
/// a wrong digest, a truncated blob and a blob longer than its manifest says are refused, the
/// last without reading past the size; a module over the limit is refused from its manifest;
/// none of them reaches the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_truncated_and_oversized_blobs_never_reach_the_cache() {
    let Some(reg) = Registry::start() else { return };
    let cache = tempfile::tempdir().unwrap();
    let client = Registries::new(&reg.args(cache.path())).unwrap();
    let blobs = cache.path().join("blobs/sha256");
    let held = || std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0);

    let mut module = b"\0asm".to_vec();
    module.resize(4096, 7);
    let hex = sha256(&module);
    let r = reg.reference("bad/blob:v1");
    transfer::push(&client, &r, &module).await.unwrap();
    let data = reg.blob_file(&hex);

    let mut wrong = module.clone();
    wrong[100] = 8;
    std::fs::write(&data, &wrong).unwrap();
    let err = format!("{:#}", transfer::pull(&client, &r).await.unwrap_err());
    assert!(err.contains("digest"), "{err}");

    std::fs::write(&data, &module[..1000]).unwrap();
    let err = format!("{:#}", transfer::pull(&client, &r).await.unwrap_err());
    assert!(!err.is_empty(), "{err}");

    let mut longer = module.clone();
    longer.resize(10 << 20, 0);
    std::fs::write(&data, &longer).unwrap();
    let err = format!("{:#}", transfer::pull(&client, &r).await.unwrap_err());
    assert!(
        err.contains("longer than 4096 bytes") || err.contains("digest"),
        "{err}"
    );
    assert_eq!(held(), 0, "nothing partial is visible");

    // Over the limit: refused from the manifest, before the blob is asked for.
    let mut big = b"\0asm".to_vec();
    big.resize(2 << 20, 1);
    let big_ref = reg.reference("big/module:v1");
    transfer::push(&client, &big_ref, &big).await.unwrap();
    let small = Registries::new(&RegistryArgs {
        max_module_mib: 1,
        ..reg.args(cache.path())
    })
    .unwrap();
    let err = format!("{:#}", transfer::pull(&small, &big_ref).await.unwrap_err());
    assert!(err.contains("more than the 1 MiB limit"), "{err}");
    assert_eq!(held(), 0);

    // The tag moved: the same tag resolves to the new digest.
    std::fs::write(&data, &module).unwrap();
    let first = transfer::pull(&client, &r).await.unwrap();
    let mut v2 = module.clone();
    v2[200] = 9;
    transfer::push(&client, &r, &v2).await.unwrap();
    let second = transfer::pull(&client, &r).await.unwrap();
    assert_ne!(first.manifest_digest, second.manifest_digest);
    assert_eq!(second.bytes, v2);
    // The pinned first revision is unchanged.
    let again = transfer::pull(&client, &first.pinned).await.unwrap();
    assert_eq!(again.bytes, module);
}

/// `kubeplug eval --plugin oci://…` pulls the module (through the cache) and runs it as the
/// file would run: the same output; with the registry gone, the pinned reference still runs.
#[test]
fn eval_runs_a_plugin_from_a_registry() {
    let Some(reg) = Registry::start() else { return };
    let wasm = crate::common::plugin("image-pinner");
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let addr = reg.addr.clone();
    let tagged = format!("oci://{addr}/team-a/image-pinner:v1");
    let flags = [
        "--insecure-registry",
        addr.as_str(),
        "--module-cache",
        cache.to_str().unwrap(),
    ];
    let mut push = vec!["push", wasm.to_str().unwrap(), tagged.as_str()];
    push.extend(flags);
    let (ok, pinned, err) = kubeplug(&push);
    assert!(ok, "{err}");
    let fixture = crate::common::fixture("web-alpine.yaml");
    let eval = |plugin: &str| {
        let mut args = vec![
            "eval",
            "--plugin",
            plugin,
            "--object",
            fixture.to_str().unwrap(),
        ];
        args.extend(flags);
        args.extend(["--compile-cache", work.path().to_str().unwrap()]);
        let (ok, out, err) = kubeplug(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let from_file = eval(wasm.to_str().unwrap());
    let from_registry = eval(&tagged);
    assert_eq!(from_file["actions"], from_registry["actions"]);
    assert_eq!(from_registry["plugin"]["name"], "image-pinner");
    drop(reg);
    let pinned_run = eval(pinned.trim());
    assert_eq!(pinned_run["actions"], from_file["actions"]);
}

/// `kubeplug mirror` between two registries: the same digest on the destination, which a
/// pinned pull from there (into an empty cache) gives back byte for byte; a Kubewarden-layout
/// module keeps its layout and digest too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_keeps_the_digest() {
    let Some(src) = Registry::start() else { return };
    let Some(dst) = Registry::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let wasm = crate::common::plugin("image-pinner");
    let module = std::fs::read(&wasm).unwrap();
    let src_ref = format!("oci://{}/team-a/image-pinner:v1", src.addr);
    let dst_ref = format!("oci://{}/mirror/image-pinner", dst.addr);
    let insecure = format!("{},{}", src.addr, dst.addr);
    let cache = work.path().join("cache");
    let flags = [
        "--insecure-registry",
        insecure.as_str(),
        "--module-cache",
        cache.to_str().unwrap(),
    ];
    let mut push = vec!["push", wasm.to_str().unwrap(), src_ref.as_str()];
    push.extend(flags);
    let (ok, pinned, err) = kubeplug(&push);
    assert!(ok, "{err}");
    let digest = pinned.trim().rsplit_once('@').unwrap().1.to_string();
    let mut mirror = vec!["mirror", src_ref.as_str(), dst_ref.as_str()];
    mirror.extend(flags);
    let (ok, out, err) = kubeplug(&mirror);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("{dst_ref}:v1@{digest}"));

    let fresh = work.path().join("fresh");
    let client = Registries::new(&dst.args(&fresh)).unwrap();
    let pulled = transfer::pull(&client, &OciRef::parse(out.trim()).unwrap())
        .await
        .unwrap();
    assert_eq!(pulled.bytes, module);
    assert!(!pulled.cached);

    let both = Registries::new(&RegistryArgs {
        insecure_registry: vec![src.addr.clone(), dst.addr.clone()],
        ..src.args(&work.path().join("kw"))
    })
    .unwrap();
    let kw = src.reference("kw/policy:v2");
    let kw_digest = transfer::push_manifest_of(
        &both,
        &kw,
        &module,
        KUBEWARDEN_LAYER,
        b"{}",
        KUBEWARDEN_CONFIG,
    )
    .await
    .unwrap();
    let mirrored = transfer::mirror(&both, &kw, &dst.reference("kw/policy"))
        .await
        .unwrap();
    assert_eq!(mirrored, kw_digest);
    let err = transfer::mirror(
        &both,
        &kw,
        &dst.reference(&format!("x/y@sha256:{kw_digest}")),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("not a digest"), "{err}");
}
