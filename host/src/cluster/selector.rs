//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy`), parsed once and
//! matched against an object's labels.

use serde_json::Value;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// A selector that does not parse, with the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    /// Parses the selector syntax of `kubectl -l` and the API's `labelSelector` parameter.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: selector.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        for part in split_top(selector).into_iter().map(str::trim) {
            if part.is_empty() {
                if selector.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement".into()));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part
                .split_once(" notin ")
                .or_else(|| part.split_once(" in "))
            {
                let values = rest
                    .trim()
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| err(format!("{part:?}: values must be in parentheses")))?;
                let values = values.split(',').map(|v| v.trim().to_string()).collect();
                if part.contains(" notin ") {
                    Requirement::NotIn(k.trim().into(), values)
                } else {
                    Requirement::In(k.trim().into(), values)
                }
            } else {
                Requirement::Exists(part.to_string())
            };
            let key = match &req {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(err(format!("invalid label key {key:?}")));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object (its `metadata.labels`) satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches_labels(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn equality_and_inequality() {
        let s = LabelSelector::parse("app=web,tier!=db").unwrap();
        assert!(s.matches(&obj(json!({"app": "web", "tier": "fe"}))));
        assert!(s.matches(&obj(json!({"app": "web"}))));
        assert!(!s.matches(&obj(json!({"app": "web", "tier": "db"}))));
        assert!(!s.matches(&obj(json!({"app": "api"}))));
        assert!(
            LabelSelector::parse("app==web")
                .unwrap()
                .matches(&obj(json!({"app": "web"})))
        );
    }

    #[test]
    fn set_based_and_existence() {
        let s = LabelSelector::parse("env in (dev, qa),!legacy,team").unwrap();
        assert!(s.matches(&obj(json!({"env": "qa", "team": "a"}))));
        assert!(!s.matches(&obj(json!({"env": "prod", "team": "a"}))));
        assert!(!s.matches(&obj(json!({"env": "qa", "team": "a", "legacy": "y"}))));
        assert!(!s.matches(&obj(json!({"env": "qa"}))));
        let n = LabelSelector::parse("env notin (prod)").unwrap();
        assert!(n.matches(&obj(json!({}))));
        assert!(!n.matches(&obj(json!({"env": "prod"}))));
    }

    #[test]
    fn empty_matches_all_and_garbage_is_rejected() {
        assert!(LabelSelector::parse("").unwrap().matches(&json!({})));
        assert!(LabelSelector::parse("a=b,,c").is_err());
        assert!(LabelSelector::parse("env in dev").is_err());
        assert!(LabelSelector::parse("bad key=x").is_err());
    }
}
