//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which kubectl's typed commands (`create namespace`, `create deployment`) send for built-in
//! kinds. The body is the `k8s\0` magic, then a `runtime.Unknown` naming the type and holding
//! the object's message. The message types come from the `k8s-rs-pb` crate (rust-protobuf,
//! generated from the Kubernetes `.proto` files, with serde derives in Kubernetes' field
//! names); responses stay JSON, which clients accept alongside.
//!
//! Two things of that crate are worked around here, measured: its reflection deadlocks (every
//! file descriptor lists itself as a dependency), so objects are decoded as typed messages and
//! serialised with serde, not walked by descriptor; and some of its serialisers panic on
//! missing fields (`Quantity` without its string, out-of-range `Time`), so a hostile body's
//! panic is caught and answered as a 400. Its JSON is then brought to the API server's: the
//! unset fields Go writes anyway (empty strings, zero times, empty lists) are left out, and
//! raw JSON fields (`RawExtension`, `FieldsV1`) are inlined. The crate types `MicroTime`
//! fields (`eventTime`, a Lease's `renewTime`) as `Time`, so they keep the second only.

use super::errors::ApiError;
use k8s_rs_pb::apimachinery::pkg::runtime::Unknown;
use protobuf::Message;
use serde_json::{Map, Value};

/// The media type of the encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every protobuf-encoded object starts with.
const MAGIC: &[u8; 4] = b"k8s\0";

/// What Go's zero `Time` serialises to; a real server writes `null`.
const ZERO_TIME: &str = "1970-01-01T00:00:00Z";

/// Whether a `Content-Type` names the protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Decodes a protobuf request body into the object's JSON form, with `apiVersion` and `kind`.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |what: String| ApiError::bad_request(format!("error decoding request body: {what}"));
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("protobuf body without the k8s\\0 prefix".into()))?;
    let unknown = Unknown::parse_from_bytes(envelope)
        .map_err(|e| bad(format!("invalid runtime.Unknown envelope: {e}")))?;
    if let Some(encoding) = unknown.contentEncoding.as_deref().filter(|e| !e.is_empty()) {
        return Err(bad(format!("unsupported content encoding {encoding:?}")));
    }
    let api_version = unknown.typeMeta.apiVersion.clone().unwrap_or_default();
    let kind = unknown.typeMeta.kind.clone().unwrap_or_default();
    let raw = unknown.raw();
    let decoded = std::panic::catch_unwind(|| typed_json(&api_version, &kind, raw))
        .map_err(|_| bad(format!("{kind} message with fields out of range")))?;
    let object = decoded
        .ok_or_else(|| {
            ApiError::unsupported_media_type(format!(
                "no protobuf encoding is known for {kind:?} in {api_version:?}; send JSON"
            ))
        })?
        .map_err(|e| bad(format!("invalid {kind} message: {e}")))?;
    // A ConfigMap's and Secret's maps hold user data: empty values stay (api_json would drop
    // them), and bytes are base64 in JSON.
    let mut object = object;
    let user_maps: &[&str] = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap" | "Secret") => &["data", "binaryData", "stringData"],
        _ => &[],
    };
    let maps: Vec<(&str, Value)> = user_maps
        .iter()
        .filter_map(|f| Some((*f, object.as_object_mut()?.remove(*f)?)))
        .collect();
    let mut object = match api_json(object) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    // Empty maps are unset in protobuf; the crate writes them as `{}`.
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.retain(|k, v| {
            !(matches!(k.as_str(), "labels" | "annotations")
                && v.as_object().is_some_and(Map::is_empty))
        });
    }
    for (field, map) in maps {
        if let Value::Object(entries) = map
            && !entries.is_empty()
        {
            let entries = entries
                .into_iter()
                .map(|(k, v)| (k, data_value(v)))
                .collect();
            object.insert(field.into(), Value::Object(entries));
        }
    }
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(object))
}

