//! Which records one client wants, and in which form: query parameters `plugin`,
//! `namespace`, `name` (or `deployment`, its alias for Deployment log viewers), `type` (each
//! repeatable: any of the values), `level` (the minimum), `since` (how many recent records
//! to replay, default 100) and `format` (`json`, the default, or `text`).
//!
//! A client is an adversary: every known parameter is bounded and validated (a bad value is
//! an error naming the parameter), at most [`MAX_VALUES`] values each and [`MAX_PARAMETERS`]
//! parameters in all. Unknown parameter names are ignored, as the Go server whose stream
//! this one follows did, so clients that send parameters of their own (`cluster`, a cache
//! buster) work unchanged.
//!
//! Verbose records (per-reconcile success lines, the audit records of `log`, `event` and
//! `requeue-after` actions that were simply carried out, and Events that repeat the log line
//! of the same change) go only to clients that ask for their type (`type=reconcile`,
//! `type=audit`, `type=event`) or for `level=debug`: by default one change is one line.

use super::hub::REPLAY_CAPACITY;
use super::record::{Level, Record, RecordType};
use crate::contract::names::{is_dns_label, is_dns_subdomain};

/// Records replayed on connect when `since` is not given.
pub const DEFAULT_SINCE: usize = 100;

/// The most values one parameter may be given.
pub const MAX_VALUES: usize = 16;

/// The most parameters (known or not) a query may carry.
pub const MAX_PARAMETERS: usize = 64;

/// A query the stream refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// `type=` names no record type.
    #[error("unknown type {0:?}: use log, event, audit, reload or reconcile")]
    Type(String),
    /// `level=` names no level.
    #[error("unknown level {0:?}: use debug, info, warn or error")]
    Level(String),
    /// `since=` is not a count.
    #[error("since must be a number of records (0 to {REPLAY_CAPACITY}), not {0:?}")]
    Since(String),
    /// `format=` names no format.
    #[error("unknown format {0:?}: use json or text")]
    Format(String),
    /// A name filter's value cannot be what it filters on.
    #[error("{parameter} {value:?} is not {expected}")]
    Value {
        /// The parameter.
        parameter: &'static str,
        /// Its value, capped.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A parameter given more than [`MAX_VALUES`] times.
    #[error("{0} is given more than {MAX_VALUES} times")]
    TooMany(&'static str),
    /// More than [`MAX_PARAMETERS`] parameters.
    #[error("the query has more than {MAX_PARAMETERS} parameters")]
    TooManyParameters,
}

/// How records are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One JSON object per frame, `timestamp` and `message` first.
    #[default]
    Json,
    /// One `[timestamp] message` line per frame, for terminals.
    Text,
}

/// One client's filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    plugins: Vec<String>,
    namespaces: Vec<String>,
    names: Vec<String>,
    types: Vec<RecordType>,
    level: Level,
    /// `level=debug` was asked for: verbose records too.
    debug: bool,
    /// How many recent records to replay first.
    pub since: usize,
    /// The frames' form.
    pub format: Format,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            plugins: Vec::new(),
            namespaces: Vec::new(),
            names: Vec::new(),
            types: Vec::new(),
            level: Level::Debug,
            debug: false,
            since: DEFAULT_SINCE,
            format: Format::Json,
        }
    }
}

/// Adds `value` to `list`, at most [`MAX_VALUES`] of them.
fn push<T>(list: &mut Vec<T>, parameter: &'static str, value: T) -> Result<(), FilterError> {
    if list.len() == MAX_VALUES {
        return Err(FilterError::TooMany(parameter));
    }
    list.push(value);
    Ok(())
}

/// `value` if `valid`, else the error naming `parameter`.
fn checked(
    parameter: &'static str,
    value: &str,
    valid: fn(&str) -> bool,
    expected: &'static str,
) -> Result<String, FilterError> {
    match valid(value) {
        true => Ok(value.to_string()),
        false => Err(FilterError::Value {
            parameter,
            value: shown(value),
            expected,
        }),
    }
}

const LABEL: &str = "a DNS-1123 label (lowercase letters, digits and '-', at most 63)";
const INSTANCE: &str = "a plugin instance name (a DNS-1123 label, or namespace/name of a Plugin object, either with @shadow)";

/// Whether `name` can be a plugin instance's: a DNS-1123 label (a file's instance), or
/// `namespace/name` of two labels, at most 119 bytes (a `Plugin` object's), either one
/// with `@shadow` after it (the instance running a candidate revision in shadow).
pub fn is_instance_name(name: &str) -> bool {
    let (name, _) = crate::worker::live_of(name);
    match name.split_once('/') {
        None => is_dns_label(name),
        Some((ns, object)) => {
            is_dns_label(ns) && is_dns_label(object) && name.len() <= 128 - "kubeplug/".len()
        }
    }
}
const SUBDOMAIN: &str = "an object name (a DNS-1123 subdomain, at most 253)";

