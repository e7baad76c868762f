//! A fake API server for tests (`example.com/v1 Missing` is not served, discovery of
//! `example.com/v1 Down` fails): records every request with the (tokio) time it arrived and
//! answers from a script, so the pipeline and the worker loop run under paused time.

use super::target::{Method, RequestTarget};
use super::writer::{ApiRequest, ApiWriter, WriteError, Written};
use crate::cluster::{Principal, ResolveError};
use crate::contract::{KindRef, Scope};
use futures::future::BoxFuture;
use kube::core::Status;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// Accepted; the object is now at this resourceVersion.
    Ok(&'static str),
    /// Accepted; the object has this name (a create's generated one) and resourceVersion.
    Named(&'static str, &'static str),
    /// The API server answers with this HTTP status.
    Status(u16),
    /// 409 AlreadyExists (a create of an object that exists).
    Exists,
    /// The transport times out.
    Timeout,
    /// Waits this long (tokio time), then answers.
    After(Duration, Box<Answer>),
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// When it arrived (tokio's clock).
    pub at: Instant,
    /// Where it went.
    pub target: RequestTarget,
    /// What it carried.
    pub request: ApiRequest,
    /// Who it was sent as (`None`: the host).
    pub principal: Option<Principal>,
}

/// Records requests; answers them from a script, then with [`Answer::Ok`] `"1"`.
#[derive(Default)]
pub(crate) struct FakeWriter {
    script: Mutex<VecDeque<Answer>>,
    received: Mutex<Vec<Received>>,
    /// How long a request takes to leave (a connection being set up): it is received only
    /// once its future has been polled past this.
    transport: Duration,
}

impl FakeWriter {
    /// A fake answering `script` in order, then accepting everything.
    pub fn new(script: impl IntoIterator<Item = Answer>) -> Self {
        FakeWriter {
            script: Mutex::new(script.into_iter().collect()),
            received: Mutex::default(),
            transport: Duration::ZERO,
        }
    }

    /// Requests take `delay` (tokio time) to leave: one dropped before is never received.
    pub fn with_transport(mut self, delay: Duration) -> Self {
        self.transport = delay;
        self
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The requests of `method` received so far.
    pub fn count(&self, method: Method) -> usize {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .filter(|r| r.target.method == method)
            .count()
    }

    async fn answer(answer: Answer) -> Result<Written, WriteError> {
        let mut answer = answer;
        while let Answer::After(delay, next) = answer {
            tokio::time::sleep(delay).await;
            answer = *next;
        }
        match answer {
            Answer::Ok(rv) => Ok(Written {
                name: None,
                resource_version: Some(rv.to_string()),
            }),
            Answer::Named(name, rv) => Ok(Written {
                name: Some(name.to_string()),
                resource_version: Some(rv.to_string()),
            }),
            Answer::Status(code) => {
                let reason = match code {
                    404 => "NotFound",
                    409 => "Conflict",
                    422 => "Invalid",
                    _ => "Scripted",
                };
                let status = Status::failure("scripted", reason).with_code(code);
                Err(kube::Error::Api(status.boxed()).into())
            }
            Answer::Exists => {
                let status = Status::failure("exists", "AlreadyExists").with_code(409);
                Err(kube::Error::Api(status.boxed()).into())
            }
            Answer::Timeout => {
                let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
                Err(kube::Error::Service(timeout.into()).into())
            }
            Answer::After(..) => unreachable!("unwrapped above"),
        }
    }
}

impl ApiWriter for FakeWriter {
    /// `v1 Namespace` is cluster-scoped, `example.com/v1 Missing` unknown, the rest namespaced.
    fn scope<'a>(&'a self, kind: &'a KindRef) -> BoxFuture<'a, Result<Scope, ResolveError>> {
        Box::pin(async move {
            match (kind.api_version.as_str(), kind.kind.as_str()) {
                ("v1", "Namespace") => Ok(Scope::Cluster),
                ("example.com/v1", "Missing") => Err(ResolveError::Unknown {
                    kind: kind.to_string(),
                    source: kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(
                        kind.kind.clone(),
                    )),
                }),
                ("example.com/v1", "Down") => Err(ResolveError::Unavailable {
                    kind: kind.to_string(),
                    source: kube::Error::Service("discovery timed out".into()),
                }),
                _ => Ok(Scope::Namespaced),
            }
        })
    }

    fn send<'a>(
        &'a self,
        target: &'a RequestTarget,
        request: ApiRequest,
        principal: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<Written, WriteError>> {
        let leave = move || {
            self.received.lock().unwrap().push(Received {
                at: Instant::now(),
                principal: principal.cloned(),
                target: target.clone(),
                request,
            });
            self.script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Answer::Ok("1"))
        };
        if self.transport.is_zero() {
            return Box::pin(Self::answer(leave()));
        }
        Box::pin(async move {
            tokio::time::sleep(self.transport).await;
            Self::answer(leave()).await
        })
    }
}
