//! Bounded reads from registries: manifests, blobs, tokens and error bodies, each read with a
//! size limit as it arrives. Pulls go through here rather than through oci-client, which reads
//! every response body whole (a manifest, a token, an error page) with no limit: a registry
//! named by a tenant's Plugin could answer gigabytes and take the host's memory. Pushes (an
//! operator's command, to a registry the operator names) still use oci-client.
//!
//! Authentication is the distribution spec's: a 401 names a Bearer realm (a token is fetched
//! with the credentials for the realm's own host, if any, and kept per repository until it
//! expires) or Basic. Redirects (blob storage on another host) are followed by reqwest, which
//! drops the `Authorization` header when the host changes. A realm and every redirect hop are
//! checked against the pull's [`Access`] before anything is sent to them (see `access`).
//!
//! Nothing a registry answers is echoed: an error status becomes its code and, when the body
//! carries one, one of the distribution spec's fixed error codes; never the body's text.

use super::access::{Access, HopRefused, Hops};
pub use super::fetch_error::{Body, FetchError};
use super::reference::OciRef;
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The largest manifest read (the distribution spec lets registries refuse more than 4 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The largest token response read.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// The most of an error body read (for its distribution-spec error code; never shown).
const MAX_ERROR_BYTES: u64 = 4 << 10;
/// The error codes of the distribution spec: the only words of an error body ever shown.
const SPEC_ERROR_CODES: &[&str] = &[
    "BLOB_UNKNOWN",
    "BLOB_UPLOAD_INVALID",
    "BLOB_UPLOAD_UNKNOWN",
    "DIGEST_INVALID",
    "MANIFEST_BLOB_UNKNOWN",
    "MANIFEST_INVALID",
    "MANIFEST_UNKNOWN",
    "NAME_INVALID",
    "NAME_UNKNOWN",
    "SIZE_INVALID",
    "UNAUTHORIZED",
    "DENIED",
    "UNSUPPORTED",
    "TOOMANYREQUESTS",
];
/// Tokens kept at most (one per registry and repository); the oldest go first.
const MAX_TOKENS: usize = 1024;
/// A token without `expires_in` is kept this long (the spec's default is 60 s).
const DEFAULT_TOKEN_SECS: u64 = 60;

/// A manifest as read: its bytes, their SHA-256 (hex) and the media type it declares.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The bytes, at most [`MAX_MANIFEST_BYTES`].
    pub bytes: Vec<u8>,
    /// Their SHA-256, 64 hex digits: the manifest's digest.
    pub digest: String,
}

/// Registry, repository, and a SHA-256 of the credentials the token was asked with.
type TokenKey = (String, String, String);

/// The HTTP side of pulls: one reqwest client (the registry flags' TLS settings) and the
/// tokens registries handed out.
#[derive(Debug)]
pub struct Fetcher {
    http: reqwest::Client,
    insecure: Vec<String>,
    /// By registry, repository and whose credentials: a token one tenant's credentials
    /// earned is never sent on another's behalf.
    tokens: Mutex<HashMap<TokenKey, (String, Instant)>>,
}

