//! Field selectors (`metadata.name`, `metadata.namespace`, with `=`, `==`, `!=`), parsed from
//! query strings; label selectors are the cluster module's, shared with the host's cache.

use super::errors::ApiError;
pub use crate::selector::LabelSelector;
use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; other fields are a 400 like the real
    /// server's "field label not supported".
    pub fn parse(input: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {term:?}"
                )));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = if field == "metadata.name" {
                "/metadata/name"
            } else {
                "/metadata/namespace"
            };
            let actual = object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == value) == *equal
        })
    }

    /// The name an equality on `metadata.name` pins, for a fast path.
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| *eq && f == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(!m("metadata.name!=a"));
        assert!(m("metadata.namespace==ns,metadata.name=a"));
        assert!(!m("metadata.namespace=other"));
        assert!(FieldSelector::parse("spec.replicas=1").is_err());
        assert_eq!(
            FieldSelector::parse("metadata.name=a").unwrap().name(),
            Some("a")
        );
    }
}
