//! Objects from manifest files, readable by plugins through the `get`/`list` imports: what
//! `kubeplug eval --cache DIR` gives a plugin instead of the live cluster cache.

use crate::contract::KindRef;
use crate::contract::selector::LabelSelector;
use crate::manifest::{self, ManifestError};
use crate::plugin::ObjectSource;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

type Key = (KindRef, Option<String>, String);

/// Objects keyed by kind, namespace and name, kept as JSON text.
#[derive(Debug, Default)]
pub struct FixtureObjects {
    objects: BTreeMap<Key, (Value, Arc<str>)>,
}

impl FixtureObjects {
    /// Loads every `.yaml`, `.yml` and `.json` file in `dir` (not recursive).
    pub fn from_dir(dir: &Path) -> Result<Self, ManifestError> {
        let read_err = |source| ManifestError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        paths.sort();
        let mut fixtures = FixtureObjects::default();
        for path in paths {
            for object in manifest::read_file(&path)? {
                fixtures.insert(object);
            }
        }
        Ok(fixtures)
    }

    /// Every object, in key order.
    pub fn objects(&self) -> impl Iterator<Item = &Value> {
        self.objects.values().map(|(object, _)| object)
    }

    /// Adds one object (managedFields stripped).
    pub fn insert(&mut self, mut object: Value) {
        crate::cluster::strip_managed_fields(&mut object);
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let kind = KindRef::new(
            &s("/apiVersion").unwrap_or_default(),
            &s("/kind").unwrap_or_default(),
        );
        let key = (
            kind,
            s("/metadata/namespace"),
            s("/metadata/name").unwrap_or_default(),
        );
        let text: Arc<str> = object.to_string().into();
        self.objects.insert(key, (object, text));
    }
}

impl ObjectSource for FixtureObjects {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<str>>, String> {
        let key = (
            kind.clone(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        Ok(self.objects.get(&key).map(|(_, t)| t.clone()))
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
            .objects
            .iter()
            .filter(|((k, ns, _), (obj, _))| {
                k == kind
                    && (namespace.is_none() || ns.as_deref() == namespace)
                    && selector.matches(obj)
            })
            .map(|(_, (_, t))| t.clone())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gets_and_lists_by_kind_namespace_and_labels() {
        let mut f = FixtureObjects::default();
        for (ns, name, app) in [("a", "x", "web"), ("a", "y", "db"), ("b", "z", "web")] {
            f.insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}}));
        }
        let pod = KindRef::new("v1", "Pod");
        assert!(f.get(&pod, Some("a"), "x").unwrap().is_some());
        assert!(f.get(&pod, Some("b"), "x").unwrap().is_none());
        assert_eq!(f.list(&pod, None, None).unwrap().len(), 3);
        assert_eq!(f.list(&pod, Some("a"), None).unwrap().len(), 2);
        assert_eq!(f.list(&pod, None, Some("app=web")).unwrap().len(), 2);
        assert!(
            f.list(&KindRef::deployment(), None, None)
                .unwrap()
                .is_empty()
        );
        assert!(f.list(&pod, None, Some("app in web")).is_err());
    }
}
