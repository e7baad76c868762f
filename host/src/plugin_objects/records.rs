//! The host's own record of each Plugin's status: what must survive a restart (the last
//! revisions, the last rollout's report, when each condition last changed) and digests of
//! the fields it last wrote. A Plugin's status is rebuilt from this record, never from the
//! status read back (a tenant allowed `plugins/status` could write anything there).
//!
//! One ConfigMap per Plugin in the host's own namespace (`--host-namespace`), where tenants
//! have no rights: named `kubeplug-status-<hash of namespace/name/uid>`, labelled
//! [`RECORD_LABEL`]` = `[`RECORD_KIND`], at most [`MAX_RECORD_BYTES`], written (server-side
//! apply, field manager [`MANAGER`]) only by the replica that writes the Plugin's status,
//! deleted once the Plugin is gone. A record read back is checked like any input: one that
//! does not parse or fails a check is reported and rebuilt, never trusted.

use super::forgery::field_digests;
use super::shadow::RolloutReport;
use super::status::MAX_REVISIONS;
use crate::cluster::ObjKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The label every record carries (value [`RECORD_KIND`]); the host watches only these.
pub const RECORD_LABEL: &str = "kubeplug.dev/record";
/// The value of [`RECORD_LABEL`] on a Plugin status record.
pub const RECORD_KIND: &str = "plugin-status";
/// The key of the record in the ConfigMap's data.
pub const DATA_KEY: &str = "record.json";
/// The field manager of record writes.
pub const MANAGER: &str = "kubeplug-records";
/// The largest record accepted or written, in bytes.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// The version of the record's format.
const FORMAT: u32 = 1;
/// Conditions whose transition times a record keeps.
const CONDITIONS: [&str; 4] = ["Ready", "Reconciling", "Stalled", "Shadowing"];
/// The longest image reference kept.
const MAX_IMAGE_BYTES: usize = 1024;

/// Which Plugin a record is about: a Plugin deleted and created again under its name (a
/// new uid) starts a new record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

impl PluginRef {
    /// The name of its record's ConfigMap: a prefix and 32 hex digits of a SHA-256 of
    /// namespace, name and uid (nothing the tenant chose appears in it).
    pub fn record_name(&self) -> String {
        let mut h = Sha256::new();
        for part in [&self.namespace, &self.name, &self.uid] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        format!("kubeplug-status-{}", &hex::encode(h.finalize())[..32])
    }
}

/// One revision that ran, as `status.revisions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revision {
    /// `sha256:<hex>` of the module.
    pub digest: String,
    /// The Plugin generation it started from.
    pub generation: i64,
    /// When it first ran (RFC 3339).
    pub at: String,
    /// The image, pinned (absent: a ConfigMap module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// When a condition last changed to its status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    /// The condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Its `lastTransitionTime`.
    pub at: String,
}

/// What the host recorded about one Plugin's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The format's version.
    pub version: u32,
    /// The Plugin it is about.
    pub plugin: PluginRef,
    /// The last revisions, newest first.
    pub revisions: Vec<Revision>,
    /// The last rollout's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutReport>,
    /// When each condition last changed.
    pub transitions: Vec<Transition>,
    /// Digests of the status fields last written ([`field_digests`]).
    pub written: BTreeMap<String, String>,
}

/// Why a record read back is not used. Names the check, never the record's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Bigger than [`MAX_RECORD_BYTES`].
    #[error("the record is {0} bytes, more than {MAX_RECORD_BYTES}")]
    TooLarge(usize),
    /// No [`DATA_KEY`] in the ConfigMap.
    #[error("the ConfigMap has no {DATA_KEY}")]
    Missing,
    /// Not a record (JSON syntax or shape).
    #[error("the record does not parse (line {line}, column {column})")]
    Malformed {
        /// Where parsing stopped.
        line: usize,
        /// Where parsing stopped.
        column: usize,
    },
    /// A format this host does not know.
    #[error("the record has format version {0}, this host knows {FORMAT}")]
    Version(u32),
    /// About another Plugin than the one its name is for.
    #[error("the record is about another Plugin")]
    OtherPlugin,
    /// A field failed its check.
    #[error("the record's {0} is not valid")]
    Invalid(&'static str),
}

/// Whether `s` is `sha256:` and 64 lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_time(s: &str) -> bool {
    s.len() <= 64 && s.parse::<k8s_openapi::jiff::Timestamp>().is_ok()
}

