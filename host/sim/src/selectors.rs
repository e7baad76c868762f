//! Field selectors (`metadata.name`, `metadata.namespace` and the fields a real API server
//! indexes for the kind, with `=`, `==`, `!=`), parsed from query strings; label selectors
//! are the cluster module's, shared with the host's cache.

use super::errors::ApiError;
use super::kinds::{ResourceKind, Storage};
pub use crate::selector::LabelSelector;
use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; other fields are a 400 like the real
    /// server's "field label not supported".
    pub fn parse(input: &str) -> Result<Self, ApiError> {
        Self::parse_with(input, &[], |f| f.to_string())
    }

    /// Parses a selector on `kind`: the metadata fields plus those the real server supports for
    /// it (Events' `involvedObject.*`, `reason`, `type`…; Pods' `spec.nodeName`,
    /// `status.phase`…), named as the kind serves them and matched in the stored form.
    pub fn parse_for(kind: &ResourceKind, input: &str) -> Result<Self, ApiError> {
        let fields = kind_fields(kind);
        match kind.storage {
            Storage::Own => Self::parse_with(input, fields, |f| f.to_string()),
            Storage::CoreEvents => Self::parse_with(input, fields, super::events::core_field),
        }
    }

    fn parse_with(
        input: &str,
        fields: &[&str],
        stored: impl Fn(&str) -> String,
    ) -> Result<Self, ApiError> {
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
            if field != "metadata.name" && field != "metadata.namespace" && !fields.contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((stored(field), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = field
                .split('.')
                .try_fold(object, |o, part| o.get(part))
                .map_or(String::new(), |v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                });
            (actual == *value) == *equal
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

/// The fields besides `metadata.name` and `metadata.namespace` a real server accepts in a
/// field selector for `kind`, named as the kind serves them.
fn kind_fields(kind: &ResourceKind) -> &'static [&'static str] {
    const EVENT: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    const EVENT_V1: &[&str] = &[
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ];
    const POD: &[&str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    if !kind.builtin {
        return &[];
    }
    match (kind.kind.as_str(), kind.storage) {
        ("Event", Storage::Own) => EVENT,
        ("Event", Storage::CoreEvents) => EVENT_V1,
        ("Pod", _) => POD,
        ("Namespace", _) => &["status.phase"],
        _ => &[],
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
