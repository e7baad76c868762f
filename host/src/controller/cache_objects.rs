//! The host cache as plugins read it through the `get`/`list` imports: only the kinds the
//! plugin was given, and in the controller's namespace scope.

use crate::cluster::selector::LabelSelector;
use crate::cluster::{KindCache, ObjKey};
use crate::contract::KindRef;
use crate::plugin::ObjectSource;
use std::collections::HashMap;
use std::sync::Arc;

/// Read access to some kinds' caches.
pub struct CacheObjects {
    caches: HashMap<KindRef, Arc<KindCache>>,
}

impl CacheObjects {
    /// Access to exactly these caches.
    pub fn new(caches: impl IntoIterator<Item = Arc<KindCache>>) -> Self {
        CacheObjects {
            caches: caches.into_iter().map(|c| (c.kind().clone(), c)).collect(),
        }
    }

    fn cache(&self, kind: &KindRef) -> Result<&KindCache, String> {
        self.caches
            .get(kind)
            .map(Arc::as_ref)
            .ok_or_else(|| format!("reading {kind} is not granted to this plugin"))
    }
}

impl ObjectSource for CacheObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        Ok(self
            .cache(kind)?
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
        Ok(self
            .cache(kind)?
            .list(namespace, &selector)
            .into_iter()
            .map(|o| o.json.clone())
            .collect())
    }
}
