//! Who may use the status server's private endpoints, and how long a client may stall.
//!
//! - The `Host` a request names must be an IP literal, `localhost`, or a name
//!   `--allow-host` gives, or the dashboard, the stream and `/plugins` answer 403: a page on a
//!   DNS name the attacker controls that resolves to this server (DNS rebinding) sends its
//!   own name, and a rebinding always uses a name (the rule of webpack-dev-server and Vite).
//!   The probes and `/metrics` are exempt: kubelet and Prometheus name the pod by its IP
//!   anyway, or by a Service name, and they expose nothing a page could abuse.
//! - An optional bearer token (`--listen-token-file`) guards the same endpoints (probes and
//!   Prometheus keep `/healthz`, `/readyz` and `/metrics` open).
//! - WebSocket handshakes from a browser page of another origin are refused unless
//!   `--allow-origin` names it.
//! - A client that accepts nothing for the send timeout (a minute) is disconnected.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The most bytes a token file may hold.
const MAX_TOKEN_BYTES: usize = 4096;

/// How long a client may accept nothing while the server has bytes for it.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// The access rules of one server.
#[derive(Debug, Clone)]
pub struct Access {
    token: Option<Arc<str>>,
    origins: Arc<[String]>,
    /// `--allow-host` names, lower case, without a trailing dot; `.example.com` also
    /// allows every name under example.com.
    hosts: Arc<[String]>,
    send_timeout: Duration,
}

impl Default for Access {
    fn default() -> Self {
        Access::new(None, Vec::new())
    }
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// It cannot be read.
    #[error("cannot read the listen token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It holds no token, or more than a token.
    #[error("the listen token file {path} {problem}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl Access {
    /// Rules with this token (if any) and these extra allowed origins
    /// (`https://dash.example.com`).
    pub fn new(token: Option<String>, origins: Vec<String>) -> Access {
        Access {
            token: token.map(Into::into),
            origins: origins
                .into_iter()
                .map(|o| o.trim_end_matches('/').to_string())
                .collect(),
            hosts: Arc::new([]),
            send_timeout: DEFAULT_SEND_TIMEOUT,
        }
    }

    /// These rules, also allowing requests for these host names (`dash.example.com`, or
    /// `.example.com` for it and every name under it), on any port; each must pass
    /// [`is_host_pattern`].
    pub fn with_hosts(mut self, hosts: Vec<String>) -> Access {
        self.hosts = hosts
            .into_iter()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        self
    }

    /// These rules with another send timeout: how long a client may accept nothing while
    /// the server has bytes for it (a stream client that does not read) before it is
    /// disconnected. [`DEFAULT_SEND_TIMEOUT`] unless set; tests shorten it.
    pub fn with_send_timeout(mut self, timeout: Duration) -> Access {
        self.send_timeout = timeout;
        self
    }

    /// How long a client may accept nothing before it is disconnected.
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
    }

    /// Reads a token file: one line of printable ASCII (a trailing newline is dropped).
    pub fn read_token(path: &Path) -> Result<String, AccessError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AccessError::Read {
            path: shown.clone(),
            source,
        })?;
        let token = text.trim_end_matches(['\n', '\r']);
        let problem = if token.is_empty() {
            Some("is empty")
        } else if token.len() > MAX_TOKEN_BYTES {
            Some("holds more than 4096 bytes")
        } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
            Some("must hold one token of printable ASCII without spaces")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(AccessError::Invalid {
                path: shown,
                problem,
            }),
            None => Ok(token.to_string()),
        }
    }

    /// Whether a token is required.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether a request carries the token (as `Authorization: Bearer` or, for browsers'
    /// WebSocket and EventSource that cannot set headers, `?token=`).
    fn authorized(&self, headers: &HeaderMap, query: Option<&str>) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let in_query = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned())
        });
        bearer.is_some_and(|t| same(t, expected)) || in_query.is_some_and(|t| same(&t, expected))
    }

    /// Whether a WebSocket handshake's `Origin` may connect: none (not a browser), the
    /// server's own origin, or one allowed by `--allow-origin`.
    pub fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.trim_end_matches('/');
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let same_origin = host.is_some_and(|h| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(h)
        });
        same_origin || self.origins.iter().any(|o| o == origin)
    }

    /// Whether a request may name this `Host` (`name[:port]`, `[v6]:port`): an IP literal,
    /// `localhost`, or an `--allow-host` name; never a missing or malformed one.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(name) = host.and_then(host_name) else {
            return false;
        };
        if name.starts_with('[') {
            // host_name checked it is an IPv6 literal.
            return true;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name == "localhost"
            || name.parse::<Ipv4Addr>().is_ok()
            || self
                .hosts
                .iter()
                .any(|allowed| match allowed.strip_prefix('.') {
                    Some(domain) => {
                        name == domain
                            || name
                                .strip_suffix(domain)
                                .is_some_and(|sub| sub.ends_with('.'))
                    }
                    None => name == *allowed,
                })
    }
}

/// The name part of a `Host` value (`[::1]` with its brackets), if it is well formed: an
/// IPv6 literal in brackets or a name without colons, then an optional numeric port.
fn host_name(host: &str) -> Option<&str> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')? + 1;
        host[1..end - 1].parse::<Ipv6Addr>().ok()?;
        host.split_at(end)
    } else {
        host.split_at(host.find(':').unwrap_or(host.len()))
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => {
            !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
        }
        None => port.is_empty(),
    };
    (port_ok && !name.is_empty()).then_some(name)
}

