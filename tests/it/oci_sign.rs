//! cosign signatures of modules (issue 26, items 2 and 3) against a real registry (Debian's
//! `docker-registry`, see `registry.rs`): `kubeplug keygen`, `sign` with openssl's PKCS#8
//! key and with keygen's encrypted key, `verify` (exit 1 naming the reason), verification
//! configs (`allOf`, `anyOf` with `minimumMatches`, annotations), `pull` and `eval` refusing
//! what is not signed as required, and `mirror` keeping signatures verifiable.

use super::registry::Registry;
use kubeplug::oci::keys::SigningKey;
use kubeplug::oci::signature::{self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING};
use kubeplug::oci::transfer::{self, OCI_MANIFEST};
use kubeplug::oci::verification::{self, VerificationConfig, VerifyError};
use kubeplug::oci::{OciRef, Registries};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Runs kubeplug with `env`; its exit code, stdout and stderr.
fn kubeplug(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
    cmd.args(args).env_remove("COSIGN_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A module's bytes: pull checks the layout and the digests, not the component.
fn module(tag: &str) -> Vec<u8> {
    format!("\0asm\x0d\0\x01\0 component {tag}").into_bytes()
}

async fn push(client: &Registries, r: &OciRef, tag: &str) -> OciRef {
    let digest = transfer::push(client, r, &module(tag)).await.unwrap();
    r.pinned(&digest)
}

fn pem_block(pem: &str) -> String {
    pem.lines().map(|l| format!("      {l}\n")).collect()
}

fn pub_key_rule(key: &SigningKey, annotations: &str) -> String {
    format!(
        "  - kind: pubKey\n{annotations}    key: |\n{}",
        pem_block(&key.public().to_pem())
    )
}

/// The command line: openssl's P-256 key and keygen's encrypted key both sign the same
/// module (the second appends, it does not replace); verify accepts each public key, and
/// exits 1 naming the reason for an unsigned module, a key that signed nothing and a
/// wrong password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keygen_sign_verify_on_the_command_line() {
    let Some(reg) = Registry::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let cache = dir.join("cache");
    let client = Registries::new(&reg.args(&cache)).unwrap();
    let signed = push(&client, &reg.reference("team-a/pinner:v1"), "signed").await;
    let unsigned = push(&client, &reg.reference("team-a/other:v1"), "unsigned").await;
    let flags = [
        "--insecure-registry".to_string(),
        reg.addr.clone(),
        "--module-cache".to_string(),
        cache.to_str().unwrap().to_string(),
    ];
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        kubeplug(&all, env)
    };
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();

    // openssl's unencrypted PKCS#8 key.
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl on PATH");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &path("openssl.pem"),
    ]);
    openssl(&[
        "pkey",
        "-in",
        &path("openssl.pem"),
        "-pubout",
        "-out",
        &path("openssl.pub"),
    ]);

    // keygen: COSIGN_PASSWORD required; the pair written; never overwritten.
    let prefix = path("cosign");
    let (code, _, err) = kubeplug(&["keygen", "--output-key-prefix", &prefix], &[]);
    assert!(code == 1 && err.contains("set COSIGN_PASSWORD"), "{err}");
    let (code, _, err) = kubeplug(
        &["keygen", "--output-key-prefix", &prefix],
        &[("COSIGN_PASSWORD", "s3cret")],
    );
    assert_eq!(code, 0, "{err}");
    let private = std::fs::read_to_string(dir.join("cosign.key")).unwrap();
    assert!(private.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("cosign.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let (code, _, err) = kubeplug(
        &["keygen", "--output-key-prefix", &prefix],
        &[("COSIGN_PASSWORD", "s3cret")],
    );
    assert!(
        code == 1 && err.contains("exists: not overwritten"),
        "{err}"
    );

    // Sign with both; a tag is refused (it can move).
    let pinned = signed.to_string();
    let tagged = reg.reference("team-a/pinner:v1").to_string();
    let (code, _, err) = run(&["sign", "--key", &path("openssl.pem"), &tagged], &[]);
    assert!(code == 1 && err.contains("sign a digest"), "{err}");
    let (code, out, err) = run(&["sign", "--key", &path("openssl.pem"), &pinned], &[]);
    assert_eq!(code, 0, "{err}");
    let hex = signed.digest.clone().unwrap();
    assert!(
        out.trim().contains(&format!(":sha256-{hex}.sig@sha256:")),
        "{out}"
    );
    let (code, _, err) = run(
        &["sign", "--key", &path("cosign.key"), &pinned],
        &[("COSIGN_PASSWORD", "wrong")],
    );
    assert!(
        code == 1 && err.contains("wrong password (COSIGN_PASSWORD)"),
        "{err}"
    );
    let (code, _, err) = run(&["sign", "--key", &path("cosign.key"), &pinned], &[]);
    assert!(code == 1 && err.contains("set COSIGN_PASSWORD"), "{err}");
    let (code, _, err) = run(
        &["sign", "--key", &path("cosign.key"), &pinned],
        &[("COSIGN_PASSWORD", "s3cret")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(2 signature(s) on it)"), "{err}");

    // Both keys verify, by tag (resolved, the pinned reference printed) and by digest.
    for key in ["openssl.pub", "cosign.pub"] {
        let (code, out, err) = run(&["verify", "--key", &path(key), &tagged], &[]);
        assert_eq!(code, 0, "{key}: {err}");
        assert_eq!(out.trim(), format!("{tagged}@sha256:{hex}"));
        assert!(err.contains("verified: allOf[0] (key sha256:"), "{err}");
    }
    // Unsigned, and a key that signed nothing: exit 1 with the reason.
    let (code, _, err) = run(
        &[
            "verify",
            "--key",
            &path("openssl.pub"),
            &unsigned.to_string(),
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is not signed: no signature manifest"),
        "{err}"
    );
    let stranger = SigningKey::generate().public();
    std::fs::write(dir.join("stranger.pub"), stranger.to_pem()).unwrap();
    let (code, _, err) = run(&["verify", "--key", &path("stranger.pub"), &pinned], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "allOf[0] (key {stranger}): no signature by this key (2 signature(s) found"
        )),
        "{err}"
    );
    // An annotation the signatures do not carry.
    let (code, _, err) = run(
        &[
            "verify",
            "--key",
            &path("openssl.pub"),
            "-a",
            "env=prod",
            &pinned,
        ],
        &[],
    );
    assert!(
        code == 1 && err.contains("without the annotation env=prod"),
        "{err}"
    );
}

/// Verification configs against real signatures: allOf, anyOf with minimumMatches, required
/// annotations, a signature that names another digest, a payload over its bound, and
/// signing twice with one key adding nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_rules_against_signatures_in_a_registry() {
    let Some(reg) = Registry::start() else { return };
    let cache = tempfile::tempdir().unwrap();
    let client = Registries::new(&reg.args(cache.path())).unwrap();
    let m1 = push(&client, &reg.reference("team-a/m:v1"), "one").await;
    let m2 = push(&client, &reg.reference("team-a/m:v2"), "two").await;
    let (a, b, c) = (
        SigningKey::generate(),
        SigningKey::generate(),
        SigningKey::generate(),
    );
    let prod: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
    let first = signature::sign(&client, &m1, &a, &prod).await.unwrap();
    assert_eq!((first.count, first.already), (1, false));
    let second = signature::sign(&client, &m1, &b, &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!((second.count, second.already), (2, false));
    let again = signature::sign(&client, &m1, &a, &prod).await.unwrap();
    assert_eq!((again.count, again.already), (2, true));
    assert_eq!(again.manifest, second.manifest);

    let config =
        |text: String| VerificationConfig::parse(&format!("apiVersion: v1\n{text}")).unwrap();
    let verify = |c: VerificationConfig, r: OciRef| {
        let client = client.clone();
        async move { verification::verify(&client, &r, &c).await }
    };

    // allOf: each rule met, in order; the keys listed.
    let both = config(format!(
        "allOf:\n{}{}",
        pub_key_rule(&a, ""),
        pub_key_rule(&b, "")
    ));
    let ok = verify(both, m1.clone()).await.unwrap();
    assert_eq!(ok.digest, m1.digest.clone().unwrap());
    assert_eq!(ok.matched.len(), 2);
    assert_eq!(ok.matched[0].key, a.public().id());
    assert_eq!(ok.matched[1].key, b.public().id());
    let with_c = config(format!(
        "allOf:\n{}{}",
        pub_key_rule(&a, ""),
        pub_key_rule(&c, "")
    ));
    let err = verify(with_c, m1.clone()).await.unwrap_err();
    assert!(!err.is_transient());
    assert!(
        err.to_string().starts_with(&format!(
            "allOf[1] (key {}): no signature by this key",
            c.public()
        )),
        "{err}"
    );

    // anyOf with minimumMatches.
    let any = |n: u32| {
        config(format!(
            "anyOf:\n  minimumMatches: {n}\n  signatures:\n{}{}{}",
            pub_key_rule(&a, ""),
            pub_key_rule(&b, ""),
            pub_key_rule(&c, "")
        ))
    };
    assert_eq!(verify(any(2), m1.clone()).await.unwrap().matched.len(), 2);
    let err = verify(any(3), m1.clone()).await.unwrap_err().to_string();
    assert!(
        err.starts_with("anyOf: 2 of 3 required signatures matched (anyOf.signatures[2] (key "),
        "{err}"
    );

    // Annotations: the payload carries env=prod for a.
    let want = |v: &str| {
        config(format!(
            "allOf:\n{}",
            pub_key_rule(&a, &format!("    annotations:\n      env: {v}\n"))
        ))
    };
    assert!(verify(want("prod"), m1.clone()).await.is_ok());
    let err = verify(want("dev"), m1.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("without the annotation env=dev"), "{err}");

    // Several configs (the host's and a PluginPolicy's): each must pass, its rules named.
    let host = config(format!("allOf:\n{}", pub_key_rule(&a, "")));
    let tenant_ok = config(format!("allOf:\n{}", pub_key_rule(&b, "")));
    let tenant_bad = config(format!("allOf:\n{}", pub_key_rule(&c, "")));
    let auth = client.access();
    let both = verification::verify_all(
        &client,
        &m1,
        &[("", &host), ("PluginPolicy tenant", &tenant_ok)],
        &auth,
    )
    .await
    .unwrap();
    assert_eq!(both.matched.len(), 2);
    assert!(
        both.matched[1]
            .rule
            .starts_with("PluginPolicy tenant: allOf[0] (key ")
    );
    let err = verification::verify_all(
        &client,
        &m1,
        &[("", &host), ("PluginPolicy tenant", &tenant_bad)],
        &auth,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(&format!(
            "PluginPolicy tenant: allOf[0] (key {}): no signature by this key",
            c.public()
        )),
        "{err}"
    );
    let err = verification::verify_all(&client, &m1, &[("PluginPolicy p", &any(3))], &auth)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("PluginPolicy p: anyOf: 2 of 3 required"),
        "{err}"
    );
    assert!(
        verification::verify_all(&client, &m1, &[], &auth)
            .await
            .is_err()
    );

    // Unsigned.
    let only_a = config(format!("allOf:\n{}", pub_key_rule(&a, "")));
    let err = verify(only_a.clone(), m2.clone()).await.unwrap_err();
    assert!(matches!(err, VerifyError::Unsigned { .. }), "{err}");
    // m1's signatures copied under m2's signature tag: valid signatures, for another digest.
    let hex1 = m1.digest.clone().unwrap();
    let hex2 = m2.digest.clone().unwrap();
    let sig1 = client
        .fetch
        .manifest(
            &m1,
            &signature::signature_tag(&hex1),
            &[OCI_MANIFEST],
            &client.access(),
        )
        .await
        .unwrap();
    let tag2 = reg.reference(&format!("team-a/m:{}", signature::signature_tag(&hex2)));
    transfer::push_raw(&client, &tag2, &[], &sig1.bytes)
        .await
        .unwrap();
    let err = verify(only_a.clone(), m2.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "signed by this key for another digest (sha256:{hex1}), not this one"
        )),
        "{err}"
    );

    // A signature layer over 64 KiB is not read (and so matches nothing), even signed.
    let m3 = push(&client, &reg.reference("team-a/m:v3"), "three").await;
    let hex3 = m3.digest.clone().unwrap();
    let text = String::from_utf8(signature::payload(&m3, &hex3, &BTreeMap::new())).unwrap();
    let big = format!(
        "{},\"pad\":\"{}\"}}",
        &text[..text.len() - 1],
        "x".repeat(70 << 10)
    );
    let big = big.into_bytes();
    assert!(big.len() as u64 > signature::MAX_PAYLOAD_BYTES);
    let sig = base64_of(&a.sign(&big));
    let config_blob = b"{}".to_vec();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config_blob),
        "layers": [{
            "mediaType": SIMPLE_SIGNING,
            "digest": format!("sha256:{}", hex::encode(Sha256::digest(&big))),
            "size": big.len(),
            "annotations": {SIGNATURE_ANNOTATION: sig},
        }],
    });
    let tag3 = reg.reference(&format!("team-a/m:{}", signature::signature_tag(&hex3)));
    transfer::push_raw(
        &client,
        &tag3,
        &[&big, &config_blob],
        &serde_json::to_vec(&manifest).unwrap(),
    )
    .await
    .unwrap();
    let err = verify(only_a.clone(), m3).await.unwrap_err().to_string();
    assert!(
        err.contains("0 signature(s) found, none by it; 1 layer(s) not read"),
        "{err}"
    );

    // At most 128 signatures are read: the 129th, the only good one, is not; nor is one whose
    // annotation is over 4 KiB. All name one payload, read once.
    let m4 = push(&client, &reg.reference("team-a/m:v4"), "four").await;
    let hex4 = m4.digest.clone().unwrap();
    let payload4 = signature::payload(&m4, &hex4, &BTreeMap::new());
    let layer = |sig: String| {
        json!({
            "mediaType": SIMPLE_SIGNING,
            "digest": format!("sha256:{}", hex::encode(Sha256::digest(&payload4))),
            "size": payload4.len(),
            "annotations": {SIGNATURE_ANNOTATION: sig},
        })
    };
    let mut layers: Vec<serde_json::Value> = (0..signature::MAX_SIGNATURES)
        .map(|i| layer(base64_of(&c.sign(format!("{i}").as_bytes()))))
        .collect();
    layers.insert(0, layer("A".repeat(5 << 10)));
    layers.push(layer(base64_of(&a.sign(&payload4))));
    let manifest = json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config_blob),
        "layers": layers,
    });
    let tag4 = reg.reference(&format!("team-a/m:{}", signature::signature_tag(&hex4)));
    transfer::push_raw(
        &client,
        &tag4,
        &[&payload4, &config_blob],
        &serde_json::to_vec(&manifest).unwrap(),
    )
    .await
    .unwrap();
    let err = verify(only_a, m4).await.unwrap_err().to_string();
    assert!(
        err.contains("128 signature(s) found, none by it; 2 layer(s) not read"),
        "{err}"
    );
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn descriptor(media_type: &str, bytes: &[u8]) -> serde_json::Value {
    json!({
        "mediaType": media_type,
        "digest": format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
        "size": bytes.len(),
    })
}

