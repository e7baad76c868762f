//! Typed access to a reconcile request.

use crate::{Error, KindRef, ObjectRef, Reason, Request};
use serde::Deserialize;
use serde::de::DeserializeOwned;

impl Request {
    /// The cached object parsed into `T` (a k8s-openapi type, or your own serde type for
    /// custom kinds); `None` once the object has been deleted.
    pub fn object<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        parse_opt(self.object.as_deref())
    }

    /// The cached object parsed into `T`, which may borrow from the request: a struct of only
    /// the fields the plugin reads (strings as `Cow<'a, str>` with `#[serde(borrow)]`) skips
    /// everything else while parsing, without building the whole object; `None` once deleted.
    pub fn object_view<'a, T: Deserialize<'a>>(&'a self) -> Result<Option<T>, Error> {
        parse_opt(self.object.as_deref())
    }

    /// The cached object as raw JSON text; `None` once it has been deleted.
    pub fn object_json(&self) -> Option<&str> {
        self.object.as_deref()
    }

    /// The version this plugin last reconciled successfully (needs `wants_previous` in the
    /// plugin's metadata); `None` the first time.
    pub fn previous<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        parse_opt(self.previous.as_deref())
    }

    /// The operator's configuration for this plugin; `T::default()` when none was given.
    /// A configuration that does not parse is a permanent error.
    pub fn config<T: DeserializeOwned + Default>(&self) -> Result<T, Error> {
        match self.config.as_deref() {
            None => Ok(T::default()),
            Some(text) if text.trim().is_empty() => Ok(T::default()),
            Some(text) => serde_json::from_str(text)
                .map_err(|e| Error::permanent(format!("invalid plugin configuration: {e}"))),
        }
    }

    /// Whether the object is gone (the request is the last word on this key).
    pub fn is_deleted(&self) -> bool {
        self.object.is_none()
    }

    /// Whether this is the first time the plugin sees the object.
    pub fn is_added(&self) -> bool {
        self.reason == Reason::Added
    }

    /// `namespace/name`, or `name` for cluster-scoped objects: the usual way to name a key.
    pub fn key(&self) -> String {
        self.target.key()
    }
}

impl ObjectRef {
    /// A reference to an object of kind `K` (for example `ObjectRef::new::<Deployment>(..)`).
    pub fn new<K: k8s_openapi::Resource>(namespace: Option<&str>, name: &str) -> Self {
        ObjectRef {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl KindRef {
    /// The kind of k8s-openapi type `K`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        KindRef {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
        }
    }

    /// A kind by name, for custom kinds: `KindRef::new("example.com/v1", "Widget")`.
    pub fn new(api_version: &str, kind: &str) -> Self {
        KindRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }
    }
}

fn parse_opt<'a, T: Deserialize<'a>>(text: Option<&'a str>) -> Result<Option<T>, Error> {
    text.map(serde_json::from_str)
        .transpose()
        .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[derive(Deserialize)]
    struct NameOnly<'a> {
        #[serde(borrow)]
        metadata: Meta<'a>,
    }

    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
    }

    fn request(object: Option<&str>) -> Request {
        Request {
            target: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("ns".into()),
                name: "a".into(),
            },
            object: object.map(str::to_string),
            previous: None,
            reason: Reason::Changed,
            attempt: 1,
            config: None,
        }
    }

    #[test]
    fn a_view_borrows_the_fields_it_names_and_skips_the_rest() {
        let req = request(Some(
            r#"{"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {}}"#,
        ));
        let view = req.object_view::<NameOnly>().unwrap().unwrap();
        assert!(matches!(view.metadata.name, Cow::Borrowed("a")));
    }

    #[test]
    fn a_view_of_a_deleted_object_is_none_and_bad_json_an_error() {
        assert!(request(None).object_view::<NameOnly>().unwrap().is_none());
        assert!(
            request(Some("{\"metadata\": 1}"))
                .object_view::<NameOnly>()
                .is_err()
        );
    }
}
