//! The state of one sandboxed call: WASI with nothing granted, a memory limiter, captured
//! output, and the host imports (log, get, list) scoped to what the caller allows.

use super::bindings::v0_1_0::kubeplug::plugin::{host, types};
use super::limits::Limits;
use super::objects::ObjectSource;
use super::output::CapturedOutput;
use crate::contract::{KindRef, LogLevel};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

/// Where a plugin's log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The `log` host import.
    Import,
    Stdout,
    Stderr,
}

/// A log line a plugin wrote during a call (not a `log` action, which is part of the result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginLog {
    pub source: LogSource,
    pub level: LogLevel,
    pub message: String,
}

/// Caps linear memory and records the first growth it refused, so that an allocation
/// failure is reported as out-of-memory whatever the guest does about it (Rust guests abort).
pub(crate) struct MemoryLimiter {
    cap: usize,
    pub(crate) refused: Option<usize>,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.refused.get_or_insert(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Clocks that never move: plugins get no time source beyond what the contract gives them,
/// which keeps reconciles deterministic and closes timing side channels.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// The store data of one call.
pub(crate) struct SandboxState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    stdout: CapturedOutput,
    stderr: CapturedOutput,
    objects: Arc<dyn ObjectSource>,
    logs: Vec<PluginLog>,
    log_room: usize,
    plugin: Arc<str>,
    key: Arc<str>,
}

impl SandboxState {
    pub(crate) fn new(
        limits: &Limits,
        objects: Arc<dyn ObjectSource>,
        plugin: Arc<str>,
        key: Arc<str>,
    ) -> Self {
        let stdout = CapturedOutput::new(limits.log_bytes);
        let stderr = CapturedOutput::new(limits.log_bytes);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .build();
        SandboxState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                cap: limits.memory_bytes,
                refused: None,
            },
            stdout,
            stderr,
            objects,
            logs: Vec::new(),
            log_room: limits.log_bytes,
            plugin,
            key,
        }
    }

    /// Attributes further log lines to another key (for instances that serve several).
    pub(crate) fn set_key(&mut self, key: Arc<str>) {
        self.key = key;
    }

    /// Everything the plugin logged: import calls first, then stdout and stderr lines.
    pub(crate) fn take_logs(&mut self) -> (Vec<PluginLog>, String) {
        let mut logs = std::mem::take(&mut self.logs);
        let (stderr, _) = self.stderr.take();
        for (source, (text, truncated)) in [
            (LogSource::Stdout, self.stdout.take()),
            (LogSource::Stderr, (stderr.clone(), false)),
        ] {
            let level = if source == LogSource::Stderr {
                LogLevel::Warn
            } else {
                LogLevel::Info
            };
            logs.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| PluginLog {
                        source,
                        level,
                        message: l.to_string(),
                    }),
            );
            if truncated {
                logs.push(PluginLog {
                    source,
                    level: LogLevel::Warn,
                    message: "(output truncated)".into(),
                });
            }
        }
        (logs, stderr)
    }
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

pub(crate) fn log_level(level: types::LogLevel) -> LogLevel {
    match level {
        types::LogLevel::Trace => LogLevel::Trace,
        types::LogLevel::Debug => LogLevel::Debug,
        types::LogLevel::Info => LogLevel::Info,
        types::LogLevel::Warn => LogLevel::Warn,
        types::LogLevel::Error => LogLevel::Error,
    }
}

fn kind_ref(k: &types::KindRef) -> KindRef {
    KindRef::new(&k.api_version, &k.kind)
}

impl types::Host for SandboxState {}

impl host::Host for SandboxState {
    async fn log(&mut self, level: types::LogLevel, message: String) {
        let level = log_level(level);
        let (plugin, key) = (&*self.plugin, &*self.key);
        crate::telemetry::plugin_log(plugin, key, level, &message);
        if message.len() > self.log_room {
            if self.log_room > 0 {
                self.logs.push(PluginLog {
                    source: LogSource::Import,
                    level: LogLevel::Warn,
                    message: "(further log lines dropped: log limit reached)".into(),
                });
            }
            self.log_room = 0;
            return;
        }
        self.log_room -= message.len();
        self.logs.push(PluginLog {
            source: LogSource::Import,
            level,
            message,
        });
    }

    async fn get_object(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, String> {
        let found = self
            .objects
            .get(&kind_ref(&kind), namespace.as_deref(), &name)?;
        Ok(found.map(|o| o.to_string()))
    }

    async fn list_objects(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, String> {
        let items = self.objects.list(
            &kind_ref(&kind),
            namespace.as_deref(),
            label_selector.as_deref(),
        )?;
        Ok(items.iter().map(|o| o.to_string()).collect())
    }
}