impl Filter {
    /// Parses a URL query string (`plugin=a&plugin=b&type=audit&level=warn&since=10`).
    pub fn parse(query: &str) -> Result<Filter, FilterError> {
        let mut filter = Filter::default();
        let mut level_given = 0usize;
        for (count, (name, value)) in form_urlencoded::parse(query.as_bytes()).enumerate() {
            if count == MAX_PARAMETERS {
                return Err(FilterError::TooManyParameters);
            }
            match &*name {
                "plugin" => {
                    let plugin = checked("plugin", &value, is_instance_name, INSTANCE)?;
                    push(&mut filter.plugins, "plugin", plugin)?
                }
                "namespace" => {
                    let ns = checked("namespace", &value, is_dns_label, LABEL)?;
                    push(&mut filter.namespaces, "namespace", ns)?
                }
                parameter @ ("name" | "deployment") => {
                    let parameter = if parameter == "name" {
                        "name"
                    } else {
                        "deployment"
                    };
                    let object = checked(parameter, &value, is_dns_subdomain, SUBDOMAIN)?;
                    push(&mut filter.names, parameter, object)?
                }
                "type" => {
                    let kind = RecordType::parse(&value)
                        .ok_or_else(|| FilterError::Type(shown(&value)))?;
                    push(&mut filter.types, "type", kind)?
                }
                "level" => {
                    level_given += 1;
                    if level_given > MAX_VALUES {
                        return Err(FilterError::TooMany("level"));
                    }
                    filter.level =
                        Level::parse(&value).ok_or_else(|| FilterError::Level(shown(&value)))?;
                    filter.debug = filter.level == Level::Debug;
                }
                "since" => {
                    filter.since = value
                        .parse::<usize>()
                        .map_err(|_| FilterError::Since(shown(&value)))?
                        .min(REPLAY_CAPACITY)
                }
                "format" => {
                    filter.format = match &*value {
                        "json" => Format::Json,
                        "text" => Format::Text,
                        other => return Err(FilterError::Format(shown(other))),
                    }
                }
                // The token is the access layer's; other names are the client's own business.
                _ => {}
            }
        }
        Ok(filter)
    }

    /// Whether this client gets `record`.
    pub fn matches(&self, record: &Record) -> bool {
        if record.kind == RecordType::Lagged {
            return true;
        }
        let type_ok = match self.types.is_empty() {
            true => !record.verbose || self.debug,
            false => self.types.contains(&record.kind),
        };
        let listed = |wanted: &[String], have: &Option<String>| {
            wanted.is_empty() || have.as_ref().is_some_and(|h| wanted.contains(h))
        };
        type_ok
            && record.level >= self.level
            && listed(&self.plugins, &record.plugin)
            && listed(&self.namespaces, &record.namespace)
            && listed(&self.names, &record.name)
    }

    /// The frame this client gets for `record`.
    pub fn frame<'r>(&self, record: &'r Record) -> &'r str {
        match self.format {
            Format::Json => &record.json,
            Format::Text => &record.text,
        }
    }
}

