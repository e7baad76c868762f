//! Compiles of Plugin modules, off the pass and shared fairly between namespaces. A pass
//! that finds a module not compiled yet queues it here and goes on (the Plugin shows
//! `Compiling`); the compile runs in a background task and wakes a pass when it ends.
//!
//! Each namespace has its own queue, and the namespaces with work are served round-robin,
//! one compile of a namespace at a time, at most [`MAX_CONCURRENT_COMPILES`] host-wide: a
//! tenant with three 12 MiB TypeScript modules compiles them one after another on its own
//! turn while another tenant's small module compiles beside them, and waits for at most one
//! compile of each other namespace ahead of it, never for a whole queue. How many compiles a
//! namespace may start at all stays the business of its
//! [`CompileBudget`](super::module::CompileBudget), taken before a module is queued, which
//! also bounds what the queues hold (each job holds its module's bytes).

use crate::plugin::{LoadError, Plugin, PluginRuntime};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The most compiles at once, host-wide. wasmtime compiles one module's functions on every
/// core already (parallel compilation), so a second compile adds no throughput on a small
/// machine: it is there so that one namespace's big module never makes another namespace's
/// compile wait for it. More would only multiply the compilers' memory. Each compile slot
/// has its own thread pool (see [`Compiles::new`]).
pub const MAX_CONCURRENT_COMPILES: usize = 2;

/// One module to compile.
struct Job {
    namespace: String,
    digest: String,
    origin: String,
    bytes: Vec<u8>,
}

/// Where a module is on its way to being compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    /// Waiting in its namespace's queue, with this many of the namespace's own before it.
    Queued {
        /// Compiles of the same namespace queued before it.
        ahead: usize,
    },
    /// Compiling now.
    Compiling,
}

#[derive(Default)]
struct Queues {
    /// Queued compiles by namespace, oldest first.
    queued: HashMap<String, VecDeque<Job>>,
    /// The namespaces with queued compiles, in the order they are served next.
    turns: VecDeque<String>,
    /// The namespaces compiling now (one compile each).
    compiling: HashSet<String>,
    /// The digests compiling now.
    digests: HashSet<String>,
    /// Finished compiles not yet taken by a pass.
    done: HashMap<String, Result<Arc<Plugin>, LoadError>>,
}

impl Queues {
    /// The next job to start: the first namespace in turn that is not compiling already.
    fn next(&mut self) -> Option<Job> {
        let at = self
            .turns
            .iter()
            .position(|ns| !self.compiling.contains(ns))?;
        let ns = self.turns.remove(at)?;
        let queue = self.queued.get_mut(&ns)?;
        let job = queue.pop_front()?;
        match queue.is_empty() {
            true => {
                self.queued.remove(&ns);
            }
            // Its next compile waits until every other namespace waiting had a turn.
            false => self.turns.push_back(ns.clone()),
        }
        self.compiling.insert(ns);
        self.digests.insert(job.digest.clone());
        Some(job)
    }

    fn knows(&self, digest: &str) -> bool {
        self.digests.contains(digest)
            || self.done.contains_key(digest)
            || self
                .queued
                .values()
                .any(|q| q.iter().any(|j| j.digest == digest))
    }
}

/// The compile queues of one object source; compiles run in tasks of their own.
pub(super) struct Compiles {
    runtime: Arc<PluginRuntime>,
    wake: Arc<Notify>,
    limit: usize,
    queues: Mutex<Queues>,
    pools: Pools,
}

/// The thread pools of the compile slots not compiling now. A compile on rayon's global pool
/// queues its functions behind those of a compile already running there (a small module
/// waited 45.7 s behind a 12 MiB one); on a pool of its own it shares the cores with it
/// through the OS scheduler instead.
struct Pools(Mutex<Vec<Arc<rayon::ThreadPool>>>);

impl Compiles {
    /// Compiles with `runtime`, at most `limit` at once, each on a thread pool of its own
    /// (as many threads as cores; on rayon's global pool when a pool cannot be started),
    /// notifying `wake` as each ends.
    pub(super) fn new(runtime: Arc<PluginRuntime>, wake: Arc<Notify>, limit: usize) -> Arc<Self> {
        let limit = limit.max(1);
        let pools = (0..limit)
            .filter_map(|slot| {
                rayon::ThreadPoolBuilder::new()
                    .thread_name(move |i| format!("kubeplug-compile-{slot}-{i}"))
                    .build()
                    .inspect_err(|e| {
                        tracing::warn!(slot, "no thread pool of its own for a compile slot: {e}")
                    })
                    .ok()
                    .map(Arc::new)
            })
            .collect();
        Arc::new(Compiles {
            runtime,
            wake,
            limit,
            queues: Mutex::default(),
            pools: Pools(Mutex::new(pools)),
        })
    }

