//! The decision ledger (issue 39): every reconcile recorded on local disk — why it ran, the
//! object version the plugin saw, each action with the policy's verdict, and what each write
//! left its object at — so "why did this happen?" has an answer after Events are pruned.
//! Workers offer entries without waiting; one thread writes them in batches. When the
//! queue is full or the disk fails, entries are dropped and counted, never waited for.

mod diff;
mod entry;
mod store;

pub use diff::{MAX_PATHS, changed_paths};
pub use entry::{Entry, MAX_ACTIONS, ObjectId, TriggerRecord, Verdict, Written, capped};
pub use store::{FILE_NAME, Query, Retention, Store, StoreError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Where and how much the ledger keeps.
#[derive(Debug, Clone)]
pub struct LedgerConfig {
    /// The state directory (the ledger is [`FILE_NAME`] in it).
    pub dir: PathBuf,
    /// Size and age bounds.
    pub retention: Retention,
    /// Entries waiting for the writer, at most; more are dropped.
    pub queue: usize,
}

impl LedgerConfig {
    /// The ledger in `dir`, with the default bounds.
    pub fn in_dir(dir: PathBuf) -> LedgerConfig {
        LedgerConfig {
            dir,
            retention: Retention::default(),
            queue: 4096,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DropLabels {
    reason: String,
}

/// A handle on the open ledger; clones share it. The writer thread ends when the last
/// handle is dropped, after writing what was queued.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

struct Inner {
    queue: SyncSender<Entry>,
    store: Arc<Store>,
    written: Counter,
    dropped: Family<DropLabels, Counter>,
}

impl Ledger {
    /// Opens the ledger and starts its writer thread.
    pub fn open(config: &LedgerConfig) -> Result<Ledger, StoreError> {
        let store = Arc::new(Store::open(&config.dir, config.retention)?);
        let (queue, entries) = std::sync::mpsc::sync_channel(config.queue.max(1));
        let written = Counter::default();
        let dropped: Family<DropLabels, Counter> = Family::default();
        // Every reason at 0 from the start: a family with no series is not exported, and an
        // alert on it would have nothing to watch.
        for reason in ["full", "error", "stopped"] {
            count(&dropped, reason, 0);
        }
        let writer = Writer {
            store: store.clone(),
            entries,
            written: written.clone(),
            dropped: dropped.clone(),
        };
        std::thread::Builder::new()
            .name("kubeplug-ledger".into())
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Dir {
                path: config.dir.clone(),
                source,
            })?;
        Ok(Ledger {
            inner: Arc::new(Inner {
                queue,
                store,
                written,
                dropped,
            }),
        })
    }

    /// Queues `entry` for the writer, without waiting: a full queue drops it (counted).
    pub fn offer(&self, entry: Entry) {
        match self.inner.queue.try_send(entry.bounded()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => count(&self.inner.dropped, "full", 1),
            Err(TrySendError::Disconnected(_)) => count(&self.inner.dropped, "stopped", 1),
        }
    }

    /// An object's recent history (reads a committed snapshot: blocking file I/O, so call it
    /// off the async runtime's threads).
    pub fn history(&self, query: &Query) -> Result<Vec<Entry>, StoreError> {
        self.inner.store.history(query)
    }

    /// `kubeplug_ledger_entries_written_total` and `kubeplug_ledger_entries_dropped_total`.
    pub fn register_metrics(&self, registry: &crate::metrics::MetricsRegistry) {
        let (written, dropped) = (self.inner.written.clone(), self.inner.dropped.clone());
        registry.register(|r| {
            r.register(
                "kubeplug_ledger_entries_written",
                "Reconciles recorded in the decision ledger",
                written,
            );
            r.register(
                "kubeplug_ledger_entries_dropped",
                "Reconciles not recorded in the decision ledger, by reason (full: the writer fell behind; error: the disk write failed; stopped)",
                dropped,
            );
        });
    }
}

fn count(dropped: &Family<DropLabels, Counter>, reason: &str, n: u64) {
    dropped
        .get_or_create(&DropLabels {
            reason: reason.to_string(),
        })
        .inc_by(n);
}

/// The most entries written in one transaction.
const BATCH: usize = 2048;

/// How long the writer gathers entries after the first of a batch: a commit rewrites the
/// pages it touches in four tables and syncs the file, so a commit per few entries (what
/// draining the queue as entries trickle in gave) cost more than the entries; at most ten
/// commits a second, and `why` sees a reconcile a tenth of a second later.
const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// The writer thread: waits for an entry, sleeps [`LINGER`], writes the batch of what came
/// meanwhile.
struct Writer {
    store: Arc<Store>,
    entries: Receiver<Entry>,
    written: Counter,
    dropped: Family<DropLabels, Counter>,
}

impl Writer {
    fn run(self) {
        let mut failing = false;
        let mut behind = false;
        while let Ok(first) = self.entries.recv() {
            // Sleeping, not waiting on the queue: a receiver blocked in `recv` is woken by
            // every entry offered (a futex wake in the worker, a context switch here), which
            // the e2e bench's profile showed as the writer's main cost.
            // A full batch means more are waiting: no sleep until the queue is drained.
            if !behind {
                std::thread::sleep(LINGER);
            }
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match self.entries.try_recv() {
                    Ok(entry) => batch.push(entry),
                    Err(_) => break,
                }
            }
            behind = batch.len() == BATCH;
            match self.store.append(&batch) {
                Ok(()) => {
                    if failing {
                        tracing::info!("the decision ledger is written again");
                        failing = false;
                    }
                    self.written.inc_by(batch.len() as u64);
                }
                Err(err) => {
                    // Said once per failing spell, counted always.
                    if !failing {
                        tracing::warn!(
                            dropped = batch.len(),
                            "the decision ledger cannot be written, dropping its entries: {err}"
                        );
                        failing = true;
                    }
                    count(&self.dropped, "error", batch.len() as u64);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            resource_version: None,
            error: Some("x".repeat(5000)),
            ..Entry::sample("demo", name, "p", jiff::Timestamp::now())
        }
    }

    fn wait_for(mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never happened");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn offered_entries_are_written_bounded_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&LedgerConfig::in_dir(dir.path().into())).unwrap();
        ledger.offer(entry("web"));
        let query = Query {
            object: "deployment/demo/web".into(),
            limit: 10,
            ..Query::default()
        };
        wait_for(|| !ledger.history(&query).unwrap().is_empty());
        let got = ledger.history(&query).unwrap();
        assert!(got[0].error.as_ref().unwrap().len() <= entry::MAX_DETAIL_BYTES + 3);
        assert_eq!(ledger.inner.written.get(), 1);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&LedgerConfig {
            queue: 1,
            ..LedgerConfig::in_dir(dir.path().into())
        })
        .unwrap();
        for i in 0..2000 {
            ledger.offer(entry(&format!("d{i}")));
        }
        let full = ledger
            .inner
            .dropped
            .get_or_create(&DropLabels {
                reason: "full".into(),
            })
            .get();
        assert!(full > 0, "a queue of one took 2000 entries at once");
        wait_for(|| ledger.inner.written.get() + full == 2000);
    }
}
