//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists) and field selectors
//! (`metadata.name`, `metadata.namespace`, with `=`, `==`, `!=`), parsed from query strings.

use super::errors::ApiError;
use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` / `key==value`.
    Equals(String, String),
    /// `key!=value` (also matches objects without the label, like the real server).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches objects without the label).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(input: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(input) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(term)?);
        }
        Ok(Self(reqs))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(input: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

fn bad(term: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: invalid label selector term {term:?}"
    ))
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(term: &str, rest: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(term))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(term: &str) -> Result<Requirement, ApiError> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return if valid_key(key) {
            Ok(Requirement::NotExists(key.into()))
        } else {
            Err(bad(term))
        };
    }
    if let Some((k, v)) = term.split_once("!=") {
        return checked(term, k, v, Requirement::NotEquals);
    }
    if let Some((k, v)) = term.split_once("==") {
        return checked(term, k, v, Requirement::Equals);
    }
    if let Some((k, v)) = term.split_once('=') {
        return checked(term, k, v, Requirement::Equals);
    }
    let mut words = term.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().trim();
    let rest = words.next().unwrap_or_default().trim();
    if !valid_key(key) {
        return Err(bad(term));
    }
    if rest.is_empty() {
        return Ok(Requirement::Exists(key.into()));
    }
    if let Some(set) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(key.into(), parse_set(term, set)?));
    }
    if let Some(set) = rest.strip_prefix("in") {
        return Ok(Requirement::In(key.into(), parse_set(term, set)?));
    }
    Err(bad(term))
}

fn checked(
    term: &str,
    key: &str,
    value: &str,
    make: fn(String, String) -> Requirement,
) -> Result<Requirement, ApiError> {
    let (key, value) = (key.trim(), value.trim());
    if !valid_key(key) || value.contains(['(', ')', ' ', '=', '!']) {
        return Err(bad(term));
    }
    Ok(make(key.into(), value.into()))
}

/// A parsed field selector over `metadata.name` and `metadata.namespace`.
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
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, api)"));
        assert!(!m("app notin (web,api)"));
        assert!(m("tier"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("missing!=x"));
        assert!(m("missing notin (x)"));
        assert!(!m("missing in (x)"));
        assert!(m("app=web,tier in (front)"));
        assert!(!m("app=web,tier=back"));
        assert!(m(""));
    }

    #[test]
    fn label_parse_errors() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
        assert!(LabelSelector::parse("=x").is_err());
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
