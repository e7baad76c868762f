//! `as=Table` answers (meta.k8s.io/v1 `Table`) so `kubectl get` prints the familiar columns
//! (READY, UP-TO-DATE, AVAILABLE for Deployments; READY, STATUS for Pods; DATA for
//! ConfigMaps; a CRD's `additionalPrinterColumns` for its kinds).

use super::jsonpath::JsonPath;
use super::kinds::{PrinterColumn, ResourceKind};
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};
use std::sync::Arc;

/// Whether the client asked for a Table (kubectl's human-readable output does).
pub fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("as=Table"))
}

fn column(name: &str, type_: &str) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": type_, "format": format, "description": "", "priority": 0})
}

/// kubectl's short age format (`42s`, `5m3s`, `3h`, `12d`).
pub fn human_age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 && s % 60 != 0 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 && m % 60 != 0 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 && h % 24 != 0 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

fn age(object: &Value) -> String {
    object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| human_age(jiff::Timestamp::now().as_second() - t.as_second()))
        .unwrap_or_else(|| "<unknown>".into())
}

/// When an Event (stored, core form) was last seen: `lastTimestamp`, its series' last
/// observation, `eventTime`, or its creation.
fn last_seen(event: &Value) -> String {
    let when = [
        "/lastTimestamp",
        "/series/lastObservedTime",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| event.pointer(p).and_then(Value::as_str))
    .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    when.map(|t| human_age(jiff::Timestamp::now().as_second() - t.as_second()))
        .unwrap_or_else(|| "<unknown>".into())
}

/// kubectl's Event columns; the name only with `-o wide`, as the real server marks it.
fn event_columns() -> Vec<Value> {
    let mut name = column("Name", "string");
    name["priority"] = json!(1);
    vec![
        column("Last Seen", "string"),
        column("Type", "string"),
        column("Reason", "string"),
        column("Object", "string"),
        column("Message", "string"),
        name,
    ]
}

/// An Event row (stored, core form), in [`event_columns`] order.
fn event_cells(o: &Value) -> Vec<Value> {
    let involved = &o["involvedObject"];
    let object = format!(
        "{}/{}",
        involved["kind"].as_str().unwrap_or_default().to_lowercase(),
        involved["name"].as_str().unwrap_or_default()
    );
    vec![
        json!(last_seen(o)),
        o["type"].clone(),
        o["reason"].clone(),
        json!(object),
        o["message"].clone(),
        o["metadata"]["name"].clone(),
    ]
}

/// A CRD's printer column as the real server describes it in `columnDefinitions`.
fn custom_column(c: &PrinterColumn) -> Value {
    json!({"name": c.name, "type": c.type_, "format": c.format,
        "description": c.description, "priority": c.priority})
}

