//! Read-only calls into the host: logging and the host's object cache.
//!
//! What a plugin may read is decided by the operator's policy; a read outside it fails with
//! an error rather than returning nothing, so a plugin can tell "absent" from "not allowed".

use crate::bindings::kubeplug::plugin::host as imports;
use crate::{Error, KindRef, LogLevel};
use serde::de::DeserializeOwned;

/// Logs a line right away (use [`crate::Action::log`] to log as part of the result).
pub fn log(level: LogLevel, message: &str) {
    imports::log(level, message);
}

/// Gets one object from the host's cache, parsed into `T`.
pub fn get<T: DeserializeOwned>(
    kind: &KindRef,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<T>, Error> {
    let json = imports::get_object(kind, namespace, name).map_err(Error::Permanent)?;
    json.map(|j| serde_json::from_str(&j))
        .transpose()
        .map_err(Error::from)
}

/// Lists objects of a kind from the host's cache, parsed into `T`, optionally in one
/// namespace and filtered by a label selector (`app=web,tier!=db`).
pub fn list<T: DeserializeOwned>(
    kind: &KindRef,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<T>, Error> {
    let items = imports::list_objects(kind, namespace, label_selector).map_err(Error::Permanent)?;
    items
        .iter()
        .map(|j| serde_json::from_str(j).map_err(Error::from))
        .collect()
}
