//! The ledger's store: entries in a redb file under the state directory, numbered in the
//! order they were written, with an index by object. Bounded by size and age: every batch
//! written drops the oldest entries past either bound. Readers see committed batches only
//! (redb's snapshots), so a query never waits for the writer and a crash loses at most the
//! batch being written.

use super::entry::Entry;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Entries by sequence number, as JSON.
const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
/// `(object index key, sequence)` for every entry: an object's history is one range.
const BY_OBJECT: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_object");
/// Counters kept with the entries: `bytes` (their JSON sizes).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The ledger's file in the state directory.
pub const FILE_NAME: &str = "ledger.redb";

/// Why the store could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error("cannot open the ledger {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// What redb said (another process holding it says "already open").
        source: redb::DatabaseError,
    },
    /// The state directory could not be created.
    #[error("cannot create the state directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A transaction failed.
    #[error("ledger {0}")]
    Redb(#[from] redb::Error),
    /// An entry could not be encoded.
    #[error("ledger entry: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<redb::TransactionError> for StoreError {
    fn from(e: redb::TransactionError) -> Self {
        StoreError::Redb(e.into())
    }
}
impl From<redb::TableError> for StoreError {
    fn from(e: redb::TableError) -> Self {
        StoreError::Redb(e.into())
    }
}
impl From<redb::StorageError> for StoreError {
    fn from(e: redb::StorageError) -> Self {
        StoreError::Redb(e.into())
    }
}
impl From<redb::CommitError> for StoreError {
    fn from(e: redb::CommitError) -> Self {
        StoreError::Redb(e.into())
    }
}

/// How much the store keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// The most bytes of entries (their JSON) kept.
    pub max_bytes: u64,
    /// Entries older than this are dropped.
    pub max_age: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_bytes: 256 << 20,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What an object's history query asks.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// `kind/namespace/name` ([`super::ObjectId::index_key`]).
    pub object: String,
    /// Only entries at or after this time.
    pub since: Option<jiff::Timestamp>,
    /// Only this plugin's entries.
    pub plugin: Option<String>,
    /// At most this many (the newest), in time order.
    pub limit: usize,
}

/// An open ledger file.
pub struct Store {
    db: Database,
    retention: Retention,
}

