//! File events of the watched directories, debounced into rescans. Tracks files still open
//! for writing (created or modified, not closed yet) so a rescan leaves a half-copied file
//! alone instead of reporting it broken.

use super::error::ReloadError;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::time::Instant;

/// The longest a burst of events can postpone a rescan.
const MAX_DEBOUNCE: Duration = Duration::from_secs(1);

/// Events of some directories (not recursive: a ConfigMap volume's swap shows up as
/// changes of its `..data` entry).
pub(crate) struct DirEvents {
    _watcher: notify::RecommendedWatcher,
    events: UnboundedReceiver<notify::Result<Event>>,
    /// Names of files being written, with the time of their last event.
    busy: HashMap<OsString, Instant>,
    debounce: Duration,
    settle: Duration,
}

/// One debounced batch: time to rescan, leaving alone the files still being written.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub busy: HashSet<OsString>,
}

impl DirEvents {
    /// Starts watching `dirs` (duplicates once).
    pub fn watch(
        dirs: &[&Path],
        debounce: Duration,
        settle: Duration,
    ) -> Result<Self, ReloadError> {
        let (tx, events) = unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })
        .map_err(|source| ReloadError::Watch {
            dir: dirs.first().map(|d| d.to_path_buf()).unwrap_or_default(),
            source,
        })?;
        let mut seen: Vec<&Path> = Vec::new();
        for dir in dirs {
            if seen.iter().any(|s| same_dir(s, dir)) {
                continue;
            }
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|source| ReloadError::Watch {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            seen.push(dir);
        }
        Ok(DirEvents {
            _watcher: watcher,
            events,
            busy: HashMap::new(),
            debounce,
            settle,
        })
    }

    /// Waits for events worth a rescan (or for a file being written to settle), then for
    /// the burst to go quiet. `None` once the watcher has stopped.
    pub async fn next(&mut self) -> Option<Batch> {
        loop {
            let settled = self.busy.values().min().map(|t| *t + self.settle);
            tokio::select! {
                event = self.events.recv() => {
                    if self.note(event?) {
                        break;
                    }
                }
                _ = sleep_until(settled), if settled.is_some() => break,
            }
        }
        let end = Instant::now() + MAX_DEBOUNCE;
        while let Ok(Some(event)) =
            tokio::time::timeout_at(end.min(Instant::now() + self.debounce), self.events.recv())
                .await
        {
            self.note(event);
        }
        let now = Instant::now();
        let settle = self.settle;
        self.busy
            .retain(|_, last| now.duration_since(*last) < settle);
        Some(Batch {
            busy: self.busy.keys().cloned().collect(),
        })
    }

    /// Records what `event` says about files being written; returns whether it may have
    /// changed what the directories hold (our own reads, seen as opens, do not).
    fn note(&mut self, event: notify::Result<Event>) -> bool {
        let event = match event {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!("file watch error, rescanning: {err}");
                return true;
            }
        };
        let names = event.paths.iter().filter_map(|p| p.file_name());
        match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
                for name in names {
                    self.busy.remove(name);
                }
                true
            }
            EventKind::Access(_) => false,
            EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                for path in &event.paths {
                    let regular = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file());
                    if let (true, Some(name)) = (regular, path.file_name()) {
                        self.busy.insert(name.to_owned(), Instant::now());
                    }
                }
                true
            }
            EventKind::Modify(ModifyKind::Name(_)) | EventKind::Remove(_) => {
                // A renamed-in file is complete (the write-to-temp-then-rename pattern).
                for name in names {
                    self.busy.remove(name);
                }
                true
            }
            _ => true,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::io::Write;

    const QUICK: Duration = Duration::from_millis(30);

    async fn batch(events: &mut DirEvents) -> Batch {
        tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("a batch within 5 s")
            .expect("watcher running")
    }

    #[tokio::test]
    async fn a_file_open_for_writing_is_busy_until_closed() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = DirEvents::watch(&[dir.path()], QUICK, Duration::from_secs(30)).unwrap();
        let mut file = std::fs::File::create(dir.path().join("p.wasm")).unwrap();
        file.write_all(b"\0asm").unwrap();
        file.flush().unwrap();
        let b = batch(&mut events).await;
        assert!(b.busy.contains(OsStr::new("p.wasm")), "{b:?}");
        drop(file);
        let b = batch(&mut events).await;
        assert!(b.busy.is_empty(), "closed: {b:?}");
    }

    #[tokio::test]
    async fn a_busy_file_settles_without_a_close() {
        let dir = tempfile::tempdir().unwrap();
        let settle = Duration::from_millis(200);
        let mut events = DirEvents::watch(&[dir.path()], QUICK, settle).unwrap();
        let file = std::fs::File::create(dir.path().join("p.wasm")).unwrap();
        let b = batch(&mut events).await;
        assert!(!b.busy.is_empty(), "{b:?}");
        // No further event: the settle timer alone brings the next batch.
        let b = batch(&mut events).await;
        assert!(b.busy.is_empty(), "settled: {b:?}");
        drop(file);
    }

    #[tokio::test]
    async fn a_burst_is_one_batch_and_reads_are_no_event() {
        let dir = tempfile::tempdir().unwrap();
        let mut events =
            DirEvents::watch(&[dir.path(), dir.path()], Duration::from_millis(100), QUICK).unwrap();
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}.tmp")), b"x").unwrap();
        }
        let b = batch(&mut events).await;
        assert!(b.busy.is_empty(), "all closed: {b:?}");
        for i in 0..20 {
            std::fs::read(dir.path().join(format!("f{i}.tmp"))).unwrap();
        }
        let quiet = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
        assert!(quiet.is_err(), "reading files is not a change");
    }
}
