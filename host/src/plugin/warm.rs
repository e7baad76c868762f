//! A warm sandbox: one store with the plugin instantiated in it, serving call after call. The
//! controller does not use it (state could leak from one key to the next); it exists so that
//! the cost of a fresh sandbox per call is
//! measured against it in the same benchmark run, and for trusted single-tenant setups.

use super::call::{self, CallClock, CallScope, Reconcile};
use super::error::CallError;
use super::limits::Limits;
use super::loaded::{CallContext, CallReport, Plugin};
use super::sandbox::{CallIdentity, SandboxState};
use super::wit::ContractExports;
use crate::contract::ReconcileRequest;
use std::sync::Arc;
use std::time::Instant;
use wasmtime::Store;

/// A sandbox reused across calls; once a call fails with a trap it refuses further calls.
pub struct WarmSandbox {
    store: Store<SandboxState>,
    exports: ContractExports,
    limits: Limits,
    name: Arc<str>,
    poisoned: bool,
}

impl Plugin {
    /// Instantiates the plugin once, for repeated calls with the same limits and objects.
    pub async fn warm(&self, ctx: &CallContext) -> Result<WarmSandbox, CallError> {
        let limits = ctx.limits;
        let name = self.log_name(ctx);
        // Instantiation runs guest code: it gets a call's time of its own.
        let mut store = call::new_store(
            &self.engine,
            &CallClock::start(limits.timeout),
            &limits,
            ctx.objects.clone(),
            CallIdentity {
                plugin: name.clone(),
                key: "".into(),
                log_rate: self.log_rate.clone(),
                cpu: None,
            },
        );
        let exports = self
            .pre
            .instantiate(&mut store)
            .await
            .map_err(|e| CallError::Instantiate { source: e.into() })?;
        Ok(WarmSandbox {
            store,
            exports,
            limits,
            name,
            poisoned: false,
        })
    }
}

impl WarmSandbox {
    /// Reconciles one key in this sandbox; the deadline is reset before every call.
    pub async fn reconcile(&mut self, request: &ReconcileRequest) -> CallReport {
        let started = Instant::now();
        if self.poisoned {
            return CallReport {
                outcome: Err(CallError::Instantiate {
                    source: wasmtime::format_err!(
                        "sandbox trapped earlier and cannot be entered again"
                    )
                    .into(),
                }),
                logs: Vec::new(),
                dropped_logs: 0,
                elapsed: started.elapsed(),
            };
        }
        let key = request.target.key();
        let clock = CallClock::start(self.limits.timeout);
        self.store
            .data_mut()
            .start_call(key.as_str().into(), &self.limits);
        clock.arm(&mut self.store);
        let export = Reconcile {
            request,
            output: self.limits.output,
        };
        let scope = CallScope {
            limits: &self.limits,
            clock,
            plugin: &self.name,
        };
        let settled = call::run(&mut self.store, &self.exports, export, scope).await;
        if settled.outcome.is_err() {
            self.poisoned = true;
        }
        CallReport {
            outcome: settled.outcome.and_then(|answer| answer),
            logs: settled.logs,
            dropped_logs: settled.dropped,
            elapsed: clock.started.elapsed(),
        }
    }
}