fn write_config(dir: &Path, key: &SigningKey) -> String {
    let path = dir.join("verification.yml");
    std::fs::write(
        &path,
        format!("apiVersion: v1\nallOf:\n{}", pub_key_rule(key, "")),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// With --verification-config, `pull` and `eval --plugin oci://` refuse an unsigned or
/// wrongly signed module before downloading it (nothing in the module cache, no output
/// file), and take a signed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_and_eval_refuse_what_is_not_signed_as_required() {
    let Some(reg) = Registry::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let client = Registries::new(&reg.args(&cache)).unwrap();
    let wasm = crate::common::plugin("image-pinner");
    let bytes = std::fs::read(&wasm).unwrap();
    let tagged = reg.reference("team-a/image-pinner:v1");
    let pinned = tagged.pinned(&transfer::push(&client, &tagged, &bytes).await.unwrap());
    let key = SigningKey::generate();
    let config = write_config(work.path(), &key);
    let flags = [
        "--insecure-registry",
        reg.addr.as_str(),
        "--module-cache",
        cache.to_str().unwrap(),
        "--verification-config",
        config.as_str(),
    ];
    let out_file = work.path().join("pulled.wasm");
    let tagged_text = tagged.to_string();
    let pull = || {
        let mut args = vec![
            "pull",
            tagged_text.as_str(),
            "-o",
            out_file.to_str().unwrap(),
        ];
        args.extend(flags);
        kubeplug(&args, &[])
    };
    let fixture = crate::common::fixture("web-alpine.yaml");
    let compile_cache = work.path().join("compiled");
    let eval = || {
        let mut args = vec![
            "eval",
            "--plugin",
            tagged_text.as_str(),
            "--object",
            fixture.to_str().unwrap(),
            "--compile-cache",
            compile_cache.to_str().unwrap(),
        ];
        args.extend(flags);
        kubeplug(&args, &[])
    };
    let module_hex = hex::encode(Sha256::digest(&bytes));
    let cached = || client.cache.module(&module_hex).is_some();

    let (code, _, err) = pull();
    assert!(code == 1 && err.contains("is not signed"), "{err}");
    let (code, _, err) = eval();
    assert!(code == 1 && err.contains("is not signed"), "{err}");
    // Signed by another key: refused naming the rule.
    signature::sign(&client, &pinned, &SigningKey::generate(), &BTreeMap::new())
        .await
        .unwrap();
    let (code, _, err) = pull();
    assert!(
        code == 1
            && err.contains("allOf[0] (key sha256:")
            && err.contains("no signature by this key"),
        "{err}"
    );
    let (code, _, err) = eval();
    assert!(code == 1 && err.contains("allOf[0] (key sha256:"), "{err}");
    assert!(
        !out_file.exists() && !cached(),
        "a refused module was downloaded"
    );
    assert!(!compile_cache.exists() || std::fs::read_dir(&compile_cache).unwrap().next().is_none());

    // Signed by the key: pulled and run.
    signature::sign(&client, &pinned, &key, &BTreeMap::new())
        .await
        .unwrap();
    let (code, out, err) = pull();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), pinned.to_string());
    assert_eq!(std::fs::read(&out_file).unwrap(), bytes);
    let (code, out, err) = eval();
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["plugin"]["name"], "image-pinner");

    // A broken config is an error, never "no verification".
    std::fs::write(
        &config,
        "apiVersion: v1\nallOf:\n  - kind: githubAction\n    owner: x\n",
    )
    .unwrap();
    let (code, _, err) = pull();
    assert!(
        code == 1 && err.contains("keyless (Fulcio/Rekor) needs the internet"),
        "{err}"
    );
}