impl Fetcher {
    /// A fetcher speaking plain HTTP to `insecure` hosts, trusting `extra_roots` besides the
    /// system's CAs.
    pub fn new(
        insecure: Vec<String>,
        extra_roots: Vec<reqwest::Certificate>,
    ) -> Result<Fetcher, reqwest::Error> {
        let http = reqwest::Client::builder()
            .referer(false)
            .tls_certs_merge(extra_roots)
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(30))
            .redirect(super::access::redirect_policy())
            .user_agent(concat!("kubeplug/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Fetcher {
            http,
            insecure,
            tokens: Mutex::new(HashMap::new()),
        })
    }

    fn base(&self, r: &OciRef) -> String {
        let scheme = if self.insecure.contains(&r.registry) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", r.registry, r.repository)
    }

    /// The manifest `reference` (a tag, or `sha256:…`) of `r`'s repository, read to at most
    /// [`MAX_MANIFEST_BYTES`]. Asked by digest, the bytes must have that digest.
    pub async fn manifest(
        &self,
        r: &OciRef,
        reference: &str,
        accept: &[&str],
        access: &Access,
    ) -> Result<Manifest, FetchError> {
        let url = format!("{}/manifests/{reference}", self.base(r));
        let accept = accept.join(", ");
        let mut response = self.get(r, &url, Some(&accept), access).await?;
        let bytes = read_bounded(&mut response, &url, Body::Manifest, MAX_MANIFEST_BYTES).await?;
        let digest = hex::encode(Sha256::digest(&bytes));
        if let Some(asked) = reference.strip_prefix("sha256:")
            && asked != digest
        {
            return Err(FetchError::Mismatch {
                url,
                why: format!("the manifest's digest is sha256:{digest}"),
            });
        }
        Ok(Manifest { bytes, digest })
    }

    /// Streams blob `hex` of `r`'s repository into `sink`: at most `size` bytes (what its
    /// descriptor says, itself checked against a limit by the caller), exactly `size`, with
    /// digest `hex`; reading stops as soon as either fails.
    pub async fn blob(
        &self,
        r: &OciRef,
        hex: &str,
        size: u64,
        access: &Access,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), FetchError> {
        let url = format!("{}/blobs/sha256:{hex}", self.base(r));
        let mut response = self.get(r, &url, None, access).await?;
        if let Some(len) = response.content_length()
            && len > size
        {
            return Err(FetchError::TooLarge {
                url,
                what: Body::Blob,
                limit: size,
            });
        }
        let mut hasher = Sha256::new();
        let mut read = 0u64;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|source| transport(url.clone(), source))?
        {
            read += chunk.len() as u64;
            if read > size {
                return Err(FetchError::TooLarge {
                    url,
                    what: Body::Blob,
                    limit: size,
                });
            }
            hasher.update(&chunk);
            sink(&chunk).map_err(|e| FetchError::Mismatch {
                url: url.clone(),
                why: format!("writing the blob: {e}"),
            })?;
        }
        if read != size {
            return Err(FetchError::Mismatch {
                url,
                why: format!("the blob is {read} bytes, its descriptor says {size} (truncated?)"),
            });
        }
        let got = hex::encode(hasher.finalize());
        if got != hex {
            return Err(FetchError::Mismatch {
                url,
                why: format!("the blob's digest is sha256:{got}"),
            });
        }
        Ok(())
    }

    /// Blob `hex` of `size` bytes, read whole (configs, signatures: small by their limits).
    pub async fn blob_bytes(
        &self,
        r: &OciRef,
        hex: &str,
        size: u64,
        access: &Access,
    ) -> Result<Vec<u8>, FetchError> {
        let mut out = Vec::with_capacity(size.min(1 << 20) as usize);
        self.blob(r, hex, size, access, |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// A GET with the repository's token (or the registry's basic credentials); on a 401,
    /// authenticates as the challenge says and asks once more. Any other error status is an
    /// error.
    async fn get(
        &self,
        r: &OciRef,
        url: &str,
        accept: Option<&str>,
        access: &Access,
    ) -> Result<reqwest::Response, FetchError> {
        let origin = reqwest::Url::parse(url).map_err(|e| FetchError::Auth {
            url: url.into(),
            why: format!("not a URL: {e}"),
        })?;
        let hops = Hops {
            access: access.clone(),
            origin: origin.clone(),
        };
        let auth = access.auth_for(&r.registry);
        let key = (
            r.registry.clone(),
            r.repository.clone(),
            access.credentials.fingerprint(),
        );
        let token = self.token(&key);
        let response = self
            .send(&hops, url, accept, &auth, token.as_deref())
            .await?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return check(response, url).await;
        }
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .unwrap_or_default();
        let token = match parse_challenge(&challenge) {
            Challenge::Bearer { realm, service } => {
                let token = self
                    .fetch_token(r, url, &hops, &realm, service.as_deref(), &key)
                    .await?;
                Some(token)
            }
            Challenge::Basic if matches!(auth, RegistryAuth::Basic(..)) => None,
            Challenge::Basic => {
                return Err(FetchError::Auth {
                    url: url.into(),
                    why: format!(
                        "the registry asks for credentials and none are known for {} (--registry-config, or the Plugin's pullSecret)",
                        r.registry
                    ),
                });
            }
            Challenge::Other => {
                // The header is the registry's text: not shown.
                return Err(FetchError::Auth {
                    url: url.into(),
                    why: "HTTP 401 with an authentication challenge this client does not speak (neither Bearer with a realm nor Basic)".into(),
                });
            }
        };
        let response = self
            .send(&hops, url, accept, &auth, token.as_deref())
            .await?;
        if response.status() == reqwest::StatusCode::UNAUTHORIZED {
            return Err(FetchError::Auth {
                url: url.into(),
                why: format!(
                    "the registry refused the credentials for {} (HTTP 401)",
                    r.registry
                ),
            });
        }
        check(response, url).await
    }

    /// One GET of `url` (the registry's own) with a token or `auth`, its redirects checked
    /// against `hops`.
    async fn send(
        &self,
        hops: &Hops,
        url: &str,
        accept: Option<&str>,
        auth: &RegistryAuth,
        token: Option<&str>,
    ) -> Result<reqwest::Response, FetchError> {
        let mut request = self.http.get(url);
        if let Some(accept) = accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        request = match (token, auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, RegistryAuth::Bearer(token)) => request.bearer_auth(token),
            (None, RegistryAuth::Anonymous) => request,
        };
        super::access::within(hops.clone(), request.send())
            .await
            .map_err(|source| transport(url, source))
    }

    fn token(&self, key: &TokenKey) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(t, _)| t.clone())
    }

    /// Asks `realm` for a pull token for `r`'s repository: only when the realm is the
    /// registry's own host or one the access lists (else nothing is sent to it), and with
    /// the credentials for the realm's own host, if any. `url` is what the 401 answered.
    async fn fetch_token(
        &self,
        r: &OciRef,
        url: &str,
        hops: &Hops,
        realm: &str,
        service: Option<&str>,
        key: &TokenKey,
    ) -> Result<String, FetchError> {
        let refused = |why| FetchError::Refused {
            url: url.into(),
            what: "the token realm",
            why,
        };
        let parsed = reqwest::Url::parse(realm).map_err(|_| refused(HopRefused::NotHttp))?;
        hops.access
            .check_hop(&hops.origin, &hops.origin, &parsed)
            .map_err(refused)?;
        // The realm is named by its host only: its path and query are the registry's.
        let at = format!(
            "the token realm {}://{}",
            parsed.scheme(),
            super::access::authority(&parsed)
        );
        let auth = hops.access.auth_for_url(&parsed);
        let scope = format!("repository:{}:pull", r.repository);
        let mut query = vec![("scope", scope.as_str())];
        if let Some(s) = service {
            query.push(("service", s));
        }
        let mut request = self.http.get(parsed.clone()).query(&query);
        if let RegistryAuth::Basic(user, password) = &auth {
            request = request.basic_auth(user, Some(password));
        }
        let token_hops = Hops {
            access: hops.access.clone(),
            origin: parsed,
        };
        let response = super::access::within(token_hops, request.send())
            .await
            .map_err(|source| transport(at.clone(), source))?;
        let mut response = check(response, &at).await?;
        let body = read_bounded(&mut response, &at, Body::Token, MAX_TOKEN_BYTES).await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        // serde's message may quote the body: not shown.
        let t: Token = serde_json::from_slice(&body).map_err(|_| FetchError::Auth {
            url: at.clone(),
            why: "the token answer is not JSON with a token".into(),
        })?;
        let Some(token) = t.token.or(t.access_token).filter(|t| !t.is_empty()) else {
            return Err(FetchError::Auth {
                url: at,
                why: "the token answer has no token".into(),
            });
        };
        let ttl = Duration::from_secs(t.expires_in.unwrap_or(DEFAULT_TOKEN_SECS).clamp(1, 3600));
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if tokens.len() >= MAX_TOKENS {
            let now = Instant::now();
            tokens.retain(|_, (_, until)| *until > now);
            if tokens.len() >= MAX_TOKENS
                && let Some(oldest) = tokens
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| k.clone())
            {
                tokens.remove(&oldest);
            }
        }
        tokens.insert(key.clone(), (token.clone(), Instant::now() + ttl));
        Ok(token)
    }
}

