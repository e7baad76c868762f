//! The one wasmtime engine the host shares between all plugins, its epoch ticker, the linkers
//! of the contract versions it supports (`wit/`), and loading of plugin files.

use super::compile_cache::{CacheOutcome, CompileCache};
use super::contract_version;
use super::error::LoadError;
use super::limits::Limits;
use super::loaded::{CallContext, Plugin};
use super::log_gate::{LogRate, LogRateConfig};
use super::shared_code::{CodeShelf, SharedCode};
use super::wit::{ContractPre, Linkers};
use crate::contract::NoObjects;
use prometheus_client::metrics::counter::Counter;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::Component;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Bytes of a linear memory kept resident (reset in place) when its slot is reused.
const KEEP_RESIDENT: usize = 8 << 20;

/// The pool's memory slot: the most any checked limit grants ([`MAX_MEMORY_MIB`]), never a
/// configured cap that could differ from it (a limit the pool cannot honour is refused when
/// it is checked, not lowered when it is used).
///
/// [`MAX_MEMORY_MIB`]: super::MAX_MEMORY_MIB
const MAX_MEMORY_BYTES: usize = (super::limits::MAX_MEMORY_MIB as usize) << 20;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where precompiled components are kept; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// How often the epoch advances: the granularity of call deadlines.
    pub epoch_tick: Duration,
    /// Sandboxes that may exist at once across all plugins: the pooling allocator's slots
    /// (wasmtime counts them as component instances).
    pub max_sandboxes: u32,
    /// Each plugin's log rate (across its calls) into the host log.
    pub log_rate: LogRateConfig,
    /// The time limit of the metadata call that ends a load. Longer than a reconcile's
    /// default: a load runs once, off the reconcile path, and a large component (the
    /// Python port starts an interpreter) took over the 1 s call limit on a loaded machine,
    /// which failed its file until it changed (found by `kubeplug chaos`).
    pub metadata_timeout: Duration,
}

/// The default [`RuntimeConfig::metadata_timeout`].
pub const DEFAULT_METADATA_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: super::compile_cache::default_cache_dir(),
            epoch_tick: Duration::from_millis(1),
            max_sandboxes: 128,
            log_rate: LogRateConfig::default(),
            metadata_timeout: DEFAULT_METADATA_TIMEOUT,
        }
    }
}

/// Advances the engine's epoch on a timer thread, so deadlines trap running guests. The
/// thread holds only a weak reference: it lives exactly as long as the engine (every
/// [`Plugin`] keeps the engine alive), so a plugin that outlives its [`PluginRuntime`] still
/// has its CPU-bound calls trapped, and the thread exits once the engine is gone.
fn start_epoch_ticker(engine: &Engine, tick: Duration) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("kubeplug-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            }
        })?;
    Ok(())
}

/// Core module instances one sandbox may create. Runtime components need several
/// (image-pinner 4, its TypeScript port 5, its Python port 16: libc, CPython, its extension
/// modules, adapters); the limit keeps headroom for them.
pub const MAX_CORE_INSTANCES_PER_PLUGIN: u32 = 32;
/// Linear memories one sandbox may define.
pub const MAX_MEMORIES_PER_PLUGIN: u32 = 2;
/// Tables one sandbox may define.
pub const MAX_TABLES_PER_PLUGIN: u32 = 4;

/// The engine every plugin of a runtime shares: Cranelift, the component model, epoch
/// interruption and the pooling allocator sized by `config`. Each sandbox is held to
/// per-component limits and the pool's totals are `max_sandboxes` times those limits, so that
/// many sandboxes always fit: a plugin whose sandboxes create many core instances,
/// memories or tables cannot use up the slots other plugins' sandboxes need (a
/// component over a limit fails to instantiate, naming it).
pub(super) fn build_engine(config: &RuntimeConfig) -> Result<Engine, LoadError> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(config.max_sandboxes)
        .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_PLUGIN)
        .max_memories_per_component(MAX_MEMORIES_PER_PLUGIN)
        .max_tables_per_component(MAX_TABLES_PER_PLUGIN)
        .total_core_instances(config.max_sandboxes * MAX_CORE_INSTANCES_PER_PLUGIN)
        .total_memories(config.max_sandboxes * MAX_MEMORIES_PER_PLUGIN)
        .total_tables(config.max_sandboxes * MAX_TABLES_PER_PLUGIN)
        .total_stacks(config.max_sandboxes)
        .max_memory_size(MAX_MEMORY_BYTES)
        // A fresh sandbox per call must not pay a page fault for every page it touches:
        // keep slots' pages resident and reset only the dirty ones (PAGEMAP_SCAN on Linux
        // 6.7+, memset of the low addresses otherwise).
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(64 << 10)
        .async_stack_keep_resident(128 << 10);
    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(512 << 10)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&wasm).map_err(engine_error)
}