/// One cell of a CRD printer column, as the real server's table convertor computes it: the
/// first value the path reaches; a string column prints it as JSONPath prints (text for
/// scalars, compact JSON for lists and maps); a date column is an age; typed columns keep a
/// value of their type; anything else (missing, wrong type, no match) is `null`.
fn custom_cell(c: &PrinterColumn, object: &Value) -> Value {
    let Ok(path) = JsonPath::parse(&c.json_path) else {
        return Value::Null;
    };
    let Some(value) = path.find(object).into_iter().next() else {
        return Value::Null;
    };
    match (c.type_.as_str(), value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(s)) => json!(s),
        ("string", Value::Number(_) | Value::Bool(_)) => json!(value.to_string()),
        ("string", v) => json!(v.to_string()),
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => json!(i),
            None => n.as_f64().map_or(Value::Null, |f| json!(f as i64)),
        },
        ("number", Value::Number(n)) => json!(n),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => match s.parse::<jiff::Timestamp>() {
            Ok(t) => json!(human_age(
                jiff::Timestamp::now().as_second() - t.as_second()
            )),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// How many keys a ConfigMap or Secret holds (`kubectl get`'s DATA).
fn data_count(o: &Value) -> usize {
    ["data", "binaryData"]
        .iter()
        .filter_map(|f| o[*f].as_object())
        .map(|m| m.len())
        .sum()
}

fn columns(kind: &ResourceKind) -> Vec<Value> {
    if kind.builtin && kind.kind == "Event" {
        return event_columns();
    }
    let mut cols = vec![column("Name", "string")];
    if !kind.builtin {
        cols.extend(kind.printer_columns.iter().map(custom_column));
        return cols;
    }
    match (kind.builtin, kind.kind.as_str()) {
        (true, "Deployment") => cols.extend([
            column("Ready", "string"),
            column("Up-to-date", "integer"),
            column("Available", "integer"),
        ]),
        (true, "Pod") => cols.extend([
            column("Ready", "string"),
            column("Status", "string"),
            column("Restarts", "integer"),
        ]),
        (true, "Namespace") => cols.push(column("Status", "string")),
        (true, "ConfigMap") => cols.push(column("Data", "string")),
        (true, "Secret") => cols.extend([column("Type", "string"), column("Data", "string")]),
        _ => {}
    }
    cols.push(column("Age", "string"));
    cols
}

fn cells(kind: &ResourceKind, o: &Value) -> Vec<Value> {
    if kind.builtin && kind.kind == "Event" {
        return event_cells(o);
    }
    let mut cells = vec![o["metadata"]["name"].clone()];
    if !kind.builtin {
        cells.extend(kind.printer_columns.iter().map(|c| custom_cell(c, o)));
        return cells;
    }
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    match (kind.builtin, kind.kind.as_str()) {
        (true, "Deployment") => {
            let status = &o["status"];
            cells.push(json!(format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                o["spec"]["replicas"].as_i64().unwrap_or(1)
            )));
            cells.push(json!(int(&status["updatedReplicas"])));
            cells.push(json!(int(&status["availableReplicas"])));
        }
        (true, "Pod") => {
            let containers = o["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = o["status"]["containerStatuses"]
                .as_array()
                .map_or(0, |c| c.iter().filter(|s| s["ready"] == true).count());
            cells.push(json!(format!("{ready}/{containers}")));
            cells.push(o["status"]["phase"].clone());
            cells.push(json!(0));
        }
        (true, "Namespace") => cells.push(o["status"]["phase"].clone()),
        (true, "ConfigMap") => cells.push(json!(data_count(o))),
        (true, "Secret") => {
            cells.push(o["type"].clone());
            cells.push(json!(data_count(o)));
        }
        _ => {}
    }
    cells.push(json!(age(o)));
    cells
}

/// A Table of `objects` with list metadata `meta`.
pub fn table(kind: &ResourceKind, objects: &[Arc<Value>], meta: Value) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut metadata = o["metadata"].clone();
            if let Some(m) = metadata.as_object_mut() {
                m.remove("managedFields");
            }
            json!({
                "cells": cells(kind, o),
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata},
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
        "columnDefinitions": columns(kind), "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        assert_eq!(human_age(42), "42s");
        assert_eq!(human_age(5 * 60 + 3), "5m3s");
        assert_eq!(human_age(30 * 60), "30m");
        assert_eq!(human_age(5 * 3600 + 60), "5h1m");
        assert_eq!(human_age(30 * 3600), "30h");
        assert_eq!(human_age(3 * 86_400 + 3600), "3d1h");
        assert_eq!(human_age(100 * 86_400), "100d");
    }

    #[test]
    fn deployment_rows() {
        let kind = super::super::kinds::Registry::builtin()
            .by_name("deployments")
            .unwrap();
        let d = json!({"metadata": {"name": "web", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 3}, "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        let t = table(&kind, &[Arc::new(d)], json!({}));
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 5);
        assert_eq!(t["rows"][0]["cells"][1], "2/3");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web");
    }

    #[test]
    fn custom_kinds_print_their_crd_columns() {
        let crd: Value =
            serde_saphyr::from_str(include_str!("../../deploy/crds/plugins.yaml")).unwrap();
        let kind = super::super::kinds::kinds_from_crd(&crd).unwrap().remove(0);
        let created = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(300);
        let p = json!({"metadata": {"name": "pinner", "creationTimestamp": created.to_string()},
            "status": {"mode": "enforce", "shortDigest": "0123456789ab", "conditions": [
                {"type": "Reconciling", "status": "False", "reason": "Done"},
                {"type": "Ready", "status": "True", "reason": "Running"}]}});
        let t = table(&kind, &[Arc::new(p)], json!({}));
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Mode", "Ready", "Reason", "Digest", "Age"]);
        assert_eq!(t["columnDefinitions"][5]["type"], "date");
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["pinner", "enforce", "True", "Running", "0123456789ab", "5m"])
        );
        // Nothing there yet: empty cells, as the real server sends them.
        let fresh = json!({"metadata": {"name": "new", "creationTimestamp": created.to_string()}});
        let t = table(&kind, &[Arc::new(fresh)], json!({}));
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["new", null, null, null, null, "5m"])
        );
    }

    #[test]
    fn typed_columns_and_lists() {
        let mut kind = ResourceKind::custom("example.com", "v1", "W", "ws", false);
        let col = |name: &str, type_: &str, path: &str| PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            json_path: path.into(),
            ..PrinterColumn::age()
        };
        kind.printer_columns = vec![
            col("Names", "string", ".spec.names"),
            col("N", "integer", ".spec.n"),
            col("Wrong", "integer", ".spec.s"),
            col("On", "boolean", ".spec.on"),
            col("Count", "string", ".spec.n"),
            col("When", "date", ".spec.s"),
        ];
        let w = json!({"metadata": {"name": "w"},
            "spec": {"names": ["a", "b"], "n": 3, "s": "x", "on": true}});
        let t = table(&kind, &[Arc::new(w)], json!({}));
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["w", "[\"a\",\"b\"]", 3, null, true, "3", "<invalid>"])
        );
    }
}