/// A transport error, its URL said once (reqwest's own text repeats it); a redirect the
/// pull's access refused is [`FetchError::Refused`].
fn transport(url: impl Into<String>, source: reqwest::Error) -> FetchError {
    if let Some(why) = super::access::refused_hop(&source) {
        return FetchError::Refused {
            url: url.into(),
            what: "a redirect",
            why,
        };
    }
    FetchError::Transport {
        url: url.into(),
        fault: source.without_url(),
    }
}

/// A success passes; an error status becomes [`FetchError::Status`] with the body's
/// distribution-spec error code, if it has one (read to at most 4 KiB, never shown).
async fn check(
    mut response: reqwest::Response,
    url: &str,
) -> Result<reqwest::Response, FetchError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let mut body = Vec::new();
    while (body.len() as u64) < MAX_ERROR_BYTES
        && let Ok(Some(chunk)) = response.chunk().await
    {
        body.extend_from_slice(&chunk);
    }
    Err(FetchError::Status {
        url: url.into(),
        status: status.as_u16(),
        code: spec_error_code(&body),
    })
}

/// The first `errors[].code` of a distribution-spec error body, when it is one of the
/// spec's codes: the only part of a body ever shown.
fn spec_error_code(body: &[u8]) -> Option<&'static str> {
    #[derive(serde::Deserialize)]
    struct Body {
        errors: Vec<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: String,
    }
    let body: Body = serde_json::from_slice(body).ok()?;
    let code = body.errors.first()?.code.as_str();
    SPEC_ERROR_CODES.iter().copied().find(|c| *c == code)
}

