//! The ledger's store: entries in a redb file under the state directory, numbered in the
//! order they were written, with an index by object and one by namespace. Bounded by size
//! and age: every batch written drops the entries past the age bound, then, while past the
//! size bound, the oldest entry of the namespace holding the most bytes, so a namespace that
//! reconciles a lot evicts its own history before a quiet one's (max-min fair shares, as the
//! API server's Priority and Fairness shares its seats). Readers see committed batches only
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
/// `(namespace, sequence)` for every entry: a namespace's oldest entry is its range's first.
const BY_NAMESPACE: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_namespace");
/// Bytes of entries (their JSON sizes) per namespace (`""`: cluster-scoped objects).
const NAMESPACE_BYTES: TableDefinition<&str, u64> = TableDefinition::new("namespace_bytes");
/// Counters kept with the entries: `bytes` (their JSON sizes) and `version` (the layout).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The layout: 2 added the namespace index, built on open from the entries of a ledger
/// written before it.
const VERSION: u64 = 2;

/// The ledger's file in the state directory.
pub const FILE_NAME: &str = "ledger.redb";

/// redb's page cache. Its default (1 GiB) keeps the pages written, so the host's resident set
/// would grow with the file up to its size bound; a batch's pages and the trees' upper levels
/// fit in this, and `kubeplug why` reads the rest through the kernel's page cache. At 16 MiB
/// the cache was full after a cold start on 10,000 objects (e2e phase 8, a 21-25 MiB file);
/// at 4 MiB the ledger still added 11 % to the host's RSS there, against a 10 % target.
const CACHE_BYTES: usize = 1 << 20;

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
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|source| StoreError::Open { path, source })?;
        let tx = db.begin_write()?;
        tx.open_table(ENTRIES)?;
        tx.open_table(BY_OBJECT)?;
        tx.open_table(BY_NAMESPACE)?;
        tx.open_table(NAMESPACE_BYTES)?;
        let mut meta = tx.open_table(META)?;
        if meta.get("version")?.map_or(0, |v| v.value()) < VERSION {
            drop(meta);
            index_namespaces(&tx)?;
            meta = tx.open_table(META)?;
            meta.insert("version", VERSION)?;
        }
        drop(meta);
        tx.commit()?;
        Ok(Store { db, retention })
    }

    /// Writes `entries` in one transaction, then drops what is past the retention.
    pub fn append(&self, entries: &[Entry]) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut t = Tables {
                entries: tx.open_table(ENTRIES)?,
                by_object: tx.open_table(BY_OBJECT)?,
                by_namespace: tx.open_table(BY_NAMESPACE)?,
                namespace_bytes: tx.open_table(NAMESPACE_BYTES)?,
            };
            let mut meta = tx.open_table(META)?;
            let first = t.entries.last()?.map_or(0, |(k, _)| k.value() + 1);
            let mut bytes = meta.get("bytes")?.map_or(0, |v| v.value());
            for (seq, entry) in (first..).zip(entries) {
                let json = serde_json::to_vec(entry)?;
                t.entries.insert(seq, json.as_slice())?;
                t.index(entry, seq, json.len() as u64)?;
                bytes += json.len() as u64;
            }
            let oldest = jiff::Timestamp::now()
                .checked_sub(
                    jiff::SignedDuration::try_from(self.retention.max_age)
                        .unwrap_or(jiff::SignedDuration::MAX),
                )
                .unwrap_or(jiff::Timestamp::MIN);
            // Past the age bound: the oldest first (the newest entry always stays).
            while t.entries.len()? > 1 {
                let Some(seq) = t.entries.first()?.map(|(k, _)| k.value()) else {
                    break;
                };
                let Some(gone) = t.remove_if(seq, |e| e.time < oldest)? else {
                    break;
                };
                bytes = bytes.saturating_sub(gone);
            }
            if bytes > self.retention.max_bytes {
                bytes = t.evict_fairly(bytes, self.retention.max_bytes)?;
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

/// The write transaction's tables an entry is stored and indexed in.
struct Tables<'tx> {
    entries: redb::Table<'tx, u64, &'static [u8]>,
    by_object: redb::Table<'tx, (&'static str, u64), ()>,
    by_namespace: redb::Table<'tx, (&'static str, u64), ()>,
    namespace_bytes: redb::Table<'tx, &'static str, u64>,
}

