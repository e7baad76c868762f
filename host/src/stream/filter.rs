//! Which records one client wants: query parameters `plugin`, `namespace`, `type` (each
//! repeatable: any of the values), `level` (the minimum) and `since` (how many recent records
//! to replay, default 100). Per-reconcile success lines go only to clients that name
//! `type=reconcile`.

use super::hub::REPLAY_CAPACITY;
use super::record::{Level, Record, RecordType};

/// Records replayed on connect when `since` is not given.
pub const DEFAULT_SINCE: usize = 100;

/// A query parameter the stream does not understand.
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
    /// A parameter the stream does not take.
    #[error(
        "unknown parameter {0:?}: the stream takes plugin, namespace, type, level, since and token"
    )]
    Unknown(String),
}

/// One client's filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    plugins: Vec<String>,
    namespaces: Vec<String>,
    types: Vec<RecordType>,
    level: Level,
    /// How many recent records to replay first.
    pub since: usize,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            plugins: Vec::new(),
            namespaces: Vec::new(),
            types: Vec::new(),
            level: Level::Debug,
            since: DEFAULT_SINCE,
        }
    }
}

impl Filter {
    /// Parses a URL query string (`plugin=a&plugin=b&type=audit&level=warn&since=10`).
    pub fn parse(query: &str) -> Result<Filter, FilterError> {
        let mut filter = Filter::default();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "plugin" => filter.plugins.push(value.into_owned()),
                "namespace" => filter.namespaces.push(value.into_owned()),
                "type" => filter.types.push(
                    RecordType::parse(&value).ok_or_else(|| FilterError::Type(shown(&value)))?,
                ),
                "level" => {
                    filter.level =
                        Level::parse(&value).ok_or_else(|| FilterError::Level(shown(&value)))?
                }
                "since" => {
                    filter.since = value
                        .parse::<usize>()
                        .map_err(|_| FilterError::Since(shown(&value)))?
                        .min(REPLAY_CAPACITY)
                }
                "token" => {}
                other => return Err(FilterError::Unknown(shown(other))),
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
            true => !record.verbose,
            false => self.types.contains(&record.kind),
        };
        let listed = |wanted: &[String], have: &Option<String>| {
            wanted.is_empty() || have.as_ref().is_some_and(|h| wanted.contains(h))
        };
        type_ok
            && record.level >= self.level
            && listed(&self.plugins, &record.plugin)
            && listed(&self.namespaces, &record.namespace)
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
    }

    #[test]
    fn bad_parameters_are_named() {
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
        assert_eq!(Filter::parse("x=1"), Err(FilterError::Unknown("x".into())));
        assert_eq!(Filter::parse("since=99999").unwrap().since, REPLAY_CAPACITY);
        assert_eq!(Filter::parse("since=0&token=t").unwrap().since, 0);
    }
}
