//! The request log: every API request the sim served, so tests can assert exactly what a
//! controller did (`GET /sim/requests` serves it as JSON).

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;

/// One served request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// Sequence number (a cursor for [`RequestLog::since`]).
    pub seq: u64,
    /// RFC 3339 time the request arrived, to the microsecond.
    pub time: String,
    /// HTTP method.
    pub method: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection,
    /// or `discovery` / `other` for non-resource paths.
    pub verb: String,
    /// Request path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// API group of the resource.
    pub group: String,
    /// Resource plural (`deployments`).
    pub resource: String,
    /// Namespace in the path.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`).
    pub subresource: Option<String>,
    /// Patch type (`merge`, `json`, `strategic`, `apply`).
    pub patch_type: Option<String>,
    /// `fieldManager` query parameter.
    pub field_manager: Option<String>,
    /// Response status code.
    pub status: u16,
    /// The client's `User-Agent` (kubeplug replicas put their identity in it).
    pub user_agent: String,
    /// The injected fault that answered, if any.
    pub fault: Option<String>,
    /// For a write of a resource: whether it changed what is stored (`false` for a no-op
    /// update or patch, answered with the unchanged object as the real server does, and for a
    /// refused or faulted write). A write that raced another one to the same object within
    /// the microseconds between its start and its read may count that one's change as its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
    /// The user the request acted as (the impersonated one when it impersonated; the sim's
    /// administrator when authorization is off and it did not); empty when it was not
    /// authenticated.
    pub user: String,
    /// The authenticated user who impersonated [`RequestRecord::user`], if any.
    pub impersonator: Option<String>,
    /// A write's JSON body (a patch, a created or updated object, DeleteOptions), kept
    /// only when the sim was built with `record_write_bodies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

/// A bounded log of served requests.
pub struct RequestLog {
    inner: Mutex<(u64, VecDeque<RequestRecord>)>,
    capacity: usize,
}

impl RequestLog {
    /// A log that keeps the last `capacity` records.
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new((0, VecDeque::new())),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, VecDeque<RequestRecord>)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every retained record, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.lock().1.iter().cloned().collect()
    }

    /// Records with `seq >= cursor` (found by binary search: clients poll this while the
    /// log holds many thousands of records, under the lock every request takes).
    pub fn since(&self, cursor: u64) -> Vec<RequestRecord> {
        let inner = self.lock();
        let first = inner.1.partition_point(|r| r.seq < cursor);
        inner.1.range(first..).cloned().collect()
    }

    /// The sequence number the next record will get.
    pub fn cursor(&self) -> u64 {
        self.lock().0
    }

    /// Forgets every record (sequence numbers keep increasing).
    pub fn clear(&self) {
        self.lock().1.clear();
    }

    pub(crate) fn push(&self, mut record: RequestRecord) {
        let mut inner = self.lock();
        record.seq = inner.0;
        inner.0 += 1;
        if inner.1.len() >= self.capacity {
            inner.1.pop_front();
        }
        inner.1.push_back(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_with_cursor() {
        let log = RequestLog::new(2);
        for verb in ["get", "list", "watch"] {
            log.push(RequestRecord {
                verb: verb.into(),
                ..Default::default()
            });
        }
        let all = log.records();
        assert_eq!(
            all.iter().map(|r| r.verb.as_str()).collect::<Vec<_>>(),
            vec!["list", "watch"]
        );
        assert_eq!(log.since(2).len(), 1);
        assert_eq!(log.cursor(), 3);
        log.clear();
        assert!(log.records().is_empty());
    }
}