impl Record {
    /// The record of a status the host computed (and wrote) for `plugin`.
    pub fn of(plugin: &PluginRef, status: &Value) -> Record {
        let revisions = serde_json::from_value(status["revisions"].clone()).unwrap_or_default();
        let rollout = serde_json::from_value(status["rollout"].clone()).ok();
        let transitions = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some(Transition {
                    type_: c["type"].as_str()?.to_string(),
                    status: c["status"].as_str()?.to_string(),
                    at: c["lastTransitionTime"].as_str()?.to_string(),
                })
            })
            .collect();
        Record {
            version: FORMAT,
            plugin: plugin.clone(),
            revisions,
            rollout,
            transitions,
            written: field_digests(status),
        }
    }

    /// What the status builder carries forward from it, shaped as a status: conditions
    /// (type, status and time only), revisions, rollout.
    pub fn view(&self) -> Value {
        let conditions: Vec<Value> = self
            .transitions
            .iter()
            .map(|t| json!({"type": t.type_, "status": t.status, "lastTransitionTime": t.at}))
            .collect();
        let mut view = json!({"conditions": conditions, "revisions": self.revisions});
        if let Some(r) = &self.rollout {
            view["rollout"] = serde_json::to_value(r).unwrap_or(Value::Null);
        }
        view
    }

    /// Parses and checks a record read back for `plugin`.
    pub fn parse(text: &str, plugin: &PluginRef) -> Result<Record, RecordError> {
        if text.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(text.len()));
        }
        let record: Record = serde_json::from_str(text).map_err(|e| RecordError::Malformed {
            line: e.line(),
            column: e.column(),
        })?;
        record.check(plugin)?;
        Ok(record)
    }

    fn check(&self, plugin: &PluginRef) -> Result<(), RecordError> {
        use RecordError::Invalid;
        if self.version != FORMAT {
            return Err(RecordError::Version(self.version));
        }
        if self.plugin != *plugin {
            return Err(RecordError::OtherPlugin);
        }
        if self.revisions.len() > MAX_REVISIONS {
            return Err(Invalid("revisions"));
        }
        let mut digests = HashSet::new();
        for r in &self.revisions {
            if !is_digest(&r.digest) || !digests.insert(&r.digest) {
                return Err(Invalid("revisions.digest"));
            }
            if r.generation < 0 {
                return Err(Invalid("revisions.generation"));
            }
            if !is_time(&r.at) {
                return Err(Invalid("revisions.at"));
            }
            let image_ok = r.image.as_deref().is_none_or(|i| {
                i.len() <= MAX_IMAGE_BYTES
                    && i.starts_with("oci://")
                    && i.bytes().all(|b| b.is_ascii_graphic())
            });
            if !image_ok {
                return Err(Invalid("revisions.image"));
            }
        }
        if let Some(r) = &self.rollout {
            r.check().map_err(Invalid)?;
        }
        let mut types = HashSet::new();
        for t in &self.transitions {
            if !CONDITIONS.contains(&t.type_.as_str()) || !types.insert(&t.type_) {
                return Err(Invalid("transitions.type"));
            }
            if t.status != "True" && t.status != "False" {
                return Err(Invalid("transitions.status"));
            }
            if !is_time(&t.at) {
                return Err(Invalid("transitions.at"));
            }
        }
        let fields_ok = self.written.iter().all(|(k, v)| {
            super::forgery::OWNED_FIELDS.contains(&k.as_str())
                && v.len() == 64
                && v.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !fields_ok {
            return Err(Invalid("written"));
        }
        Ok(())
    }

    /// The record as stored, within [`MAX_RECORD_BYTES`]: the rollout's examples go first,
    /// then the rollout, if it would be larger.
    fn to_text(&self) -> String {
        let mut record = self.clone();
        loop {
            let text = serde_json::to_string(&record).unwrap_or_default();
            if text.len() <= MAX_RECORD_BYTES {
                return text;
            }
            match &mut record.rollout {
                Some(r) if !r.examples.is_empty() => r.examples.clear(),
                Some(_) => record.rollout = None,
                None => {
                    record.revisions.truncate(1);
                    return serde_json::to_string(&record).unwrap_or_default();
                }
            }
        }
    }
}

/// What is known of one Plugin's record.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The records are not read yet (or cannot be): nothing may be written from them.
    Unavailable,
    /// The Plugin has no record.
    Missing,
    /// Its record.
    Found(Box<Record>),
    /// Its record is there but not usable.
    Invalid(RecordError),
}

/// Why a record could not be written or deleted.
#[derive(Debug, thiserror::Error)]
#[error("cannot {verb} ConfigMap {namespace}/{name}: {source}")]
pub struct RecordWriteError {
    verb: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

/// The records in the host's namespace: watched (only the labelled ConfigMaps there), and
/// those this replica wrote kept in memory until it stops writing the Plugin's status (the
/// watch may lag a write). Clones share it.
#[derive(Clone)]
pub struct RecordStore {
    api: Api<ConfigMap>,
    namespace: String,
    store: Store<ConfigMap>,
    writer: Arc<Mutex<Option<Writer<ConfigMap>>>>,
    synced: Arc<AtomicBool>,
    mine: Arc<Mutex<HashMap<String, Record>>>,
    /// Invalid records already reported, by name and resourceVersion.
    reported: Arc<Mutex<HashSet<(String, String)>>>,
}

use crate::sync::lock;

impl RecordStore {
    /// The records of namespace `namespace`; [`RecordStore::start`] follows them.
    pub fn new(client: kube::Client, namespace: &str) -> RecordStore {
        let writer = Writer::default();
        RecordStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            store: writer.as_reader(),
            writer: Arc::new(Mutex::new(Some(writer))),
            synced: Arc::default(),
            mine: Arc::default(),
            reported: Arc::default(),
        }
    }