/// Parses `raw` as the message of a built-in kind the server serves and serialises it;
/// `None` for a type not known here.
fn typed_json(api_version: &str, kind: &str, raw: &[u8]) -> Option<Result<Value, String>> {
    use k8s_rs_pb::api::{apps, authentication, authorization, coordination, core, events, rbac};
    use k8s_rs_pb::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_rs_pb::apimachinery::pkg::apis::meta;
    fn parse<M: Message + serde::Serialize>(raw: &[u8]) -> Result<Value, String> {
        let message = M::parse_from_bytes(raw).map_err(|e| e.to_string())?;
        serde_json::to_value(&message).map_err(|e| e.to_string())
    }
    Some(match (api_version, kind) {
        ("v1", "Namespace") => parse::<core::v1::Namespace>(raw),
        ("v1", "Pod") => parse::<core::v1::Pod>(raw),
        ("v1", "Event") => parse::<core::v1::Event>(raw),
        ("v1", "ConfigMap") => parse::<core::v1::ConfigMap>(raw),
        ("v1", "Secret") => parse::<core::v1::Secret>(raw),
        ("v1", "ServiceAccount") => parse::<core::v1::ServiceAccount>(raw),
        ("apps/v1", "Deployment") => parse::<apps::v1::Deployment>(raw),
        ("rbac.authorization.k8s.io/v1", "Role") => parse::<rbac::v1::Role>(raw),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => parse::<rbac::v1::ClusterRole>(raw),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => parse::<rbac::v1::RoleBinding>(raw),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            parse::<rbac::v1::ClusterRoleBinding>(raw)
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview") => {
            parse::<authorization::v1::SubjectAccessReview>(raw)
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            parse::<authorization::v1::SelfSubjectAccessReview>(raw)
        }
        ("authorization.k8s.io/v1", "LocalSubjectAccessReview") => {
            parse::<authorization::v1::LocalSubjectAccessReview>(raw)
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            parse::<authorization::v1::SelfSubjectRulesReview>(raw)
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            parse::<authentication::v1::TokenRequest>(raw)
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            parse::<authentication::v1::SelfSubjectReview>(raw)
        }
        ("autoscaling/v1", "Scale") => parse::<k8s_rs_pb::api::autoscaling::v1::Scale>(raw),
        ("coordination.k8s.io/v1", "Lease") => parse::<coordination::v1::Lease>(raw),
        ("events.k8s.io/v1", "Event") => parse::<events::v1::Event>(raw),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            parse::<apiextensions::v1::CustomResourceDefinition>(raw)
        }
        (_, "DeleteOptions") => parse::<meta::v1::DeleteOptions>(raw),
        _ => return None,
    })
}

/// A value of a ConfigMap's or Secret's map: a string stays, bytes (the crate writes them as
/// a list of numbers) become base64, as in the API server's JSON.
fn data_value(value: Value) -> Value {
    use base64::Engine;
    match value {
        Value::Array(bytes) => {
            let bytes: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        other => other,
    }
}

/// The crate's JSON as the API server's: unset fields out (`None` for the value itself), raw
/// JSON inlined.
fn api_json(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() || s == ZERO_TIME => None,
        Value::Array(items) if items.is_empty() => None,
        // An empty string in a list is a value (`apiGroups: [""]`, the core group).
        Value::Array(items) => Some(Value::Array(
            items
                .into_iter()
                .filter_map(|item| match item {
                    Value::String(s) => Some(Value::String(s)),
                    other => api_json(other),
                })
                .collect(),
        )),
        Value::Object(map) => {
            if let Some(raw) = raw_bytes(&map) {
                return serde_json::from_slice(&raw).ok();
            }
            // rust-protobuf names the proto field `type` `type_`; no Kubernetes field is
            // called that.
            Some(Value::Object(
                map.into_iter()
                    .filter_map(|(k, v)| {
                        let k = if k == "type_" { "type".to_string() } else { k };
                        api_json(v).map(|v| (k, v))
                    })
                    .collect(),
            ))
        }
        other => Some(other),
    }
}