/// Loads plugins and owns what they share: the engine, the linkers and the compile cache.
pub struct PluginRuntime {
    engine: Engine,
    linkers: Linkers,
    cache: Option<CompileCache>,
    /// Compiled code of the plugins alive, shared by loads of the same bytes.
    shelf: CodeShelf,
    config: RuntimeConfig,
    /// Instantiations retried after a transient OS error, all plugins together.
    instantiate_retries: Counter,
}

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn engine_error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> LoadError {
    LoadError::Engine { source: e.into() }
}

impl PluginRuntime {
    /// Builds the engine (Cranelift, component model, epoch interruption, pooling
    /// allocator), the linkers and the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = build_engine(&config)?;
        let linkers = Linkers::new(&engine).map_err(engine_error)?;

        let cache = config
            .cache_dir
            .as_ref()
            .map(|d| CompileCache::new(d, &engine));
        start_epoch_ticker(&engine, config.epoch_tick).map_err(engine_error)?;
        Ok(PluginRuntime {
            engine,
            linkers,
            cache,
            shelf: CodeShelf::default(),
            config,
            instantiate_retries: Counter::default(),
        })
    }

    /// The settings this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Instantiations (at load or per call) retried because they failed for a transient OS
    /// reason, such as `EBUSY` sealing a memory image, since the runtime started.
    pub fn instantiate_retries(&self) -> u64 {
        self.instantiate_retries.get()
    }

    /// Registers the runtime's metrics: `kubeplug_plugin_instantiate_retries_total`.
    pub fn register_metrics(&self, registry: &crate::metrics::MetricsRegistry) {
        let retries = self.instantiate_retries.clone();
        registry.register(|r| {
            r.register(
                "kubeplug_plugin_instantiate_retries",
                "Plugin instantiations retried after a transient OS error (EBUSY, EAGAIN, EINTR, ENOMEM)",
                retries,
            )
        });
    }

    /// Reads, compiles (or loads precompiled), checks and describes a plugin file.
    pub async fn load_file(&self, path: &Path) -> Result<Arc<Plugin>, LoadError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        self.load_bytes(&path.display().to_string(), bytes).await
    }

    /// Like [`load_file`](Self::load_file), for bytes from elsewhere; `origin` names them in
    /// errors. Compilation runs on a blocking thread, off the async runtime.
    pub async fn load_bytes(&self, origin: &str, bytes: Vec<u8>) -> Result<Arc<Plugin>, LoadError> {
        self.load_bytes_in(origin, bytes, None).await
    }

    /// Like [`load_bytes`](Self::load_bytes), compiling the module's functions on `pool`
    /// (rayon's global pool when `None`): a compile on a pool of its own never waits behind
    /// another module's functions.
    pub async fn load_bytes_in(
        &self,
        origin: &str,
        bytes: Vec<u8>,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Result<Arc<Plugin>, LoadError> {
        let origin = origin.to_string();
        check_header(&origin, &bytes)?;
        let digest = hex::encode(Sha256::digest(&bytes));
        // Loads of the same bytes wait for each other here and share one compiled copy.
        let slot = self.shelf.slot(&digest);
        let mut shelved = slot.lock().await;
        let (code, cache_outcome) = match shelved.upgrade() {
            Some(code) => (code, CacheOutcome::Shared),
            None => {
                let (engine, cache, d) = (self.engine.clone(), self.cache.clone(), digest.clone());
                let compile = move || match cache {
                    Some(cache) => cache.load_or_compile(&engine, &d, &bytes),
                    None => Component::new(&engine, &bytes).map(|c| (c, CacheOutcome::Uncached)),
                };
                let compiled = tokio::task::spawn_blocking(move || match pool {
                    Some(pool) => pool.install(compile),
                    None => compile(),
                })
                .await
                .map_err(engine_error)?;
                let (component, outcome) = compiled.map_err(|e| LoadError::Compile {
                    origin: origin.clone(),
                    source: e.into(),
                })?;
                let code = Arc::new(SharedCode(component));
                *shelved = Arc::downgrade(&code);
                (code, outcome)
            }
        };
        drop(shelved);
        let component = &code.0;
        let contract = contract_version::check(&self.engine, component, &origin)?;
        let link_error = |e: wasmtime::Error| LoadError::Link {
            origin: origin.clone(),
            source: e.into(),
        };
        let pre = ContractPre::new(&self.linkers, component, contract).map_err(link_error)?;
        let metadata_limits = Limits {
            timeout: self.config.metadata_timeout,
            ..Limits::default()
        };
        let ctx = CallContext::new(metadata_limits, Arc::new(NoObjects));
        let log_rate = Arc::new(LogRate::new(self.config.log_rate));
        let metadata = Plugin::call_metadata(
            &self.engine,
            &pre,
            &ctx,
            log_rate.clone(),
            &origin,
            &self.instantiate_retries,
        )
        .await?;
        tracing::debug!(declared = %metadata.name, %origin, ?cache_outcome, contract = contract.as_str(), "plugin loaded");
        Ok(Arc::new(Plugin {
            engine: self.engine.clone(),
            _code: code.clone(),
            pre,
            name: metadata.name.as_str().into(),
            metadata,
            digest,
            cache_outcome,
            log_rate,
            retries: self.instantiate_retries.clone(),
        }))
    }
}

