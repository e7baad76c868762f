//! Where Leases are read and written: the API server through kube, or memory in unit tests.
//! Writes are replaces carrying the resourceVersion read, so two replicas racing for one
//! Lease cannot both win (the loser gets a conflict).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::future::Future;

/// A Lease operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another replica wrote the Lease since it was read (409), or created it first.
    #[error("lease {0}: changed by another replica meanwhile")]
    Conflict(String),
    /// The API server refused or could not be reached.
    #[error("lease {name}: {source}")]
    Api {
        /// The Lease.
        name: String,
        /// What the client said.
        #[source]
        source: kube::Error,
    },
    /// The Lease the API server returned cannot be used (no name, no resourceVersion).
    #[error("lease {0}: the API server returned it without {1}")]
    Malformed(String, &'static str),
}

/// Get, create, replace, list and delete Leases of one namespace.
pub trait LeaseStore: Send + Sync + 'static {
    /// The Lease `name`, if it exists.
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;
    /// Creates `lease` (a conflict if it exists).
    fn create(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// Replaces `lease` if its resourceVersion is still current (a conflict otherwise).
    fn replace(&self, lease: Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// The Leases matching a label selector.
    fn list(&self, selector: &str) -> impl Future<Output = Result<Vec<Lease>, LeaseError>> + Send;
    /// Deletes the Lease `name` (gone already is fine).
    fn delete(&self, name: &str) -> impl Future<Output = Result<(), LeaseError>> + Send;
}

/// Leases on the API server, in one namespace.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
}

impl KubeLeases {
    /// Leases of `namespace` through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        KubeLeases {
            api: Api::namespaced(client, namespace),
        }
    }
}

fn api_error(name: &str, source: kube::Error) -> LeaseError {
    match &source {
        kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict(name.to_string()),
        _ => LeaseError::Api {
            name: name.to_string(),
            source,
        },
    }
}

fn name_of(lease: &Lease) -> String {
    lease.metadata.name.clone().unwrap_or_default()
}

impl LeaseStore for KubeLeases {
    async fn get(&self, name: &str) -> Result<Option<Lease>, LeaseError> {
        self.api.get_opt(name).await.map_err(|e| api_error(name, e))
    }

    async fn create(&self, lease: Lease) -> Result<Lease, LeaseError> {
        let name = name_of(&lease);
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map_err(|e| api_error(&name, e))
    }

    async fn replace(&self, lease: Lease) -> Result<Lease, LeaseError> {
        let name = name_of(&lease);
        if lease.metadata.resource_version.is_none() {
            return Err(LeaseError::Malformed(name, "a resourceVersion"));
        }
        self.api
            .replace(&name, &PostParams::default(), &lease)
            .await
            .map_err(|e| api_error(&name, e))
    }

    async fn list(&self, selector: &str) -> Result<Vec<Lease>, LeaseError> {
        self.api
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .map_err(|e| api_error(selector, e))
    }

    async fn delete(&self, name: &str) -> Result<(), LeaseError> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(api_error(name, e)),
        }
    }
}

/// Leases in memory, shared by clones, with an API outage switch: what the unit tests of
/// the election and the ring run against under paused time.
#[cfg(test)]
#[derive(Clone, Default)]
pub struct MemoryLeases {
    inner: std::sync::Arc<std::sync::Mutex<(u64, std::collections::BTreeMap<String, Lease>)>>,
    /// Identities whose calls fail while listed here.
    down: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The identity this handle's calls come from (for [`MemoryLeases::fail_for`]).
    caller: String,
}

#[cfg(test)]
impl MemoryLeases {
    /// A handle on the same Leases whose calls come from `caller`.
    pub fn as_caller(&self, caller: &str) -> Self {
        MemoryLeases {
            caller: caller.to_string(),
            ..self.clone()
        }
    }

    /// Makes every call of `caller` fail (an outage between it and the API server), or not.
    pub fn fail_for(&self, caller: &str, failing: bool) {
        let mut down = self.down.lock().unwrap();
        down.retain(|c| c != caller);
        if failing {
            down.push(caller.to_string());
        }
    }

    /// The Lease `name` as stored.
    pub fn peek(&self, name: &str) -> Option<Lease> {
        self.inner.lock().unwrap().1.get(name).cloned()
    }

    fn check(&self, name: &str) -> Result<(), LeaseError> {
        if self.down.lock().unwrap().contains(&self.caller) {
            return Err(LeaseError::Malformed(
                name.to_string(),
                "an answer (outage)",
            ));
        }
        Ok(())
    }

    fn store(&self, mut lease: Lease, must_exist: bool) -> Result<Lease, LeaseError> {
        let name = name_of(&lease);
        self.check(&name)?;
        let mut inner = self.inner.lock().unwrap();
        let current = inner
            .1
            .get(&name)
            .and_then(|l| l.metadata.resource_version.clone());
        match (must_exist, current) {
            (false, Some(_)) => return Err(LeaseError::Conflict(name)),
            (true, None) => return Err(LeaseError::Conflict(name)),
            (true, Some(rv)) if lease.metadata.resource_version.as_ref() != Some(&rv) => {
                return Err(LeaseError::Conflict(name));
            }
            _ => {}
        }
        inner.0 += 1;
        lease.metadata.resource_version = Some(inner.0.to_string());
        inner.1.insert(name, lease.clone());
        Ok(lease)
    }
}

#[cfg(test)]
impl LeaseStore for MemoryLeases {
    async fn get(&self, name: &str) -> Result<Option<Lease>, LeaseError> {
        self.check(name)?;
        Ok(self.peek(name))
    }

    async fn create(&self, lease: Lease) -> Result<Lease, LeaseError> {
        self.store(lease, false)
    }

    async fn replace(&self, lease: Lease) -> Result<Lease, LeaseError> {
        self.store(lease, true)
    }

    async fn list(&self, selector: &str) -> Result<Vec<Lease>, LeaseError> {
        self.check(selector)?;
        let (key, value) = selector.split_once('=').unwrap_or((selector, ""));
        let inner = self.inner.lock().unwrap();
        Ok(inner
            .1
            .values()
            .filter(|l| {
                l.metadata
                    .labels
                    .as_ref()
                    .and_then(|ls| ls.get(key))
                    .is_some_and(|v| v == value)
            })
            .cloned()
            .collect())
    }

    async fn delete(&self, name: &str) -> Result<(), LeaseError> {
        self.check(name)?;
        self.inner.lock().unwrap().1.remove(name);
        Ok(())
    }
}
