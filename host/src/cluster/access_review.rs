//! Asking the API server what a principal may do: `SubjectAccessReview`, answered by the
//! cluster's own authorizer (RBAC and whatever else it runs), cached for a short time. The
//! host serves reads from its shared cache, which the API server never sees per plugin; this
//! is how those reads stay within what the tenant's ServiceAccount may read itself.

use super::principal::Principal;
use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer is believed: a revoked RoleBinding stops a plugin's reads within it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Answers kept at most; past it the expired go first, then all (asked again).
const MAX_ANSWERS: usize = 16_384;

/// One question: may the principal `verb` the `resource` of API `group`, in `namespace`
/// (`None`: cluster-wide)?
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceAccess {
    /// `get`, `list`, `watch`, ...
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: String,
    /// The resource (plural), e.g. `secrets`.
    pub resource: String,
    /// The namespace, or `None` for all namespaces / a cluster-scoped kind.
    pub namespace: Option<String>,
}

/// Why the API server could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The request failed (the host may lack `create` on subjectaccessreviews, or the API
    /// server is down).
    #[error("SubjectAccessReview failed: {0}")]
    Api(#[from] kube::Error),
    /// The API server answered without a status.
    #[error("SubjectAccessReview answered without a status")]
    NoStatus,
}

/// Who answers access questions (the API server; tests give a table).
pub trait AccessReviewer: Send + Sync {
    /// Whether `principal` may do `access`.
    fn allowed<'a>(
        &'a self,
        principal: &'a Principal,
        access: &'a ResourceAccess,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// `SubjectAccessReview`s through a client, each answer kept for a TTL.
pub struct KubeAccessReviewer {
    client: kube::Client,
    ttl: Duration,
    answers: Mutex<HashMap<(Principal, ResourceAccess), (bool, Instant)>>,
}

impl KubeAccessReviewer {
    /// Asks through `client`, believing each answer for `ttl`.
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        KubeAccessReviewer {
            client,
            ttl,
            answers: Mutex::default(),
        }
    }

    fn cached(&self, key: &(Principal, ResourceAccess)) -> Option<bool> {
        let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        answers
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(allowed, _)| *allowed)
    }

    fn remember(&self, key: (Principal, ResourceAccess), allowed: bool) {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        if answers.len() >= MAX_ANSWERS {
            let ttl = self.ttl;
            answers.retain(|_, (_, at)| at.elapsed() < ttl);
            if answers.len() >= MAX_ANSWERS {
                answers.clear();
            }
        }
        answers.insert(key, (allowed, Instant::now()));
    }

    async fn ask(
        &self,
        principal: &Principal,
        access: &ResourceAccess,
    ) -> Result<bool, ReviewError> {
        let key = (principal.clone(), access.clone());
        if let Some(allowed) = self.cached(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(principal.user()),
                groups: Some(principal.groups()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(access.verb.to_string()),
                    group: Some(access.group.clone()),
                    resource: Some(access.resource.clone()),
                    namespace: access.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let status = answer.status.ok_or(ReviewError::NoStatus)?;
        // `denied` only says an authorizer refused outright; `allowed` is the answer.
        let allowed = status.allowed && status.denied != Some(true);
        tracing::debug!(principal = %principal, verb = access.verb, resource = %access.resource, namespace = access.namespace.as_deref().unwrap_or("*"), allowed, "SubjectAccessReview");
        self.remember(key, allowed);
        Ok(allowed)
    }
}

impl AccessReviewer for KubeAccessReviewer {
    fn allowed<'a>(
        &'a self,
        principal: &'a Principal,
        access: &'a ResourceAccess,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(self.ask(principal, access))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(verb: &'static str) -> ResourceAccess {
        ResourceAccess {
            verb,
            group: String::new(),
            resource: "secrets".into(),
            namespace: Some("team-a".into()),
        }
    }

    #[tokio::test]
    async fn answers_are_kept_for_the_ttl_only() {
        // A client to nowhere: every question the cache does not answer fails.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let reviewer = KubeAccessReviewer::new(client, Duration::from_secs(3600));
        let p = Principal::service_account("team-a", "default").unwrap();
        reviewer.remember((p.clone(), access("list")), false);
        assert!(!reviewer.allowed(&p, &access("list")).await.unwrap());
        assert!(reviewer.allowed(&p, &access("watch")).await.is_err());
        let expired = KubeAccessReviewer {
            ttl: Duration::ZERO,
            ..reviewer
        };
        assert!(expired.allowed(&p, &access("list")).await.is_err());
    }
}
