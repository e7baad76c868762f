//! Modules from OCI registries (issue 26) against a real registry: Debian's `docker-registry`
//! (CNCF distribution 2.8), started here on 127.0.0.1 with a temporary folder. Without it the
//! tests say so and skip, except under `CI=true`, where they fail (`make test-deps` installs
//! it).

use super::registry::Registry;
use kubeplug::oci::transfer::{self, CNCF_CONFIG, CNCF_LAYER, KUBEWARDEN_CONFIG, KUBEWARDEN_LAYER};
use kubeplug::oci::{OciRef, Registries, RegistryArgs};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

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
    assert!(
        !ok && err.contains(&format!("pulling the manifest of {tagged}")),
        "{err}"
    );
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

/// A registry that never stops answering: every read of a pull is bounded (the manifest to
/// 4 MiB, a token to 64 KiB, an error body to 4 KiB), so a registry a tenant names cannot
/// take the host's memory. The server counts what it could write before the client hung up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_registry_cannot_make_a_pull_read_without_limit() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let written: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<AtomicU64>>>> =
        Arc::default();
    let (server_addr, server_written) = (addr.clone(), written.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let (addr, written) = (server_addr.clone(), server_written.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = request.split(' ').nth(1).unwrap_or("").to_string();
                let endless = |status: &str, extra: &str| {
                    format!(
                        "HTTP/1.1 {status}\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n{extra}\r\n"
                    )
                };
                let head = if path.starts_with("/v2/huge/") {
                    endless(
                        "200 OK",
                        "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                    )
                } else if path.starts_with("/v2/token/") {
                    format!(
                        "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nWWW-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"x\"\r\nContent-Length: 0\r\n\r\n"
                    )
                } else if path.starts_with("/token") || path.starts_with("/v2/error/") {
                    endless(
                        if path.starts_with("/token") {
                            "200 OK"
                        } else {
                            "500 Internal Server Error"
                        },
                        "",
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
                        .to_string()
                };
                if stream.write_all(head.as_bytes()).await.is_err() || !head.contains("chunked") {
                    return;
                }
                let key = path.split('/').nth(2).unwrap_or("token").to_string();
                let counter = written.lock().unwrap().entry(key).or_default().clone();
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                while stream.write_all(chunk.as_bytes()).await.is_ok() {
                    counter.fetch_add(0x10000, Ordering::Relaxed);
                    if counter.load(Ordering::Relaxed) > 1 << 30 {
                        return; // 1 GiB: the client is not stopping, the asserts will say
                    }
                }
            });
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let reg = Registries::new(&RegistryArgs {
        insecure_registry: vec![addr.clone()],
        module_cache: Some(cache.path().to_path_buf()),
        max_module_mib: 64,
        ..RegistryArgs::default()
    })
    .unwrap();
    let pull = |repo: &str| {
        let r = OciRef::parse(&format!("oci://{addr}/{repo}:v1")).unwrap();
        let reg = &reg;
        async move { format!("{:#}", transfer::pull(reg, &r).await.unwrap_err()) }
    };
    let err = pull("huge").await;
    assert!(
        err.contains("the manifest is longer than 4194304 bytes; stopped reading"),
        "{err}"
    );
    let err = pull("token").await;
    assert!(
        err.contains("the token is longer than 65536 bytes; stopped reading"),
        "{err}"
    );
    let err = pull("error").await;
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(
        !err.contains("xxxx"),
        "the error body is never shown: {err}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (what, counter) in written.lock().unwrap().iter() {
        let sent = counter.load(Ordering::Relaxed);
        // What the client read, plus what the sockets' buffers took before it hung up.
        assert!(
            sent < 24 << 20,
            "{what}: the server wrote {sent} bytes before the client stopped"
        );
    }
    assert_eq!(written.lock().unwrap().len(), 3);
}

/// A registry with basic authentication: credentials from a docker config (`auth` as
/// `docker login` writes it) push and pull; without them the error says what is missing;
/// wrong ones are refused by name. Stopped, a pinned module still comes from the cache;
/// restarted, a tag resolves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_from_a_docker_config() {
    use base64::Engine;
    let Some(mut reg) = Registry::start_with_auth("tenant", "s3cret") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let config = |user: &str, password: &str| {
        let path = work.path().join(format!("{user}-{password}.json"));
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        std::fs::write(
            &path,
            format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, reg.addr),
        )
        .unwrap();
        path
    };
    let args = |config: Option<PathBuf>| RegistryArgs {
        registry_config: config,
        ..reg.args(&work.path().join("cache"))
    };
    let module = b"\0asm\x0d\0\x01\0 behind a password".to_vec();
    let r = reg.reference("team-a/private:v1");
    let good = Registries::new(&args(Some(config("tenant", "s3cret")))).unwrap();
    let digest = transfer::push(&good, &r, &module).await.unwrap();

    let anonymous = Registries::new(&args(None)).unwrap();
    let err = format!("{:#}", transfer::pull(&anonymous, &r).await.unwrap_err());
    assert!(
        err.contains("the registry asks for credentials and none are known for 127.0.0.1"),
        "{err}"
    );
    let wrong = Registries::new(&args(Some(config("tenant", "wrong")))).unwrap();
    let err = format!("{:#}", transfer::pull(&wrong, &r).await.unwrap_err());
    assert!(
        err.contains("the registry refused the credentials"),
        "{err}"
    );

    let pulled = transfer::pull(&good, &r).await.unwrap();
    assert_eq!(
        (pulled.bytes, pulled.manifest_digest.as_str()),
        (module.clone(), digest.as_str())
    );

    reg.stop();
    let pinned = transfer::pull(&good, &r.pinned(&digest)).await.unwrap();
    assert!(pinned.cached && pinned.bytes == module);
    assert!(
        transfer::pull(&good, &r).await.is_err(),
        "a tag needs the registry"
    );
    reg.restart();
    assert_eq!(
        transfer::pull(&good, &r).await.unwrap().manifest_digest,
        digest
    );
}