    /// Starts watching the records (once; later calls return None), notifying `wake` once
    /// they are listed.
    pub fn start(&self, wake: Arc<Notify>) -> Option<JoinHandle<()>> {
        let writer = lock(&self.writer).take()?;
        let config = watcher::Config::default().labels(&format!("{RECORD_LABEL}={RECORD_KIND}"));
        let stream = reflector::reflector(
            writer,
            watcher::watcher(self.api.clone(), config).default_backoff(),
        );
        let synced = self.synced.clone();
        let namespace = self.namespace.clone();
        Some(tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut warned = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::InitDone) => {
                        // A pass that found the records unavailable wrote no status: it
                        // runs again now rather than at the next resync.
                        synced.store(true, Ordering::Release);
                        wake.notify_one();
                    }
                    Ok(_) => {}
                    Err(err) if !warned || !synced.load(Ordering::Acquire) => {
                        warned = true;
                        tracing::warn!(namespace = %namespace, "cannot watch the Plugin status records (ConfigMaps labelled {RECORD_LABEL}={RECORD_KIND}; see the Role kubeplug-records in host/deploy/rbac.yaml), retrying: {err}");
                    }
                    Err(_) => {}
                }
            }
        }))
    }

    /// Whether the records were listed at least once.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The record of `plugin`: the one this replica last wrote, else the one watched.
    pub fn lookup(&self, plugin: &PluginRef) -> Lookup {
        let name = plugin.record_name();
        if let Some(r) = lock(&self.mine).get(&name) {
            return Lookup::Found(Box::new(r.clone()));
        }
        if !self.synced() {
            return Lookup::Unavailable;
        }
        let key = reflector::ObjectRef::<ConfigMap>::new(&name).within(&self.namespace);
        let Some(cm) = self.store.get(&key) else {
            return Lookup::Missing;
        };
        let parsed = match cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) {
            Some(text) => Record::parse(text, plugin),
            None => Err(RecordError::Missing),
        };
        match parsed {
            Ok(r) => Lookup::Found(Box::new(r)),
            Err(e) => {
                let rv = cm.metadata.resource_version.clone().unwrap_or_default();
                if lock(&self.reported).insert((name.clone(), rv)) {
                    tracing::warn!(namespace = %self.namespace, configmap = %name, plugin = %format!("{}/{}", plugin.namespace, plugin.name), "the Plugin's status record is not used, it is rebuilt: {e}");
                }
                Lookup::Invalid(e)
            }
        }
    }

    /// Forgets what this replica wrote for `plugin` (it stopped writing its status): the
    /// watched record is read from now on.
    pub fn forget(&self, plugin: &PluginRef) {
        lock(&self.mine).remove(&plugin.record_name());
    }

    /// Writes `record` unless it is what this replica last wrote.
    pub async fn put(&self, record: &Record) -> Result<bool, RecordWriteError> {
        let name = record.plugin.record_name();
        if lock(&self.mine).get(&name) == Some(record) {
            return Ok(false);
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (RECORD_LABEL.to_string(), RECORD_KIND.to_string()),
                    (
                        "app.kubernetes.io/managed-by".to_string(),
                        "kubeplug".to_string(),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(DATA_KEY.to_string(), record.to_text())])),
            ..ConfigMap::default()
        };
        let mut value = serde_json::to_value(&cm).unwrap_or(Value::Null);
        value["apiVersion"] = json!("v1");
        value["kind"] = json!("ConfigMap");
        let params = PatchParams::apply(MANAGER).force();
        match self.api.patch(&name, &params, &Patch::Apply(value)).await {
            Ok(_) => {
                lock(&self.mine).insert(name, record.clone());
                Ok(true)
            }
            Err(source) => {
                lock(&self.mine).remove(&name);
                Err(RecordWriteError {
                    verb: "apply",
                    namespace: self.namespace.clone(),
                    name,
                    source,
                })
            }
        }
    }

    /// Deletes the records of Plugins not in `existing` (record names) that `owns` says
    /// this replica answers for (by the Plugin's key; a record that does not parse, by its
    /// own key in the host's namespace). Returns how many it deleted.
    pub async fn collect(
        &self,
        existing: &HashSet<String>,
        owns: impl Fn(&ObjKey) -> bool,
    ) -> usize {
        if !self.synced() {
            return 0;
        }
        let mut deleted = 0;
        for cm in self.store.state() {
            let Some(name) = cm.metadata.name.clone() else {
                continue;
            };
            if existing.contains(&name) {
                continue;
            }
            let about = cm
                .data
                .as_ref()
                .and_then(|d| d.get(DATA_KEY))
                .filter(|t| t.len() <= MAX_RECORD_BYTES)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .and_then(|v| serde_json::from_value::<PluginRef>(v["plugin"].clone()).ok())
                .filter(|p| p.record_name() == name);
            let owner = match &about {
                Some(p) => ObjKey::new(Some(&p.namespace), &p.name),
                None => ObjKey::new(Some(&self.namespace), &name),
            };
            if !owns(&owner) {
                continue;
            }
            lock(&self.mine).remove(&name);
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    deleted += 1;
                    tracing::info!(namespace = %self.namespace, configmap = %name, "deleted the status record of a Plugin that is gone");
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    let err = RecordWriteError {
                        verb: "delete",
                        namespace: self.namespace.clone(),
                        name,
                        source,
                    };
                    tracing::warn!("{err}");
                }
            }
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin() -> PluginRef {
        PluginRef {
            namespace: "team-a".into(),
            name: "p".into(),
            uid: "u-1".into(),
        }
    }

    fn status() -> Value {
        json!({
            "observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Running", "message": "m",
                "observedGeneration": 2, "lastTransitionTime": "2026-11-28T12:00:00Z"}],
            "revisions": [{"digest": format!("sha256:{}", "a".repeat(64)), "generation": 2,
                "at": "2026-11-28T12:00:00Z"}],
            "runner": "r1",
        })
    }

    #[test]
    fn a_record_round_trips_and_is_named_by_a_hash() {
        let r = Record::of(&plugin(), &status());
        assert_eq!(r.revisions.len(), 1);
        assert_eq!(r.transitions[0].at, "2026-11-28T12:00:00Z");
        assert_eq!(Record::parse(&r.to_text(), &plugin()), Ok(r.clone()));
        let view = r.view();
        assert_eq!(view["revisions"], status()["revisions"]);
        assert_eq!(
            view["conditions"][0]["lastTransitionTime"],
            "2026-11-28T12:00:00Z"
        );
        let name = plugin().record_name();
        assert!(
            name.starts_with("kubeplug-status-") && name.len() == 48,
            "{name}"
        );
        let mut again = plugin();
        again.uid = "u-2".into();
        assert_ne!(again.record_name(), name);
        // The record of another Plugin (a copy under this one's name) is not used.
        assert_eq!(
            Record::parse(&r.to_text(), &again),
            Err(RecordError::OtherPlugin)
        );
    }

    #[test]
    fn a_bad_record_is_refused_by_the_check_it_fails() {
        let good = Record::of(&plugin(), &status());
        let bad = |f: &dyn Fn(&mut Value)| {
            let mut v = serde_json::to_value(&good).unwrap();
            f(&mut v);
            Record::parse(&v.to_string(), &plugin())
        };
        assert!(matches!(
            Record::parse("{not json", &plugin()),
            Err(RecordError::Malformed { .. })
        ));
        assert_eq!(
            bad(&|v| v["revisions"][0]["digest"] = json!("sha256:fff")),
            Err(RecordError::Invalid("revisions.digest"))
        );
        assert_eq!(
            bad(&|v| v["revisions"][0]["image"] = json!("oci://evil.example/x\nForged: yes")),
            Err(RecordError::Invalid("revisions.image"))
        );
        assert_eq!(
            bad(&|v| v["transitions"][0]["at"] = json!("yesterday")),
            Err(RecordError::Invalid("transitions.at"))
        );
        assert_eq!(
            bad(&|v| v["version"] = json!(7)),
            Err(RecordError::Version(7))
        );
        assert!(matches!(
            bad(&|v| v["extra"] = json!(1)),
            Err(RecordError::Malformed { .. })
        ));
        let six: Vec<Value> = (0..6)
            .map(|i| json!({"digest": format!("sha256:{:064x}", i), "generation": 1, "at": "2026-11-28T12:00:00Z"}))
            .collect();
        assert_eq!(
            bad(&|v| v["revisions"] = json!(six)),
            Err(RecordError::Invalid("revisions"))
        );
        let huge = "x".repeat(MAX_RECORD_BYTES + 1);
        assert_eq!(
            Record::parse(&huge, &plugin()),
            Err(RecordError::TooLarge(MAX_RECORD_BYTES + 1))
        );
        // The error never carries what the record held.
        let err = bad(&|v| v["revisions"][0]["digest"] = json!("sha256:evil")).unwrap_err();
        assert!(!err.to_string().contains("evil"));
    }
}
