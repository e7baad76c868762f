//! Who a tenant's plugin acts as: a ServiceAccount of the tenant's own namespace. Writes are
//! sent as that ServiceAccount through Kubernetes impersonation (`Impersonate-User`), so the
//! API server's RBAC bounds them as it bounds the tenant, whatever the host itself may do
//! (as Flux's `serviceAccountName` and Argo CD's destination service accounts do).

use http::{HeaderValue, Request, Response};
use kube::client::Body;
use kubeplug_vocab::names::{is_dns_label, is_dns_subdomain};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The ServiceAccount used when neither the Plugin nor a policy names one.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// A ServiceAccount of a namespace: the identity a tenant's plugin reads and writes as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    namespace: Arc<str>,
    name: Arc<str>,
}

/// Why a ServiceAccount reference is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    /// The namespace is not a DNS-1123 label.
    #[error("namespace {0:?} is not a DNS-1123 label")]
    Namespace(String),
    /// The name is not a DNS-1123 subdomain.
    #[error("serviceAccountName {0:?} is not a DNS-1123 subdomain")]
    Name(String),
}

impl Principal {
    /// The ServiceAccount `name` of `namespace`, both checked (they reach a header).
    pub fn service_account(namespace: &str, name: &str) -> Result<Self, PrincipalError> {
        if !is_dns_label(namespace) {
            return Err(PrincipalError::Namespace(
                crate::contract::text::prefix(namespace, 64).to_string(),
            ));
        }
        if !is_dns_subdomain(name) {
            return Err(PrincipalError::Name(
                crate::contract::text::prefix(name, 64).to_string(),
            ));
        }
        Ok(Principal {
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// The namespace it belongs to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The ServiceAccount's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user name the API server knows it by: `system:serviceaccount:NS:NAME`.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups a ServiceAccount's token carries (what the API server adds when it
    /// impersonates one without explicit groups).
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".into(),
        ]
    }

    /// A client sending every request of `client` as this ServiceAccount: the same
    /// connections, each request with `Impersonate-User` (the API server adds the
    /// ServiceAccount's groups, and checks that the host may `impersonate` it).
    pub fn impersonating(&self, client: &kube::Client) -> kube::Client {
        let user = HeaderValue::from_str(&self.user())
            .expect("a checked namespace and name make a header value");
        kube::Client::new(
            Impersonate {
                inner: client.clone(),
                user,
            },
            self.namespace.to_string(),
        )
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

/// The tower service behind an impersonating client: sets the header, then sends through
/// the host's own client (its auth, TLS and connection pool).
#[derive(Clone)]
struct Impersonate {
    inner: kube::Client,
    user: HeaderValue,
}

impl tower::Service<Request<Body>> for Impersonate {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let headers = request.headers_mut();
        // Whatever the request carried, it goes as exactly this user and its own groups.
        let carried: Vec<http::HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("impersonate-"))
            .cloned()
            .collect();
        for name in carried {
            headers.remove(name);
        }
        headers.insert("impersonate-user", self.user.clone());
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_they_reach_a_header() {
        assert!(Principal::service_account("team-a", "default").is_ok());
        assert!(Principal::service_account("Team", "default").is_err());
        assert!(Principal::service_account("team-a", "a\r\nImpersonate-Group: x").is_err());
        assert!(Principal::service_account("team-a", &"a".repeat(300)).is_err());
        let p = Principal::service_account("team-a", "deployer").unwrap();
        assert_eq!(p.user(), "system:serviceaccount:team-a:deployer");
        assert!(
            p.groups()
                .contains(&"system:serviceaccounts:team-a".to_string())
        );
    }
}