/// `kubeplug run --plugin oci://…`: a plugin from a registry without a plugins directory,
/// named after its repository and bound by that name's policy; with a verification config
/// an unsigned module stops the start with the reason, before anything runs.
#[test]
fn run_takes_plugins_from_a_registry() {
    use crate::common::host_process::HostProcess;
    let Some(reg) = Registry::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let wasm = crate::common::plugin("image-pinner");
    let tagged = format!("oci://{}/demo/image-pinner:v1", reg.addr);
    let cache = work.path().join("cache");
    let flags = [
        "--insecure-registry",
        reg.addr.as_str(),
        "--module-cache",
        cache.to_str().unwrap(),
    ];
    let mut push = vec!["push", wasm.to_str().unwrap(), tagged.as_str()];
    push.extend(flags);
    let (ok, pinned, err) = kubeplug(&push);
    assert!(ok, "{err}");
    let policies = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/policies");
    let mut args = vec![
        "--plugin",
        tagged.as_str(),
        "--policies",
        policies,
        "--plugin-objects=false",
    ];
    args.extend(flags);
    let mut host = HostProcess::start_run(&args);
    assert!(
        host.saw_within("running; stop with Ctrl-C", Duration::from_secs(60)),
        "{}",
        host.seen
    );
    assert!(
        host.seen.contains(pinned.trim()) && host.seen.contains("image-pinner"),
        "the pull is logged with the pinned reference: {}",
        host.seen
    );
    assert!(
        host.seen.contains("mode=Enforce")
            && (host.seen.contains("pinning images of demo/web")
                || host.saw_within("pinning images of demo/web", Duration::from_secs(30))),
        "bound by samples/policies/image-pinner.policy.yaml, it pins: {}",
        host.seen
    );
    drop(host);

    let key = kubeplug::oci::keys::SigningKey::generate();
    let config = work.path().join("verification.yml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nallOf:\n- kind: pubKey\n  key: |\n{}",
            key.public()
                .to_pem()
                .lines()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        ),
    )
    .unwrap();
    let mut args = vec![
        "run",
        "--embedded",
        "--plugin",
        tagged.as_str(),
        "--plugin-objects=false",
        "--verification-config",
        config.to_str().unwrap(),
        "--kubeconfig-out",
    ];
    let kc = work.path().join("kc");
    args.push(kc.to_str().unwrap());
    args.extend(flags);
    let (ok, _, err) = kubeplug(&args);
    assert!(!ok, "an unsigned module must not run");
    assert!(
        err.contains(&format!("--plugin {tagged}")) && err.contains("not signed"),
        "{err}"
    );
}