/// A client's value in an error, capped.
fn shown(value: &str) -> String {
    crate::contract::text::shown_max(value, 64).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

    fn record(kind: RecordType, level: Level, fields: Value) -> Record {
        let Value::Object(fields) = fields else {
            unreachable!()
        };
        Record::new(kind, level, "m", fields)
    }

    #[test]
    fn filters_combine_any_of_each_parameter_and_all_parameters() {
        let f = Filter::parse("plugin=a&plugin=b&namespace=demo&type=log&type=audit&level=info")
            .unwrap();
        let log = |plugin: &str, key: &str, level| {
            record(
                RecordType::Log,
                level,
                json!({"plugin": plugin, "key": key}),
            )
        };
        assert!(f.matches(&log("a", "demo/web", Level::Info)));
        assert!(f.matches(&log("b", "demo/web", Level::Error)));
        assert!(!f.matches(&log("c", "demo/web", Level::Info)));
        assert!(!f.matches(&log("a", "shop/web", Level::Info)));
        assert!(!f.matches(&log("a", "demo/web", Level::Debug)));
        assert!(!f.matches(&record(
            RecordType::Reload,
            Level::Info,
            json!({"plugin": "a", "key": "demo/x"})
        )));
        assert!(f.matches(&Record::lagged(3)));
        assert_eq!(f.since, DEFAULT_SINCE);
    }

    #[test]
    fn one_object_is_selected_by_name_or_deployment_with_its_namespace() {
        let at = |key: &str| record(RecordType::Log, Level::Info, json!({"key": key}));
        let web = Filter::parse("namespace=demo&deployment=web").unwrap();
        assert!(web.matches(&at("demo/web")));
        assert!(!web.matches(&at("demo/api")));
        assert!(!web.matches(&at("shop/web")));
        assert!(!web.matches(&record(RecordType::Log, Level::Info, json!({}))));
        let named = Filter::parse("name=web&name=api").unwrap();
        assert!(named.matches(&at("shop/web")) && named.matches(&at("demo/api")));
        assert!(!named.matches(&at("demo/db")));
        // A cluster-scoped key is its name.
        assert!(Filter::parse("name=node-1").unwrap().matches(&at("node-1")));
    }

    #[test]
    fn reconcile_successes_only_when_asked_for() {
        let success = record(
            RecordType::Reconcile,
            Level::Debug,
            json!({"plugin": "a", "result": "success"}),
        );
        let failure = record(
            RecordType::Reconcile,
            Level::Warn,
            json!({"plugin": "a", "result": "error"}),
        );
        let all = Filter::default();
        assert!(!all.matches(&success));
        assert!(all.matches(&failure));
        let asked = Filter::parse("type=reconcile").unwrap();
        assert!(asked.matches(&success));
        assert!(asked.matches(&failure));
        assert!(!asked.matches(&record(
            RecordType::Log,
            Level::Info,
            Value::Object(Map::new())
        )));
        assert!(Filter::parse("level=debug").unwrap().matches(&success));
    }

    #[test]
    fn audits_of_logs_and_events_carried_out_only_when_asked_for() {
        let audit = |action: &str, decision: &str| {
            record(
                RecordType::Audit,
                Level::Debug,
                json!({"plugin": "a", "action": action, "decision": decision}),
            )
        };
        let all = Filter::default();
        assert!(!all.matches(&audit("log", "executed")));
        assert!(!all.matches(&audit("event", "executed")));
        assert!(all.matches(&audit("patch", "executed")));
        assert!(all.matches(&audit("event", "denied")));
        for asked in ["type=audit", "level=debug", "level=warn&level=debug"] {
            let f = Filter::parse(asked).unwrap();
            assert!(f.matches(&audit("log", "executed")), "{asked}");
        }
        assert!(
            !Filter::parse("level=info")
                .unwrap()
                .matches(&audit("log", "executed"))
        );
    }

    #[test]
    fn bad_values_are_named_unknown_parameters_ignored() {
        assert_eq!(
            Filter::parse("type=nope"),
            Err(FilterError::Type("nope".into()))
        );
        assert_eq!(
            Filter::parse("level=loud"),
            Err(FilterError::Level("loud".into()))
        );
        assert_eq!(
            Filter::parse("since=-1"),
            Err(FilterError::Since("-1".into()))
        );
        assert_eq!(
            Filter::parse("format=html"),
            Err(FilterError::Format("html".into()))
        );
        for (query, parameter) in [
            ("namespace=Demo", "namespace"),
            ("namespace=", "namespace"),
            ("plugin=a%2Fb%2Fc", "plugin"),
            ("deployment=web%0A", "deployment"),
            ("name=a..b", "name"),
        ] {
            match Filter::parse(query) {
                Err(FilterError::Value { parameter: p, .. }) => assert_eq!(p, parameter),
                other => panic!("{query}: {other:?}"),
            }
        }
        for instance in ["team-a/pinner", "pinner@shadow", "team-a/pinner@shadow"] {
            let query = format!("plugin={}", instance.replace('/', "%2F"));
            assert!(Filter::parse(&query).is_ok(), "{instance}");
        }
        for bad in ["a/b/c", "/a", "a@other", "A/b"] {
            assert!(!is_instance_name(bad), "{bad}");
        }
        let long = format!("name={}", "a".repeat(254));
        let err = Filter::parse(&long).unwrap_err();
        assert!(err.to_string().len() < 200, "{err}");
        let many = vec!["plugin=a"; MAX_VALUES + 1].join("&");
        assert_eq!(Filter::parse(&many), Err(FilterError::TooMany("plugin")));
        let crowd = vec!["x=1"; MAX_PARAMETERS + 1].join("&");
        assert_eq!(Filter::parse(&crowd), Err(FilterError::TooManyParameters));
        assert_eq!(
            Filter::parse("x=1&cluster=default&deployment=web&namespace=demo"),
            Ok(Filter {
                names: vec!["web".into()],
                namespaces: vec!["demo".into()],
                ..Filter::default()
            })
        );
        assert_eq!(Filter::parse("since=99999").unwrap().since, REPLAY_CAPACITY);
        assert_eq!(Filter::parse("since=0&token=t").unwrap().since, 0);
        assert_eq!(Filter::parse("format=text").unwrap().format, Format::Text);
    }
}