    fn take_pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        self.pools.0.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn give_back(&self, pool: Option<Arc<rayon::ThreadPool>>) {
        if let Some(pool) = pool {
            self.pools
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(pool);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `digest` is queued, compiling, or compiled and not yet taken.
    pub(super) fn knows(&self, digest: &str) -> bool {
        self.lock().knows(digest)
    }

    /// Queues the module `digest` (its `bytes`, named `origin` in errors) in `namespace`'s
    /// queue, unless it is queued, compiling or compiled already, and starts what may start.
    pub(super) fn submit(
        self: &Arc<Self>,
        namespace: &str,
        digest: &str,
        origin: String,
        bytes: Vec<u8>,
    ) {
        {
            let mut q = self.lock();
            if q.knows(digest) {
                return;
            }
            let queue = q.queued.entry(namespace.to_string()).or_default();
            queue.push_back(Job {
                namespace: namespace.to_string(),
                digest: digest.to_string(),
                origin,
                bytes,
            });
            if queue.len() == 1 {
                q.turns.push_back(namespace.to_string());
            }
        }
        self.dispatch();
    }

    /// Where `digest` is: queued (and behind how many of its namespace), compiling, or
    /// `None` (unknown, or finished: see [`take_done`](Self::take_done)).
    pub(super) fn progress(&self, digest: &str) -> Option<Progress> {
        let q = self.lock();
        if q.digests.contains(digest) {
            return Some(Progress::Compiling);
        }
        q.queued.values().find_map(|queue| {
            queue
                .iter()
                .position(|j| j.digest == digest)
                .map(|ahead| Progress::Queued { ahead })
        })
    }

    /// The compiles finished since the last call, by digest.
    pub(super) fn take_done(&self) -> Vec<(String, Result<Arc<Plugin>, LoadError>)> {
        self.lock().done.drain().collect()
    }

    /// Forgets queued compiles whose digest `keep` rejects (their Plugins went or changed);
    /// compiles already running finish.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut q = self.lock();
        for queue in q.queued.values_mut() {
            queue.retain(|j| keep(&j.digest));
        }
        q.queued.retain(|_, queue| !queue.is_empty());
        let Queues { turns, queued, .. } = &mut *q;
        turns.retain(|ns| queued.contains_key(ns));
    }

    /// Starts queued compiles while there is room.
    fn dispatch(self: &Arc<Self>) {
        loop {
            let job = {
                let mut q = self.lock();
                if q.digests.len() >= self.limit {
                    return;
                }
                match q.next() {
                    Some(job) => job,
                    None => return,
                }
            };
            let me = self.clone();
            tokio::spawn(async move {
                let Job {
                    namespace,
                    digest,
                    origin,
                    bytes,
                } = job;
                let started = std::time::Instant::now();
                tracing::debug!(namespace = %namespace, digest = %digest, "compiling a Plugin module");
                // In a task of its own, so that even a panic in the compiler ends the
                // compile (as a failure) and frees the namespace's turn.
                let runtime = me.runtime.clone();
                let pool = me.take_pool();
                let on = pool.clone();
                let loaded =
                    match tokio::spawn(
                        async move { runtime.load_bytes_in(&origin, bytes, on).await },
                    )
                    .await
                    {
                        Ok(loaded) => loaded,
                        Err(e) => Err(LoadError::Engine { source: e.into() }),
                    };
                me.give_back(pool);
                tracing::info!(
                    namespace = %namespace,
                    digest = %digest,
                    ok = loaded.is_ok(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "Plugin module compiled"
                );
                {
                    let mut q = me.lock();
                    q.compiling.remove(&namespace);
                    q.digests.remove(&digest);
                    q.done.insert(digest, loaded);
                }
                me.wake.notify_one();
                me.dispatch();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(ns: &str, digest: &str) -> Job {
        Job {
            namespace: ns.into(),
            digest: digest.into(),
            origin: String::new(),
            bytes: Vec::new(),
        }
    }

    fn queue(q: &mut Queues, ns: &str, digest: &str) {
        let queue = q.queued.entry(ns.into()).or_default();
        queue.push_back(job(ns, digest));
        if queue.len() == 1 {
            q.turns.push_back(ns.into());
        }
    }

    fn finish(q: &mut Queues, ns: &str, digest: &str) {
        q.compiling.remove(ns);
        q.digests.remove(digest);
    }

    #[test]
    fn namespaces_take_turns_one_compile_each() {
        let mut q = Queues::default();
        for d in ["a1", "a2", "a3"] {
            queue(&mut q, "a", d);
        }
        queue(&mut q, "b", "b1");
        // a's first, then b's beside it: a's second waits for a's first to end.
        assert_eq!(q.next().map(|j| j.digest), Some("a1".into()));
        assert_eq!(q.next().map(|j| j.digest), Some("b1".into()));
        assert!(
            q.next().is_none(),
            "a second compile of one namespace started"
        );
        // c arrives while a waits for its next turn: a's turn came first.
        queue(&mut q, "c", "c1");
        finish(&mut q, "a", "a1");
        assert_eq!(q.next().map(|j| j.digest), Some("a2".into()));
        // With a compiling, its third waits; c goes before it, however long a's queue.
        finish(&mut q, "b", "b1");
        assert_eq!(q.next().map(|j| j.digest), Some("c1".into()));
        assert!(q.next().is_none());
        finish(&mut q, "a", "a2");
        assert_eq!(q.next().map(|j| j.digest), Some("a3".into()));
        assert!(q.turns.is_empty() && q.queued.is_empty());
    }

    #[test]
    fn a_known_digest_is_not_queued_twice() {
        let mut q = Queues::default();
        queue(&mut q, "a", "d");
        assert!(q.knows("d"));
        q.next();
        assert!(q.knows("d"), "compiling");
        assert!(!q.knows("e"));
    }
}