/// A token one set of credentials earned is never sent for another: a registry handing out
/// bearer tokens (as Harbor, GHCR and Docker Hub do) answers a tenant with credentials, then
/// a tenant without them asks for the same repository and gets the registry's 401, not the
/// first tenant's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_are_not_shared_between_credentials() {
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let module = b"\0asm\x0d\0\x01\0 private".to_vec();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": CNCF_CONFIG, "digest": format!("sha256:{}", sha256(b"{}")), "size": 2},
        "layers": [{"mediaType": CNCF_LAYER, "digest": format!("sha256:{}", sha256(&module)), "size": module.len()}],
    }))
    .unwrap();
    let basic = base64::engine::general_purpose::STANDARD.encode("tenant-a:pw");
    let (server_addr, server_manifest, server_module) =
        (addr.clone(), manifest.clone(), module.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (addr, manifest, module, basic) = (
                server_addr.clone(),
                server_manifest.clone(),
                server_module.clone(),
                basic.clone(),
            );
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = request.split(' ').nth(1).unwrap_or("").to_string();
                let authorized = request.contains("Authorization: Bearer token-of-a")
                    || request.contains("authorization: Bearer token-of-a");
                let (status, body): (&str, Vec<u8>) = if path.starts_with("/token") {
                    if request.contains(&format!("Basic {basic}")) {
                        (
                            "200 OK",
                            br#"{"token":"token-of-a","expires_in":300}"#.to_vec(),
                        )
                    } else {
                        ("401 Unauthorized", Vec::new())
                    }
                } else if !authorized {
                    let head = format!(
                        "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nWWW-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"x\"\r\nContent-Length: 0\r\n\r\n"
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    return;
                } else if path.contains("/manifests/") {
                    ("200 OK", manifest)
                } else {
                    ("200 OK", module)
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let reg = Registries::new(&RegistryArgs {
        insecure_registry: vec![addr.clone()],
        module_cache: Some(cache.path().to_path_buf()),
        max_module_mib: 64,
        ..RegistryArgs::default()
    })
    .unwrap();
    let r = OciRef::parse(&format!("oci://{addr}/team-a/private:v1")).unwrap();
    let tenant_a = kubeplug::oci::access::Access {
        credentials: kubeplug::oci::registry::Credentials::from_docker_config(
            format!(r#"{{"auths":{{"{addr}":{{"username":"tenant-a","password":"pw"}}}}}}"#)
                .as_bytes(),
        )
        .unwrap(),
        reach: kubeplug::oci::access::Reach::Listed(vec![addr.clone()]),
    };
    let pulled = transfer::pull_checked(&reg, &r, &tenant_a).await.unwrap();
    assert_eq!(pulled.bytes, module);
    let err = transfer::pull_checked(&reg, &r, &kubeplug::oci::access::Access::anonymous())
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("HTTP 401"), "{err:#}");
    // The first tenant's token still serves the first tenant.
    assert!(transfer::pull_checked(&reg, &r, &tenant_a).await.is_ok());
}