impl Tables<'_> {
    /// Indexes entry `seq` of `size` bytes by object and namespace.
    fn index(&mut self, entry: &Entry, seq: u64, size: u64) -> Result<(), StoreError> {
        let namespace = entry.object.namespace.as_str();
        self.by_object
            .insert((entry.object.index_key().as_str(), seq), ())?;
        self.by_namespace.insert((namespace, seq), ())?;
        let held = self
            .namespace_bytes
            .get(namespace)?
            .map_or(0, |v| v.value());
        self.namespace_bytes.insert(namespace, held + size)?;
        Ok(())
    }

    /// Removes entry `seq` and its index rows when `drop_it` says so; its size if removed.
    fn remove_if(
        &mut self,
        seq: u64,
        drop_it: impl Fn(&Entry) -> bool,
    ) -> Result<Option<u64>, StoreError> {
        let Some(json) = self.entries.get(seq)?.map(|v| v.value().to_vec()) else {
            return Ok(None);
        };
        let entry: Entry = serde_json::from_slice(&json)?;
        if !drop_it(&entry) {
            return Ok(None);
        }
        let (namespace, size) = (entry.object.namespace.as_str(), json.len() as u64);
        self.entries.remove(seq)?;
        self.by_object
            .remove((entry.object.index_key().as_str(), seq))?;
        self.by_namespace.remove((namespace, seq))?;
        let held = self
            .namespace_bytes
            .get(namespace)?
            .map_or(0, |v| v.value());
        match held.saturating_sub(size) {
            0 => self.namespace_bytes.remove(namespace)?,
            left => self.namespace_bytes.insert(namespace, left)?,
        };
        Ok(Some(size))
    }

    /// Drops the oldest entry of the namespace holding the most bytes until `bytes` is within
    /// `max` (the newest entry always stays); returns the bytes left.
    fn evict_fairly(&mut self, mut bytes: u64, max: u64) -> Result<u64, StoreError> {
        let newest = self.entries.last()?.map(|(k, _)| k.value());
        let mut held = std::collections::BinaryHeap::new();
        for row in self.namespace_bytes.iter()? {
            let (namespace, size) = row?;
            held.push((size.value(), namespace.value().to_string()));
        }
        while bytes > max {
            let Some((size, namespace)) = held.pop() else {
                break;
            };
            let first = self
                .by_namespace
                .range((namespace.as_str(), 0)..=(namespace.as_str(), u64::MAX))?
                .next()
                .transpose()?
                .map(|(k, _)| k.value().1);
            // A namespace whose oldest is the newest entry has nothing more to give.
            let Some(seq) = first.filter(|seq| Some(*seq) != newest) else {
                continue;
            };
            let gone = self.remove_if(seq, |_| true)?.unwrap_or(0);
            bytes = bytes.saturating_sub(gone);
            if size > gone {
                held.push((size - gone, namespace));
            }
        }
        Ok(bytes)
    }
}

/// Builds the namespace index and byte counts from the entries (a ledger of layout 1).
fn index_namespaces(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let entries = tx.open_table(ENTRIES)?;
    let mut by_namespace = tx.open_table(BY_NAMESPACE)?;
    let mut sizes: std::collections::BTreeMap<String, u64> = Default::default();
    for row in entries.iter()? {
        let (seq, json) = row?;
        let entry: Entry = serde_json::from_slice(json.value())?;
        by_namespace.insert((entry.object.namespace.as_str(), seq.value()), ())?;
        *sizes.entry(entry.object.namespace).or_default() += json.value().len() as u64;
    }
    let mut namespace_bytes = tx.open_table(NAMESPACE_BYTES)?;
    for (namespace, size) in &sizes {
        namespace_bytes.insert(namespace.as_str(), size)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, plugin: &str, at: jiff::Timestamp) -> Entry {
        Entry::sample("demo", name, plugin, at)
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
    fn a_busy_namespace_evicts_its_own_history_before_a_quiet_ones() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        let in_ns = |ns: &str, plugin: String| Entry::sample(ns, "web", &plugin, now);
        let one = serde_json::to_vec(&in_ns("noisy", "n00".into()))
            .unwrap()
            .len() as u64;
        let store = Store::open(
            dir.path(),
            Retention {
                max_bytes: one * 10,
                ..Retention::default()
            },
        )
        .unwrap();
        let quiet: Vec<Entry> = (0..3).map(|i| in_ns("quiet", format!("q{i:02}"))).collect();
        store.append(&quiet).unwrap();
        for i in 0..100 {
            store.append(&[in_ns("noisy", format!("n{i:02}"))]).unwrap();
        }
        let history = |ns: &str| {
            store
                .history(&Query {
                    object: format!("deployment/{ns}/web"),
                    limit: 1000,
                    ..Query::default()
                })
                .unwrap()
                .into_iter()
                .map(|e| e.plugin)
                .collect::<Vec<_>>()
        };
        assert_eq!(history("quiet"), ["q00", "q01", "q02"]);
        let noisy = history("noisy");
        assert_eq!(noisy.len(), 7, "{noisy:?}");
        assert_eq!(noisy.first().map(String::as_str), Some("n93"));
        assert_eq!(store.size().unwrap(), (10, one * 10));
    }

    #[test]
    fn a_ledger_written_before_the_namespace_index_gets_one_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        {
            let store = Store::open(dir.path(), Retention::default()).unwrap();
            store
                .append(&[Entry::sample("a", "web", "p", now), entry("web", "p", now)])
                .unwrap();
            // As layout 1 left it: no namespace index, no version.
            let tx = store.db.begin_write().unwrap();
            tx.delete_table(BY_NAMESPACE).unwrap();
            tx.delete_table(NAMESPACE_BYTES).unwrap();
            tx.open_table(META).unwrap().remove("version").unwrap();
            tx.commit().unwrap();
        }
        let one = serde_json::to_vec(&entry("web", "p", now)).unwrap().len() as u64;
        let store = Store::open(
            dir.path(),
            Retention {
                max_bytes: one * 2,
                ..Retention::default()
            },
        )
        .unwrap();
        store.append(&[entry("web", "q", now)]).unwrap();
        // The busiest namespace (demo, two entries) lost its oldest; `a` kept its one.
        assert_eq!(store.size().unwrap().0, 2);
        let a = Query {
            object: "deployment/a/web".into(),
            limit: 10,
            ..Query::default()
        };
        assert_eq!(store.history(&a).unwrap().len(), 1);
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