/// Reads a body to at most `limit` bytes: an announced length over it fails before reading,
/// and reading stops at the first byte past it.
async fn read_bounded(
    response: &mut reqwest::Response,
    url: &str,
    what: Body,
    limit: u64,
) -> Result<Vec<u8>, FetchError> {
    let too_large = || FetchError::TooLarge {
        url: url.into(),
        what,
        limit,
    };
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|source| transport(url, source))?
    {
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// What a 401's `WWW-Authenticate` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
    },
    Basic,
    Other,
}

/// The first Bearer challenge with a realm, else Basic if offered (http-auth parses the
/// header's grammar).
fn parse_challenge(header: &str) -> Challenge {
    let mut basic = false;
    for challenge in http_auth::ChallengeParser::new(header).flatten() {
        if challenge.scheme.eq_ignore_ascii_case("bearer") {
            let param = |name: &str| {
                challenge
                    .params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            if let Some(realm) = param("realm") {
                return Challenge::Bearer {
                    realm,
                    service: param("service"),
                };
            }
        } else if challenge.scheme.eq_ignore_ascii_case("basic") {
            basic = true;
        }
    }
    if basic {
        Challenge::Basic
    } else {
        Challenge::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#
            ),
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into())
            }
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="kubeplug-test""#),
            Challenge::Basic
        );
        assert_eq!(parse_challenge("Negotiate"), Challenge::Other);
        assert_eq!(parse_challenge(""), Challenge::Other);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), Challenge::Other);
    }

    #[test]
    fn tokens_are_kept_per_credentials() {
        use super::super::registry::Credentials;
        let config = |u: &str, p: &str| {
            Credentials::from_docker_config(
                format!(r#"{{"auths":{{"r":{{"username":"{u}","password":"{p}"}}}}}}"#).as_bytes(),
            )
            .unwrap()
            .fingerprint()
        };
        assert_eq!(Credentials::default().fingerprint(), "anonymous");
        assert_eq!(config("a", "p"), config("a", "p"));
        assert_ne!(config("a", "p"), config("a", "q"));
        assert_ne!(config("a", "p"), "anonymous");
        assert!(!config("a", "secret").contains("secret"));
    }

    /// An error body is never shown: only its status and a code of the spec's list.
    #[test]
    fn error_bodies_give_a_spec_code_at_most() {
        assert_eq!(
            spec_error_code(br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"secret text"}]}"#),
            Some("MANIFEST_UNKNOWN")
        );
        assert_eq!(
            spec_error_code(br#"{"errors":[{"code":"INTERNAL_SECRET_42"}]}"#),
            None
        );
        assert_eq!(spec_error_code(b"<html>root:x:0:0</html>"), None);
        let err = FetchError::Status {
            url: "http://r/v2/x/manifests/v1".into(),
            status: 404,
            code: Some("MANIFEST_UNKNOWN"),
        };
        assert_eq!(
            err.to_string(),
            "http://r/v2/x/manifests/v1: HTTP 404 (MANIFEST_UNKNOWN)"
        );
    }
}
