//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy`): parsed once, matched
//! against an object's labels. The syntax is the Kubernetes API's: the embedded API server
//! and the host's cache `list` import (through its re-export `kubeplug::contract::selector`)
//! use this one parser, so a plugin and `kubectl -l` get one meaning.
//!
//! The selector may be a plugin's text: a term that does not parse is kept capped
//! ([`MAX_TERM_SHOWN_BYTES`]) and shown with Rust's `{:?}` escaping, which writes control
//! characters, bidi overrides and line separators as `\u{..}`, so the error is safe in a
//! log line without this crate depending on the host's text helpers.

use serde_json::Value;
use std::collections::BTreeMap;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` (or `key==value`): the label is set to the value.
    Equals(String, String),
    /// `key!=value`: the label is absent or set to another value.
    NotEquals(String, String),
    /// `key in (a,b)`: the label is set to one of the values.
    In(String, Vec<String>),
    /// `key notin (a,b)`: the label is absent or set to none of the values.
    NotIn(String, Vec<String>),
    /// `key`: the label is set.
    Exists(String),
    /// `!key`: the label is absent.
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

/// The longest selector accepted, in bytes: checked before anything else is done with it.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// The most requirements (comma-separated terms) of one selector.
pub const MAX_REQUIREMENTS: usize = 64;
/// The most values in the `in`/`notin` sets of one selector, together.
pub const MAX_SET_VALUES: usize = 256;
/// The most bytes of a refused term kept in [`SelectorError::Term`].
pub const MAX_TERM_SHOWN_BYTES: usize = 256;

/// A selector that is refused: too large, or a term that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A term that does not parse (kept capped).
    #[error("unable to parse requirement: invalid label selector term {term:?}")]
    Term {
        /// The term, cut to [`MAX_TERM_SHOWN_BYTES`].
        term: String,
    },
    /// Longer than [`MAX_SELECTOR_BYTES`].
    #[error("label selector of {bytes} bytes is longer than the limit of {MAX_SELECTOR_BYTES}")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// More than [`MAX_REQUIREMENTS`] terms.
    #[error("label selector has {count} requirements, more than the limit of {MAX_REQUIREMENTS}")]
    TooManyRequirements {
        /// How many it has.
        count: usize,
    },
    /// More than [`MAX_SET_VALUES`] values in its sets.
    #[error("label selector has more than {MAX_SET_VALUES} values in its sets")]
    TooManyValues,
}

impl LabelSelector {
    /// Parses the syntax of `kubectl -l` and of the API's `labelSelector` parameter.
    /// Its size is bounded first ([`MAX_SELECTOR_BYTES`], [`MAX_REQUIREMENTS`],
    /// [`MAX_SET_VALUES`]), so parsing and matching stay cheap whoever wrote it.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        if input.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError::TooLong { bytes: input.len() });
        }
        let terms: Vec<&str> = split_terms(input)
            .into_iter()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        if terms.len() > MAX_REQUIREMENTS {
            return Err(SelectorError::TooManyRequirements { count: terms.len() });
        }
        let reqs = terms
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()?;
        let values: usize = reqs
            .iter()
            .map(|r| match r {
                Requirement::In(_, vs) | Requirement::NotIn(_, vs) => vs.len(),
                _ => 0,
            })
            .sum();
        if values > MAX_SET_VALUES {
            return Err(SelectorError::TooManyValues);
        }
        Ok(Self(reqs))
    }

    /// Whether an object (its `metadata.labels`) satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas outside parentheses.
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

fn bad(term: &str) -> SelectorError {
    SelectorError::Term {
        term: term[..term.floor_char_boundary(MAX_TERM_SHOWN_BYTES)].to_string(),
    }
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(term: &str, rest: &str) -> Result<Vec<String>, SelectorError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(term))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(term: &str) -> Result<Requirement, SelectorError> {
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
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
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
) -> Result<Requirement, SelectorError> {
    let (key, value) = (key.trim(), value.trim());
    if !valid_key(key) || value.contains(['(', ')', ' ', '=', '!']) {
        return Err(bad(term));
    }
    Ok(make(key.into(), value.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn operators() {
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
    fn label_maps_match_like_objects() {
        let labels: BTreeMap<String, String> = [("env".to_string(), "qa".to_string())].into();
        let s = LabelSelector::parse("env in (dev, qa),!legacy").unwrap();
        assert!(s.matches_labels(&labels));
        assert!(
            !LabelSelector::parse("env=prod")
                .unwrap()
                .matches_labels(&labels)
        );
    }

    #[test]
    fn parse_errors_name_the_term() {
        assert!(LabelSelector::parse("a b c").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("bad key=x").is_err());
        let err = LabelSelector::parse("app=web,env in dev").unwrap_err();
        assert_eq!(
            err,
            SelectorError::Term {
                term: "env in dev".into()
            }
        );
        let err = LabelSelector::parse(&format!("a b\n\u{1b}[31m{}", "c".repeat(3000)))
            .unwrap_err()
            .to_string();
        assert!(
            err.len() < 400 && !err.contains('\n') && !err.contains('\u{1b}'),
            "{err}"
        );
        let err = LabelSelector::parse("a b\u{202e}\u{2066}\u{2028}\r")
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains(['\u{202e}', '\u{2066}', '\u{2028}', '\r']),
            "{err}"
        );
        let cut = "é".repeat(200);
        let SelectorError::Term { term } = LabelSelector::parse(&format!("a {cut}")).unwrap_err()
        else {
            panic!("a term error")
        };
        assert!(term.len() <= MAX_TERM_SHOWN_BYTES && term.len() >= MAX_TERM_SHOWN_BYTES - 1);
    }

    #[test]
    fn sizes_are_bounded_before_parsing() {
        let huge = format!("!{}", vec!["k"; 1_000_000].join(",!"));
        assert_eq!(
            LabelSelector::parse(&huge),
            Err(SelectorError::TooLong { bytes: huge.len() })
        );
        let many = vec!["!k"; MAX_REQUIREMENTS + 1].join(",");
        assert_eq!(
            LabelSelector::parse(&many),
            Err(SelectorError::TooManyRequirements {
                count: MAX_REQUIREMENTS + 1
            })
        );
        assert!(LabelSelector::parse(&vec!["!k"; MAX_REQUIREMENTS].join(",")).is_ok());
        let set = |n: usize| format!("k in ({})", vec!["v"; n].join(","));
        assert!(LabelSelector::parse(&set(MAX_SET_VALUES)).is_ok());
        assert_eq!(
            LabelSelector::parse(&set(MAX_SET_VALUES + 1)),
            Err(SelectorError::TooManyValues)
        );
    }
}