/// The bytes of a raw JSON field (`{"raw": [123, ...]}`, `FieldsV1`'s `{"Raw": ...}`).
fn raw_bytes(map: &Map<String, Value>) -> Option<Vec<u8>> {
    let (key, Value::Array(bytes)) = map.iter().next()? else {
        return None;
    };
    if map.len() != 1 || (key != "raw" && key != "Raw") {
        return None;
    }
    bytes
        .iter()
        .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_rs_pb::api::apps::v1::Deployment;
    use k8s_rs_pb::api::core::v1::Namespace;
    use k8s_rs_pb::apimachinery::pkg::runtime::TypeMeta;
    use serde_json::json;

    /// A body as client-go writes it: the magic, then `Unknown{typeMeta, raw}`.
    pub(crate) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let mut unknown = Unknown::new();
        let mut type_meta = TypeMeta::new();
        type_meta.apiVersion = Some(api_version.into());
        type_meta.kind = Some(kind.into());
        unknown.typeMeta = protobuf::MessageField::some(type_meta);
        unknown.raw = Some(raw);
        let mut body = MAGIC.to_vec();
        body.extend(unknown.write_to_bytes().expect("encodes"));
        body
    }

    #[test]
    fn a_namespace_decodes_to_its_json() {
        let mut ns = Namespace::new();
        let meta = ns.metadata.mut_or_insert_default();
        meta.name = Some("team-a".into());
        meta.generateName = Some(String::new());
        meta.labels.insert("team".into(), "a".into());
        let creation = meta.creationTimestamp.mut_or_insert_default();
        creation.seconds = Some(0);
        creation.nanos = Some(0);
        let body = envelope("v1", "Namespace", ns.write_to_bytes().unwrap());
        let object = decode(&body).unwrap();
        assert_eq!(object["apiVersion"], "v1");
        assert_eq!(object["kind"], "Namespace");
        assert_eq!(object["metadata"]["name"], "team-a");
        assert_eq!(object["metadata"]["labels"], json!({"team": "a"}));
        let meta = object["metadata"].as_object().unwrap();
        assert!(
            !meta.contains_key("generateName"),
            "Go's empty string is unset: {object}"
        );
        assert!(
            !meta.contains_key("creationTimestamp"),
            "the zero time is unset: {object}"
        );
    }

    #[test]
    fn a_deployment_keeps_numbers_times_and_int_or_strings() {
        let mut d = Deployment::new();
        let meta = d.metadata.mut_or_insert_default();
        meta.name = Some("web".into());
        meta.creationTimestamp.mut_or_insert_default().seconds = Some(1_767_225_600);
        let spec = d.spec.mut_or_insert_default();
        spec.replicas = Some(0);
        spec.selector
            .mut_or_insert_default()
            .matchLabels
            .insert("app".into(), "web".into());
        let rolling = spec
            .strategy
            .mut_or_insert_default()
            .rollingUpdate
            .mut_or_insert_default();
        let surge = rolling.maxSurge.mut_or_insert_default();
        surge.type_ = Some(1);
        surge.strVal = Some("25%".into());
        let unavailable = rolling.maxUnavailable.mut_or_insert_default();
        unavailable.type_ = Some(0);
        unavailable.intVal = Some(1);
        let pod = spec
            .template
            .mut_or_insert_default()
            .spec
            .mut_or_insert_default();
        let mut container = k8s_rs_pb::api::core::v1::Container::new();
        container.name = Some("app".into());
        container.image = Some("nginx".into());
        container
            .resources
            .mut_or_insert_default()
            .limits
            .insert("memory".into(), {
                let mut q = k8s_rs_pb::apimachinery::pkg::api::resource::Quantity::new();
                q.string = Some("64Mi".into());
                q
            });
        pod.containers.push(container);
        let object = decode(&envelope(
            "apps/v1",
            "Deployment",
            d.write_to_bytes().unwrap(),
        ))
        .unwrap();
        assert_eq!(
            object["metadata"]["creationTimestamp"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(object["spec"]["replicas"], 0, "a zero pointer int stays");
        assert_eq!(object["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(
            object["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            "25%"
        );
        assert_eq!(
            object["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            1
        );
        let c = &object["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "nginx");
        assert_eq!(c["resources"]["limits"]["memory"], "64Mi");
    }

    #[test]
    fn bad_bodies_are_named() {
        let no_magic = decode(b"{}").unwrap_err();
        assert!(
            no_magic.message.contains("k8s\\0 prefix"),
            "{}",
            no_magic.message
        );
        let garbage = decode(b"k8s\0\xff\xff\xff").unwrap_err();
        assert_eq!(garbage.code, 400, "{}", garbage.message);
        let unknown = decode(&envelope("example.com/v1", "Widget", Vec::new())).unwrap_err();
        assert_eq!(unknown.code, 415, "{}", unknown.message);
        assert!(unknown.message.contains("Widget"), "{}", unknown.message);
        let truncated = decode(&envelope("v1", "Namespace", vec![0x0a, 0x05, b'a'])).unwrap_err();
        assert!(
            truncated.message.contains("Namespace"),
            "{}",
            truncated.message
        );
    }

    #[test]
    fn config_map_bytes_become_base64_and_user_data_stays_as_sent() {
        let mut cm = k8s_rs_pb::api::core::v1::ConfigMap::new();
        cm.metadata.mut_or_insert_default().name = Some("pinner".into());
        // One key named `raw`: not mistaken for a raw JSON field.
        cm.binaryData
            .insert("raw".into(), vec![0, 0x61, 0x73, 0x6d, 0xff]);
        cm.data.insert("empty".into(), String::new());
        let object = decode(&envelope("v1", "ConfigMap", cm.write_to_bytes().unwrap())).unwrap();
        assert_eq!(object["binaryData"], json!({"raw": "AGFzbf8="}), "{object}");
        assert_eq!(object["data"], json!({"empty": ""}), "{object}");
        let mut secret = k8s_rs_pb::api::core::v1::Secret::new();
        secret.metadata.mut_or_insert_default().name = Some("s".into());
        secret.data.insert("k".into(), b"v".to_vec());
        secret.type_ = Some("Opaque".into());
        let object = decode(&envelope("v1", "Secret", secret.write_to_bytes().unwrap())).unwrap();
        assert_eq!(object["data"], json!({"k": "dg=="}), "{object}");
        assert_eq!(object["type"], "Opaque", "{object}");
        assert_eq!(
            object["metadata"],
            json!({"name": "s"}),
            "no empty maps: {object}"
        );
    }

    #[test]
    fn content_types() {
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(is_protobuf(
            "application/vnd.kubernetes.protobuf; charset=utf-8"
        ));
        assert!(!is_protobuf("application/json"));
    }

    #[test]
    fn a_quantity_without_its_string_is_a_400_not_a_panic() {
        let mut pod = k8s_rs_pb::api::core::v1::Pod::new();
        let mut container = k8s_rs_pb::api::core::v1::Container::new();
        container.name = Some("app".into());
        container.resources.mut_or_insert_default().limits.insert(
            "memory".into(),
            k8s_rs_pb::apimachinery::pkg::api::resource::Quantity::new(),
        );
        pod.spec.mut_or_insert_default().containers.push(container);
        let err = decode(&envelope("v1", "Pod", pod.write_to_bytes().unwrap())).unwrap_err();
        assert_eq!(err.code, 400, "{}", err.message);
        assert!(err.message.contains("Pod"), "{}", err.message);
    }

    #[test]
    fn raw_fields_and_micro_times_become_json() {
        let mut event = k8s_rs_pb::api::events::v1::Event::new();
        event.metadata.mut_or_insert_default().name = Some("web.1".into());
        let time = event.eventTime.mut_or_insert_default();
        time.seconds = Some(1_767_225_600);
        time.nanos = Some(5_000);
        event.note = Some("scaled".into());
        let object = decode(&envelope(
            "events.k8s.io/v1",
            "Event",
            event.write_to_bytes().unwrap(),
        ))
        .unwrap();
        // The crate serialises MicroTime to the second.
        assert_eq!(object["eventTime"], "2026-01-01T00:00:00Z");
        assert_eq!(object["note"], "scaled");
        let mut crd = k8s_rs_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition::new();
        let mut version = k8s_rs_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion::new();
        version.name = Some("v1".into());
        let schema = version
            .schema
            .mut_or_insert_default()
            .openAPIV3Schema
            .mut_or_insert_default();
        schema.type_ = Some("object".into());
        schema.default.mut_or_insert_default().raw = Some(br#"{"a":1}"#.to_vec());
        crd.spec.mut_or_insert_default().versions.push(version);
        let object = decode(&envelope(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd.write_to_bytes().unwrap(),
        ))
        .unwrap();
        let schema = &object["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["default"], serde_json::json!({"a": 1}), "{object}");
    }
}
