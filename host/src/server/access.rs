//! Who may use the status server's private endpoints: an optional bearer token
//! (`--listen-token-file`) guards the dashboard, the stream and `/plugins` (probes and
//! Prometheus keep `/healthz`, `/readyz` and `/metrics` open), and WebSocket handshakes
//! from a browser page of another origin are refused unless `--allow-origin` names it.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::path::Path;
use std::sync::Arc;

/// The most bytes a token file may hold.
const MAX_TOKEN_BYTES: usize = 4096;

/// The access rules of one server.
#[derive(Debug, Clone, Default)]
pub struct Access {
    token: Option<Arc<str>>,
    origins: Arc<[String]>,
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
        }
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
}

/// Compares in time independent of where the strings differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0, |acc, (x, y)| acc | (x ^ y))
            == 0
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