/// Whether `value` may be given to `--allow-host`: a DNS name (`dash.example.com`), or one
/// with a leading dot for it and every name under it (`.example.com`); letters, digits and
/// hyphens in labels of at most 63 characters, without scheme, port or path.
pub fn is_host_pattern(value: &str) -> bool {
    let name = value.strip_prefix('.').unwrap_or(value);
    let name = name.strip_suffix('.').unwrap_or(name);
    kubeplug_vocab::names::is_hostname(name)
}

/// Compares in time independent of where the strings differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Middleware: 403 for a `Host` that is not allowed (see [`Access::host_allowed`]); the URI's
/// authority counts too when the request names one.
pub async fn require_host(
    axum::extract::State(access): axum::extract::State<Access>,
    request: Request,
    next: Next,
) -> Response {
    let header = request.headers().get(header::HOST);
    let host = match header {
        Some(value) => value.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    };
    let in_uri = request.uri().authority().map(|a| a.as_str());
    if access.host_allowed(host) && in_uri.is_none_or(|a| access.host_allowed(Some(a))) {
        return next.run(request).await;
    }
    let shown = host.map(|h| crate::contract::text::shown_max(h, 64).to_string());
    tracing::debug!(
        host = shown.as_deref().unwrap_or("(none)"),
        path = request.uri().path(),
        "status server refused a request for a host not allowed"
    );
    let reason = match &shown {
        Some(h) => format!(
            "host {h:?} is not allowed: use an IP address or localhost, or start kubeplug with --allow-host NAME (a guard against DNS rebinding)\n"
        ),
        None => "a Host header is required\n".to_string(),
    };
    (
        StatusCode::FORBIDDEN,
        [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        reason,
    )
        .into_response()
}

/// Middleware: 401 without the token, when one is set.
pub async fn require_token(
    axum::extract::State(access): axum::extract::State<Access>,
    request: Request,
    next: Next,
) -> Response {
    if access.authorized(request.headers(), request.uri().query()) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a bearer token is required (Authorization: Bearer <token>, or ?token=<token>)\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn tokens_come_from_the_header_or_the_query() {
        let access = Access::new(Some("s3cret".into()), vec![]);
        assert!(!access.authorized(&HeaderMap::new(), None));
        assert!(access.authorized(&headers(&[(header::AUTHORIZATION, "Bearer s3cret")]), None));
        assert!(!access.authorized(&headers(&[(header::AUTHORIZATION, "Bearer s3cres")]), None));
        assert!(access.authorized(&HeaderMap::new(), Some("type=log&token=s3cret")));
        assert!(!access.authorized(&HeaderMap::new(), Some("token=s3")));
        assert!(Access::default().authorized(&HeaderMap::new(), None));
    }

    #[test]
    fn origins_are_same_origin_or_allowed() {
        let access = Access::new(None, vec!["https://dash.example.com/".into()]);
        let h =
            |origin: &str| headers(&[(header::HOST, "127.0.0.1:8080"), (header::ORIGIN, origin)]);
        assert!(access.origin_allowed(&headers(&[(header::HOST, "127.0.0.1:8080")])));
        assert!(access.origin_allowed(&h("http://127.0.0.1:8080")));
        assert!(access.origin_allowed(&h("https://dash.example.com")));
        assert!(!access.origin_allowed(&h("http://evil.example")));
        assert!(!access.origin_allowed(&h("http://127.0.0.1:8080.evil.example")));
    }

    #[test]
    fn hosts_are_ip_literals_localhost_or_allowed_names() {
        let access = Access::default()
            .with_hosts(vec!["dash.example.com".into(), ".Apps.Example.ORG.".into()]);
        for allowed in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "10.1.2.3:9090",
            "0.0.0.0:80",
            "[::1]:8080",
            "[::1]",
            "[fd00::12]:8080",
            "localhost:8080",
            "LOCALHOST",
            "localhost.:1",
            "dash.example.com:8080",
            "DASH.example.com",
            "apps.example.org:443",
            "kubeplug.apps.example.org",
        ] {
            assert!(access.host_allowed(Some(allowed)), "{allowed}");
        }
        for refused in [
            "rebind.example:8080",
            "rebind.example",
            "127.0.0.1.rebind.example",
            "localhost.rebind.example:8080",
            "xdash.example.com",
            "dash.example.com.evil",
            "evilapps.example.org",
            "localhost:",
            "localhost:80:80",
            "localhost:http",
            "::1",
            "[::1",
            "[rebind.example]:80",
            "",
        ] {
            assert!(!access.host_allowed(Some(refused)), "{refused}");
        }
        assert!(!access.host_allowed(None), "a Host is required");
        assert!(
            !Access::default().host_allowed(Some("dash.example.com")),
            "names only when allowed"
        );
    }

    #[test]
    fn host_patterns_are_dns_names() {
        for good in [
            "dash.example.com",
            ".example.com",
            "kubeplug",
            "a-b.c1.",
            "10.0.0.1",
        ] {
            assert!(is_host_pattern(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "http://dash.example.com",
            "dash.example.com:8080",
            "dash.example.com/",
            "*.example.com",
            "-dash.example.com",
            "dash..example.com",
            "[::1]",
            "dash example",
        ] {
            assert!(!is_host_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn token_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "abc\n").unwrap();
        assert_eq!(Access::read_token(&file).unwrap(), "abc");
        std::fs::write(&file, "\n").unwrap();
        assert!(
            Access::read_token(&file)
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        std::fs::write(&file, "a b").unwrap();
        assert!(Access::read_token(&file).is_err());
        assert!(Access::read_token(&dir.path().join("none")).is_err());
    }
}
