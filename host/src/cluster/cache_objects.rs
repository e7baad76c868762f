//! The host cache as plugins read it through the `get`/`list` imports: only the kinds the
//! plugin was given, and only objects in the namespaces its policy grants. The imports bound
//! the arguments (lengths; the selector's size is bounded by its parser) before they get
//! here; lists match on a snapshot of the cache, never under its lock; errors show the
//! plugin's text capped and escaped.

use super::selector::LabelSelector;
use super::{KindCache, ObjKey};
use crate::contract::KindRef;
use crate::contract::text::shown_max;
use crate::plugin::ObjectSource;
use crate::policy::Namespaces;
use std::collections::HashMap;
use std::sync::Arc;

/// Read access to some kinds' caches.
pub struct CacheObjects {
    caches: HashMap<KindRef, Arc<KindCache>>,
    namespaces: Namespaces,
}

impl CacheObjects {
    /// Access to exactly these caches, in every namespace.
    pub fn new(caches: impl IntoIterator<Item = Arc<KindCache>>) -> Self {
        Self::scoped(caches, Namespaces::All)
    }

    /// Access to these caches, only to objects in `namespaces`.
    pub fn scoped(
        caches: impl IntoIterator<Item = Arc<KindCache>>,
        namespaces: Namespaces,
    ) -> Self {
        CacheObjects {
            caches: caches.into_iter().map(|c| (c.kind().clone(), c)).collect(),
            namespaces,
        }
    }

    fn check_namespace(&self, namespace: Option<&str>) -> Result<(), String> {
        match namespace {
            Some(ns) if !self.namespaces.allows(Some(ns)) => Err(format!(
                "namespace {} is not granted to this plugin",
                shown_max(ns, 64)
            )),
            _ => Ok(()),
        }
    }

    fn cache(&self, kind: &KindRef) -> Result<&KindCache, String> {
        self.caches.get(kind).map(Arc::as_ref).ok_or_else(|| {
            format!(
                "reading {} is not granted to this plugin",
                shown_max(&kind.to_string(), 128)
            )
        })
    }
}

impl ObjectSource for CacheObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        let cache = self.cache(kind)?;
        self.check_namespace(namespace)?;
        if !self.namespaces.allows(namespace) {
            return Ok(None);
        }
        Ok(cache
            .get(&ObjKey::new(namespace, name))
            .map(|o| o.json.clone()))
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<str>>, String> {
        let selector =
            LabelSelector::parse(label_selector.unwrap_or("")).map_err(|e| e.to_string())?;
        let cache = self.cache(kind)?;
        self.check_namespace(namespace)?;
        Ok(cache
            .list(namespace, &selector)
            .into_iter()
            .filter(|o| self.namespaces.allows(o.key.namespace.as_deref()))
            .map(|o| o.json.clone())
            .collect())
    }
}
