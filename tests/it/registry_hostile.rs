//! Registries a tenant names, played by hostile fakes (issue 35, finding 2): a token realm or
//! a redirect pointing at a host no policy lists is never contacted, and the pull fails
//! naming the host; credentials go only to the host they belong to; an error body (an
//! internal service's answer, read back) never reaches an error message.

use kubeplug::oci::access::{Access, Reach};
use kubeplug::oci::registry::Credentials;
use kubeplug::oci::transfer::{self, CNCF_CONFIG, CNCF_LAYER};
use kubeplug::oci::{OciRef, Registries, RegistryArgs};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[allow(
    dead_code,
    reason = "its connection counts serve the host's unit tests"
)]
mod trickling;
pub use trickling::trickling_registry;

/// One request as a fake server saw it: its path and its headers (lowercase names).
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: status line, extra headers, body.
pub struct Answer {
    pub status: &'static str,
    pub headers: Vec<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn ok(body: Vec<u8>) -> Answer {
        Answer {
            status: "200 OK",
            headers: Vec::new(),
            body,
        }
    }
}

/// A fake HTTP server on 127.0.0.1 answering each request (`Connection: close`) with
/// `answer`; every request it saw, in order.
pub async fn serve(
    answer: impl Fn(&Seen, &str) -> Answer + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (server_seen, server_addr, answer) = (seen.clone(), addr.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (seen, addr, answer) = (server_seen.clone(), server_addr.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let mut lines = request.split("\r\n");
                let path = lines
                    .next()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or("")
                    .to_string();
                let headers = lines
                    .take_while(|l| !l.is_empty())
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let request = Seen { path, headers };
                seen.lock().unwrap().push(request.clone());
                let a = answer(&request, &addr);
                let mut head = format!(
                    "HTTP/1.1 {}\r\nConnection: close\r\nContent-Length: {}\r\n",
                    a.status,
                    a.body.len()
                );
                for h in &a.headers {
                    head.push_str(h);
                    head.push_str("\r\n");
                }
                head.push_str("\r\n");
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&a.body).await;
            });
        }
    });
    (addr, seen)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A module and the manifest naming it.
fn module_and_manifest() -> (Vec<u8>, Vec<u8>) {
    let module = b"\0asm\x0d\0\x01\0 hostile".to_vec();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": CNCF_CONFIG, "digest": format!("sha256:{}", sha256(b"{}")), "size": 2},
        "layers": [{"mediaType": CNCF_LAYER, "digest": format!("sha256:{}", sha256(&module)), "size": module.len()}],
    }))
    .unwrap();
    (module, manifest)
}

/// Registry flags speaking plain HTTP to `hosts`.
fn registries(hosts: &[&String], cache: &tempfile::TempDir) -> Registries {
    Registries::new(&RegistryArgs {
        insecure_registry: hosts.iter().map(|h| h.to_string()).collect(),
        module_cache: Some(cache.path().to_path_buf()),
        max_module_mib: 64,
        ..RegistryArgs::default()
    })
    .unwrap()
}

/// A tenant's pull: its pull Secret's `auths` (host → user) and the hosts its policies list.
fn tenant(auths: &[(&String, &str)], listed: &[&String]) -> Access {
    let entries: Vec<String> = auths
        .iter()
        .map(|(host, user)| format!(r#""{host}":{{"username":"{user}","password":"pw-{user}"}}"#))
        .collect();
    Access {
        credentials: Credentials::from_docker_config(
            format!(r#"{{"auths":{{{}}}}}"#, entries.join(",")).as_bytes(),
        )
        .unwrap(),
        reach: Reach::Listed(listed.iter().map(|h| h.to_string()).collect()),
    }
}

/// A registry asking for a token at `realm` (written with `{other}` for the other server's
/// address), and accepting `Bearer good-token`.
async fn registry_with_realm(
    realm: &'static str,
    other: String,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let (_, manifest) = module_and_manifest();
    let (module, _) = module_and_manifest();
    serve(move |req, _| {
        if req.header("authorization") != Some("Bearer good-token") {
            return Answer {
                status: "401 Unauthorized",
                headers: vec![format!(
                    "WWW-Authenticate: Bearer realm=\"{}\",service=\"r\"",
                    realm.replace("{other}", &other)
                )],
                body: Vec::new(),
            };
        }
        if req.path.contains("/manifests/") {
            Answer::ok(manifest.clone())
        } else {
            Answer::ok(module.clone())
        }
    })
    .await
}

/// A token server handing out `good-token` to anyone.
async fn token_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    serve(|_, _| Answer::ok(br#"{"token":"good-token"}"#.to_vec())).await
}

/// The finding: an allowed registry's realm on another host got the tenant's pull-Secret
/// credentials. Now a realm on a host no policy lists is never contacted (the other host
/// sees no request at all), and the pull fails naming the host and nothing of the realm's
/// path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_realm_on_an_unlisted_host_is_never_contacted() {
    let (other, other_seen) = token_server().await;
    let (reg, _) =
        registry_with_realm("http://{other}/token/secret-path?leak=1", other.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let client = registries(&[&reg, &other], &cache);
    let r = OciRef::parse(&format!("oci://{reg}/team-a/m:v1")).unwrap();
    let access = tenant(&[(&reg, "tenant"), (&other, "tenant")], &[&reg]);
    let err = format!(
        "{:#}",
        transfer::pull_checked(&client, &r, &access)
            .await
            .unwrap_err()
    );
    assert!(
        other_seen.lock().unwrap().is_empty(),
        "the unlisted realm was contacted: {:?}",
        other_seen.lock().unwrap()
    );
    assert!(err.contains("the token realm refused"), "{err}");
    assert!(
        err.contains(&format!("{other} is neither the registry")),
        "{err}"
    );
    assert!(
        !err.contains("secret-path") && !err.contains("leak"),
        "{err}"
    );
}

/// A realm on a listed other host gets that host's entry of the pull Secret, if any, and
/// never the registry's: with no entry for it, the token is asked anonymously.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_realm_gets_only_its_own_credentials() {
    let (other, other_seen) = token_server().await;
    let (reg, reg_seen) = registry_with_realm("http://{other}/token", other.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let client = registries(&[&reg, &other], &cache);
    let r = OciRef::parse(&format!("oci://{reg}/team-a/m:v1")).unwrap();
    let basic = |user: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:pw-{user}"))
        )
    };
    // Only the registry's entry: the realm is asked without credentials.
    let access = tenant(&[(&reg, "for-registry")], &[&reg, &other]);
    transfer::pull_checked(&client, &r, &access).await.unwrap();
    let asked = other_seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].path.starts_with("/token?"), "{asked:?}");
    assert_eq!(asked[0].header("authorization"), None, "{asked:?}");
    // The registry got its own entry (on the first request) and then the token.
    assert!(
        reg_seen
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.header("authorization") != Some(basic("for-realm").as_str()))
    );
    // An entry for the realm's host goes to the realm, and only there.
    let cache = tempfile::tempdir().unwrap();
    let client = registries(&[&reg, &other], &cache);
    let access = tenant(
        &[(&reg, "for-registry"), (&other, "for-realm")],
        &[&reg, &other],
    );
    transfer::pull_checked(&client, &r, &access).await.unwrap();
    let asked = other_seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(
        asked[1].header("authorization"),
        Some(basic("for-realm").as_str())
    );
    assert!(
        reg_seen
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.header("authorization") != Some(basic("for-realm").as_str())),
        "the realm's credentials reached the registry"
    );
}