/// Rejects what is not a component before the compiler sees it, with a clear reason.
fn check_header(origin: &str, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            origin: origin.to_string(),
        });
    }
    // Core modules have version 1 (`01 00 00 00`); components use layer 1 (`.. .. 01 00`).
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::NotAComponent {
            origin: origin.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_tell_files_modules_and_components_apart() {
        assert!(matches!(
            check_header("f", b"hello world"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(
            check_header("f", b"\0asm\x01\0\0\0"),
            Err(LoadError::NotAComponent { .. })
        ));
        assert!(check_header("f", b"\0asm\x0d\0\x01\0").is_ok());
    }

    /// A component that instantiates an empty core module `n` times.
    fn component_with_core_instances(n: u8) -> Vec<u8> {
        assert!(n < 42, "one-byte LEB128 sizes below");
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        // Core module section: one empty module.
        bytes.extend([1, 8]);
        bytes.extend(b"\0asm\x01\0\0\0");
        // Core instance section: n times `instantiate module 0` without arguments.
        bytes.extend([2, 1 + 3 * n, n]);
        for _ in 0..n {
            bytes.extend([0, 0, 0]);
        }
        bytes
    }

    #[test]
    fn a_plugin_over_the_core_instance_limit_cannot_take_the_pool_from_the_others() {
        let config = RuntimeConfig {
            cache_dir: None,
            max_sandboxes: 4,
            ..RuntimeConfig::default()
        };
        let engine = build_engine(&config).unwrap();
        let component =
            |n: u8| wasmtime::component::Component::new(&engine, component_with_core_instances(n));
        // Over the per-plugin limit: refused when it is compiled (so at load), naming it.
        let err = component(MAX_CORE_INSTANCES_PER_PLUGIN as u8 + 1).expect_err("refused");
        assert!(
            err.to_string()
                .contains("exceeds the configured maximum of 32"),
            "{err}"
        );
        // At the limit, as many sandboxes as the pool has slots fit at once: none of them
        // can take the core instance slots another needs.
        let largest = component(MAX_CORE_INSTANCES_PER_PLUGIN as u8).unwrap();
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut stores: Vec<_> = (0..config.max_sandboxes)
            .map(|_| wasmtime::Store::new(&engine, ()))
            .collect();
        for store in &mut stores {
            linker.instantiate(store, &largest).unwrap();
        }
    }
}