/// `kubeplug mirror` copies the signatures with the module: the destination verifies with the
/// same key, and its signature manifest has the source's digest; signatures made at the
/// destination are kept when mirroring again. With --verification-config the source is
/// verified before anything is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_keeps_signatures_verifiable() {
    let Some(src) = Registry::start() else { return };
    let Some(dst) = Registry::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let mut args = src.args(&cache);
    args.insecure_registry.push(dst.addr.clone());
    let client = Registries::new(&args).unwrap();
    let source = push(&client, &src.reference("team-a/pinner:v1"), "mirrored").await;
    let unsigned = push(&client, &src.reference("team-a/unsigned:v1"), "plain").await;
    let key = SigningKey::generate();
    let signed = signature::sign(&client, &source, &key, &BTreeMap::new())
        .await
        .unwrap();
    let config = write_config(work.path(), &key);
    let dst_repo = format!("oci://{}/mirror/pinner", dst.addr);
    let mirror = |from: &str, verify: bool| {
        let mut a = vec![
            "mirror",
            from,
            dst_repo.as_str(),
            "--insecure-registry",
            src.addr.as_str(),
            "--insecure-registry",
            dst.addr.as_str(),
            "--module-cache",
            cache.to_str().unwrap(),
        ];
        if verify {
            a.extend(["--verification-config", config.as_str()]);
        }
        kubeplug(&a, &[])
    };
    let (code, _, err) = mirror(&unsigned.to_string(), true);
    assert!(code == 1 && err.contains("is not signed"), "{err}");
    let (code, out, err) = mirror(&source.to_string(), true);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 signature(s) copied"), "{err}");
    let at_dst = OciRef::parse(out.trim()).unwrap();
    assert_eq!(at_dst.digest, source.digest);
    let c = VerificationConfig::parse(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let ok = verification::verify(&client, &at_dst, &c).await.unwrap();
    assert_eq!(ok.matched[0].key, key.public().id());
    let hex = source.digest.clone().unwrap();
    let copied = client
        .fetch
        .manifest(
            &at_dst,
            &signature::signature_tag(&hex),
            &[OCI_MANIFEST],
            &client.access(),
        )
        .await
        .unwrap();
    assert_eq!(Some(copied.digest), signed.manifest.digest);
    // Signed at the destination by another key, then mirrored again: both signatures kept.
    let local = SigningKey::generate();
    signature::sign(&client, &at_dst, &local, &BTreeMap::new())
        .await
        .unwrap();
    let (code, _, err) = mirror(&source.to_string(), false);
    assert!(code == 0 && err.contains("0 signature(s) copied"), "{err}");
    let second = SigningKey::generate();
    signature::sign(&client, &source, &second, &BTreeMap::new())
        .await
        .unwrap();
    let (code, _, err) = mirror(&source.to_string(), false);
    assert!(code == 0 && err.contains("1 signature(s) copied"), "{err}");
    let read = signature::read(&client, &at_dst, &client.access())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.entries.len(), 3);
    let all_three = VerificationConfig::parse(&format!(
        "apiVersion: v1\nallOf:\n{}{}{}",
        pub_key_rule(&key, ""),
        pub_key_rule(&local, ""),
        pub_key_rule(&second, "")
    ))
    .unwrap();
    assert_eq!(
        verification::verify(&client, &at_dst, &all_three)
            .await
            .unwrap()
            .matched
            .len(),
        3
    );

    // Mirroring an unsigned module (no config) copies no signature, and says so.
    let (code, _, err) = mirror(&unsigned.to_string(), false);
    assert!(code == 0 && err.contains("0 signature(s) copied"), "{err}");
}

/// `eval` of a file with `--verification-config` is refused rather than run unverified: a
/// file carries no signature.
#[test]
fn eval_of_a_file_with_a_verification_config_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let key = SigningKey::generate();
    let config = work.path().join("v.yml");
    std::fs::write(
        &config,
        format!("apiVersion: v1\nallOf:\n{}", pub_key_rule(&key, "")),
    )
    .unwrap();
    let wasm = crate::common::plugin("image-pinner");
    let object = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/web-alpine.yaml"
    );
    let (code, _, err) = kubeplug(
        &[
            "eval",
            "--plugin",
            wasm.to_str().unwrap(),
            "--object",
            object,
            "--verification-config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is a file, which carries none"), "{err}");
}