/// A blob redirect to a host no policy lists (an internal service) is refused before any
/// request reaches it; one to a listed host is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_an_unlisted_host_is_refused() {
    let (module, manifest) = module_and_manifest();
    let (internal, internal_seen) = serve(|_, _| Answer {
        status: "403 Forbidden",
        headers: Vec::new(),
        body: b"internal-admin-token=hunter2".to_vec(),
    })
    .await;
    let (storage, storage_seen) = serve(move |_, _| Answer::ok(module.clone())).await;
    let to = Arc::new(Mutex::new(internal.clone()));
    let target = to.clone();
    let (reg, _) = serve(move |req, _| {
        if req.path.contains("/manifests/") {
            Answer::ok(manifest.clone())
        } else {
            Answer {
                status: "307 Temporary Redirect",
                headers: vec![format!(
                    "Location: http://{}/blob/private?sig=1",
                    target.lock().unwrap()
                )],
                body: Vec::new(),
            }
        }
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let client = registries(&[&reg, &internal, &storage], &cache);
    let r = OciRef::parse(&format!("oci://{reg}/team-a/m:v1")).unwrap();
    let access = tenant(&[], &[&reg, &storage]);
    let err = format!(
        "{:#}",
        transfer::pull_checked(&client, &r, &access)
            .await
            .unwrap_err()
    );
    assert!(
        internal_seen.lock().unwrap().is_empty(),
        "the unlisted host was contacted"
    );
    assert!(err.contains("a redirect refused"), "{err}");
    assert!(
        err.contains(&format!("{internal} is neither the registry")),
        "{err}"
    );
    assert!(!err.contains("private") && !err.contains("sig=1"), "{err}");
    // Blob storage the policy lists is fine.
    *to.lock().unwrap() = storage.clone();
    transfer::pull_checked(&client, &r, &access).await.unwrap();
    assert_eq!(storage_seen.lock().unwrap().len(), 1);
}

/// The read-back half of the finding: an error body (here the registry's own 403, as an
/// internal service would answer) never reaches the error, only its status and a code of
/// the distribution spec's list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_body_is_never_echoed() {
    let (reg, _) = serve(|req, _| Answer {
        status: "403 Forbidden",
        headers: Vec::new(),
        body: if req.path.contains("/spec/") {
            br#"{"errors":[{"code":"DENIED","message":"internal-admin-token=hunter2"}]}"#.to_vec()
        } else {
            b"internal-admin-token=hunter2".to_vec()
        },
    })
    .await;
    let cache = tempfile::tempdir().unwrap();
    let client = registries(&[&reg], &cache);
    for (repo, shown) in [
        ("team-a/m", "HTTP 403"),
        ("team-a/spec/m", "HTTP 403 (DENIED)"),
    ] {
        let r = OciRef::parse(&format!("oci://{reg}/{repo}:v1")).unwrap();
        let err = format!(
            "{:#}",
            transfer::pull_checked(&client, &r, &tenant(&[], &[&reg]))
                .await
                .unwrap_err()
        );
        assert!(err.contains(shown), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("admin"), "{err}");
    }
}