impl Store {
    /// Opens (or creates) the ledger in `dir`.
    pub fn open(dir: &Path, retention: Retention) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(FILE_NAME);
        let db = Database::create(&path).map_err(|source| StoreError::Open { path, source })?;
        let tx = db.begin_write()?;
        tx.open_table(ENTRIES)?;
        tx.open_table(BY_OBJECT)?;
        tx.open_table(META)?;
        tx.commit()?;
        Ok(Store { db, retention })
    }

    /// Writes `entries` in one transaction, then drops what is past the retention.
    pub fn append(&self, entries: &[Entry]) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut table = tx.open_table(ENTRIES)?;
            let mut index = tx.open_table(BY_OBJECT)?;
            let mut meta = tx.open_table(META)?;
            let first = table.last()?.map_or(0, |(k, _)| k.value() + 1);
            let mut bytes = meta.get("bytes")?.map_or(0, |v| v.value());
            for (seq, entry) in (first..).zip(entries) {
                let json = serde_json::to_vec(entry)?;
                table.insert(seq, json.as_slice())?;
                index.insert((entry.object.index_key().as_str(), seq), ())?;
                bytes += json.len() as u64;
            }
            let oldest = jiff::Timestamp::now()
                .checked_sub(
                    jiff::SignedDuration::try_from(self.retention.max_age)
                        .unwrap_or(jiff::SignedDuration::MAX),
                )
                .unwrap_or(jiff::Timestamp::MIN);
            // The oldest first, while past either bound (the newest entry always stays).
            while table.len()? > 1 {
                let Some((seq, json)) =
                    table.first()?.map(|(k, v)| (k.value(), v.value().to_vec()))
                else {
                    break;
                };
                let entry: Entry = serde_json::from_slice(&json)?;
                if bytes <= self.retention.max_bytes && entry.time >= oldest {
                    break;
                }
                table.remove(seq)?;
                index.remove((entry.object.index_key().as_str(), seq))?;
                bytes = bytes.saturating_sub(json.len() as u64);
            }
            meta.insert("bytes", bytes)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// An object's entries, oldest first, as `query` asks.
    pub fn history(&self, query: &Query) -> Result<Vec<Entry>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(ENTRIES)?;
        let index = tx.open_table(BY_OBJECT)?;
        let key = query.object.as_str();
        let mut found = Vec::new();
        for row in index.range((key, 0)..=(key, u64::MAX))?.rev() {
            let (k, _) = row?;
            let seq = k.value().1;
            let Some(json) = table.get(seq)? else {
                continue;
            };
            let entry: Entry = serde_json::from_slice(json.value())?;
            if query.since.is_some_and(|s| entry.time < s) {
                break;
            }
            if query.plugin.as_ref().is_some_and(|p| *p != entry.plugin) {
                continue;
            }
            found.push(entry);
            if found.len() >= query.limit.max(1) {
                break;
            }
        }
        found.reverse();
        Ok(found)
    }

    /// How many entries and bytes of entries the store holds.
    pub fn size(&self) -> Result<(u64, u64), StoreError> {
        let tx = self.db.begin_read()?;
        let entries = tx.open_table(ENTRIES)?.len()?;
        let bytes = tx.open_table(META)?.get("bytes")?.map_or(0, |v| v.value());
        Ok((entries, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::entry::ObjectId;

    fn entry(name: &str, plugin: &str, at: jiff::Timestamp) -> Entry {
        Entry {
            time: at,
            object: ObjectId {
                kind: "Deployment".into(),
                namespace: "demo".into(),
                name: name.into(),
            },
            plugin: plugin.into(),
            digest: "sha256:00".into(),
            reason: "changed".into(),
            attempt: 1,
            resource_version: Some("7".into()),
            reads: Vec::new(),
            read_count: 0,
            triggers: Vec::new(),
            queued: 1,
            actions: Vec::new(),
            action_count: 0,
            writes: Vec::new(),
            error: None,
        }
    }

    fn query(name: &str) -> Query {
        Query {
            object: format!("deployment/demo/{name}"),
            limit: 100,
            ..Query::default()
        }
    }

    #[test]
    fn an_objects_history_comes_back_in_order_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        {
            let store = Store::open(dir.path(), Retention::default()).unwrap();
            store
                .append(&[entry("web", "a", now), entry("api", "a", now)])
                .unwrap();
            store.append(&[entry("web", "b", now)]).unwrap();
        }
        let store = Store::open(dir.path(), Retention::default()).unwrap();
        let web = store.history(&query("web")).unwrap();
        assert_eq!(
            web.iter().map(|e| e.plugin.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let only_b = Query {
            plugin: Some("b".into()),
            ..query("web")
        };
        assert_eq!(store.history(&only_b).unwrap().len(), 1);
        let newest = Query {
            limit: 1,
            ..query("web")
        };
        assert_eq!(store.history(&newest).unwrap()[0].plugin, "b");
        assert_eq!(store.history(&query("gone")).unwrap(), Vec::new());
    }

    #[test]
    fn the_oldest_entries_go_past_the_size_bound() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        let one = serde_json::to_vec(&entry("web", "p0", now)).unwrap().len() as u64;
        let retention = Retention {
            max_bytes: one * 3,
            ..Retention::default()
        };
        let store = Store::open(dir.path(), retention).unwrap();
        for i in 0..10 {
            store
                .append(&[entry("web", &format!("p{i}"), now)])
                .unwrap();
        }
        let kept = store.history(&query("web")).unwrap();
        assert_eq!(
            kept.iter().map(|e| e.plugin.as_str()).collect::<Vec<_>>(),
            ["p7", "p8", "p9"]
        );
        assert_eq!(store.size().unwrap(), (3, one * 3));
    }

    #[test]
    fn entries_past_the_age_bound_go_and_since_filters() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        let old = now - jiff::SignedDuration::from_hours(2);
        let store = Store::open(
            dir.path(),
            Retention {
                max_age: Duration::from_secs(3600),
                ..Retention::default()
            },
        )
        .unwrap();
        store.append(&[entry("web", "old", old)]).unwrap();
        store.append(&[entry("web", "new", now)]).unwrap();
        let kept = store.history(&query("web")).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].plugin, "new");
        store.append(&[entry("web", "newer", now)]).unwrap();
        let since = Query {
            since: Some(now + jiff::SignedDuration::from_secs(1)),
            ..query("web")
        };
        assert!(store.history(&since).unwrap().is_empty());
    }

    #[test]
    fn a_second_open_of_a_held_ledger_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let _held = Store::open(dir.path(), Retention::default()).unwrap();
        let err = Store::open(dir.path(), Retention::default())
            .err()
            .expect("a held file");
        assert!(err.to_string().contains("ledger.redb"), "{err}");
    }
}
