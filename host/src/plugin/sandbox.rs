//! The state of one sandboxed call: WASI with nothing granted, a memory limiter, captured
//! output, the call's deadline and read budget, and its plugin log lines (bounded by
//! [`LogGate`]). The host imports themselves are in `imports.rs`.

use super::cpu_share::{CallCpu, CpuAccount};
use super::limits::Limits;
use super::log_gate::{LogGate, LogRate, cap_line};
use super::output::CapturedOutput;
use crate::contract::LogLevel;
use crate::contract::ObjectSource;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    /// The plugin's standard output.
    Stdout,
    /// The plugin's standard error.
    Stderr,
}

/// A log line a plugin wrote during a call (not a `log` action, which is part of the result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginLog {
    /// Where the line came from.
    pub source: LogSource,
    /// Its level (stdout is info, stderr warn).
    pub level: LogLevel,
    /// The line, capped (escaped when written to the host log).
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
    pub(super) objects: Arc<dyn ObjectSource>,
    logs: Vec<PluginLog>,
    gate: LogGate,
    plugin: Arc<str>,
    key: Arc<str>,
    /// When the call must be over: imports refuse to start after it, and reads in progress
    /// are abandoned at it.
    pub(super) deadline: Instant,
    /// Bytes the `get`/`list` imports may still return in this call.
    pub(super) read_room: usize,
    /// The call's CPU accounting against its tenant's share, if shared.
    pub(super) cpu: Option<CallCpu>,
}

/// Who is calling, for the store: the plugin's name and log rate, the key.
#[derive(Clone)]
pub(crate) struct CallIdentity {
    pub(crate) plugin: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) log_rate: Arc<LogRate>,
    /// Whose share of the cores the call's guest code spends, if shared.
    pub(crate) cpu: Option<CpuAccount>,
}

impl SandboxState {
    pub(crate) fn new(limits: &Limits, objects: Arc<dyn ObjectSource>, who: CallIdentity) -> Self {
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
            gate: LogGate::new(who.log_rate, limits.log_bytes),
            plugin: who.plugin,
            key: who.key,
            // Passed until a call's clock is armed (`CallClock::arm`): nothing runs before.
            deadline: Instant::now(),
            read_room: limits.read_bytes,
            cpu: who.cpu.map(|account| account.begin()),
        }
    }

    /// Attributes further log lines to another key and starts a new call's budgets (for
    /// warm sandboxes, which serve several calls); the call's clock is armed apart.
    pub(crate) fn start_call(&mut self, key: Arc<str>, limits: &Limits) {
        self.key = key;
        self.read_room = limits.read_bytes;
        self.gate.reset(limits.log_bytes);
    }

    /// Keeps and writes one plugin log line when the call's room and the plugin's log rate
    /// allow it: capped at [`MAX_LOG_LINE_BYTES`](super::log_gate::MAX_LOG_LINE_BYTES), and
    /// escaped when written to the host log.
    pub(super) fn record_log(&mut self, source: LogSource, level: LogLevel, message: &str) {
        if !self.gate.admit(source, message.len()) {
            return;
        }
        let message = cap_line(message);
        crate::telemetry::plugin_log(&self.plugin, &self.key, level, &message);
        self.logs.push(PluginLog {
            source,
            level,
            message,
        });
    }

    /// Everything the plugin logged (import calls first, then stdout and stderr lines, each
    /// written to the host log as it passes the gate), the raw stderr (for panic messages)
    /// and how many lines were dropped.
    pub(crate) fn take_logs(&mut self) -> TakenLogs {
        let (stderr, stderr_cut) = self.stderr.take();
        let (stdout, stdout_cut) = self.stdout.take();
        for (source, text, cut) in [
            (LogSource::Stdout, &stdout, stdout_cut),
            (LogSource::Stderr, &stderr, stderr_cut),
        ] {
            let level = if source == LogSource::Stderr {
                LogLevel::Warn
            } else {
                LogLevel::Info
            };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                self.record_log(source, level, line);
            }
            if cut {
                self.logs.push(PluginLog {
                    source,
                    level: LogLevel::Warn,
                    message: "(output truncated)".into(),
                });
            }
        }
        let dropped = self.gate.dropped();
        if dropped > 0 {
            self.logs.push(PluginLog {
                source: LogSource::Import,
                level: LogLevel::Warn,
                message: format!(
                    "({dropped} log lines dropped: over the per-call log limit or the plugin's log rate)"
                ),
            });
        }
        TakenLogs {
            logs: std::mem::take(&mut self.logs),
            stderr,
            dropped,
            report: self.gate.report_dropped(),
        }
    }
}

/// What [`SandboxState::take_logs`] collected.
pub(crate) struct TakenLogs {
    pub(crate) logs: Vec<PluginLog>,
    pub(crate) stderr: String,
    pub(crate) dropped: u64,
    /// Lines dropped by this plugin's calls since its last host warning about drops, when
    /// one is due now ([`LogRate::report_dropped`]).
    pub(crate) report: Option<u64>,
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
