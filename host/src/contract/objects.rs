//! Where the `get` and `list` host imports read objects from.

use crate::contract::KindRef;
use std::sync::Arc;

/// A read-only view of objects for plugins: the controller's cache (scoped by policy) or,
/// in `kubeplug eval`, a directory of fixtures. Errors are messages for the plugin.
pub trait ObjectSource: Send + Sync {
    /// One object as JSON, or `None` when it does not exist.
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String>;

    /// Objects of a kind as JSON, optionally in one namespace and matching a label selector.
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String>;
}

/// A source with nothing readable: every read is refused.
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn get(&self, kind: &KindRef, _: Option<&str>, _: &str) -> Result<Option<Arc<str>>, String> {
        Err(format!("reading {kind} is not granted to this plugin"))
    }

    fn list(
        &self,
        kind: &KindRef,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String> {
        Err(format!("reading {kind} is not granted to this plugin"))
    }
}
