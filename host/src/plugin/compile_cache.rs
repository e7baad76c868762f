//! Precompiled components on disk, so a plugin compiles once per file and engine.
//!
//! Entries are keyed by the SHA-256 of the `.wasm` file **and** the engine's compatibility
//! hash (wasmtime version, compiler settings, enabled features): a changed wasmtime or
//! configuration never loads a stale artifact. Entries are written to a temporary file and
//! renamed into place, so a reader never sees half an artifact. The directory must be
//! writable only by the host's user: loading a precompiled artifact trusts its contents.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Whether a load came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded a precompiled artifact (no compilation).
    Hit,
    /// Compiled, and stored for next time.
    Miss,
    /// Compiled; no cache configured or the cache could not be written.
    Uncached,
    /// Shares the compiled code of a plugin already loaded from the same bytes.
    Shared,
}

/// A directory of precompiled components for one engine configuration.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

/// `$KUBEPLUG_CACHE_DIR`, else `$XDG_CACHE_HOME/kubeplug`, else `$HOME/.cache/kubeplug`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("KUBEPLUG_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("kubeplug")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/kubeplug")))
}

impl CompileCache {
    /// A cache in `dir` for components compiled by `engine`.
    pub fn new(dir: impl Into<PathBuf>, engine: &Engine) -> Self {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        CompileCache {
            dir: dir.into(),
            engine_key: format!("{:016x}", h.finish()),
        }
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// Loads the precompiled component for `digest`, or compiles `wasm` and stores it.
    /// A cache that cannot be read or written only costs a compilation (and a warning).
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let entry = self.entry(digest);
        if let Ok(bytes) = std::fs::read(&entry) {
            // Read into memory rather than mmap: a file truncated or rewritten in place by
            // someone else must not be able to crash the host (SIGBUS on a mapped page).
            // SAFETY: entries are written only by `store` below, from `Component::serialize`
            // of this engine configuration (the file name carries its compatibility hash),
            // atomically by rename; wasmtime still checks the header and version.
            match unsafe { Component::deserialize(engine, &bytes) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(err) => {
                    tracing::warn!(path = %entry.display(), "ignoring unusable precompiled plugin: {err:#}")
                }
            }
        }
        let component = Component::new(engine, wasm)?;
        let outcome = match self.store(&entry, &component) {
            Ok(()) => CacheOutcome::Miss,
            Err(err) => {
                tracing::warn!(path = %entry.display(), "cannot write precompiled plugin: {err:#}");
                CacheOutcome::Uncached
            }
        };
        Ok((component, outcome))
    }

    fn store(&self, entry: &Path, component: &Component) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let bytes = component.serialize()?;
        // Unique per write: two processes, or two threads of one compiling the same module,
        // never write the same temporary file.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = entry.with_extension(format!("tmp{}-{n}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, entry)?;
        Ok(())
    }
}
