//! The contract versions this host supports, one module each, and the dispatch over them.
//!
//! A plugin is built against one published `wit/vX.Y.Z/` contract; the host reads which from
//! the component's exports (`contract_version::check`), refuses a version it does not
//! know with an error naming it, and keeps the matching variant of [`ContractPre`]. Everything
//! else in `plugin/` (the store, limits, deadlines, the shared call in `call.rs`, the import
//! bounds in `imports.rs`, the output bounds in `reply.rs`) works on the version-independent
//! types of `crate::contract` and never sees generated bindings.
//!
//! # Adding a contract version
//! Publish `wit/vX.Y.Z/` (and list its digest in `contract/frozen.rs` and the version in
//! `contract::SUPPORTED_VERSIONS`), then add **one file and one variant**:
//! 1. `wit/since_vX_Y_Z.rs`, which provides:
//!    - `bindgen!` of `../wit/vX.Y.Z` (world `plugin`, imports `async | trappable`, exports
//!      `async`) and `const VERSION: &str = "X.Y.Z"`;
//!    - `fn linker(&Engine) -> wasmtime::Result<Linker<SandboxState>>`: WASI p2 plus this
//!      version's host imports;
//!    - `fn pre(&Linker<SandboxState>, &Component) -> wasmtime::Result<PluginPre<SandboxState>>`;
//!    - `async fn reconcile(&Plugin, &mut Store<SandboxState>, &ReconcileRequest, OutputLimits)
//!      -> wasmtime::Result<Result<Vec<Action>, CallError>>`: converts the request, calls the
//!      export, and converts the answer, checking it with `reply::check_count`/`check_bytes`
//!      before parsing and `reply::check_actions` after;
//!    - `async fn metadata(&Plugin, &mut Store<SandboxState>) -> wasmtime::Result<PluginMetadata>`;
//!    - the `Host` traits of its imports on `SandboxState`, each converting its arguments and
//!      calling the shared `SandboxState::import_*` (which own the deadline, bounds and budget).
//! 2. A variant in [`ContractVersion`], [`ContractPre`] and [`ContractExports`]: the compiler
//!    then points at every `match` that must learn it (all in this file).

pub(crate) mod since_v0_1_0;

use super::error::CallError;
use super::sandbox::SandboxState;
use crate::contract::{Action, OutputLimits, PluginMetadata, ReconcileRequest};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

/// A contract version this host supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContractVersion {
    /// `wit/v0.1.0`.
    V0_1_0,
}

impl ContractVersion {
    /// Every supported version, newest first.
    pub(crate) const ALL: &'static [ContractVersion] = &[ContractVersion::V0_1_0];

    /// The version as a component names it (`X.Y.Z`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ContractVersion::V0_1_0 => since_v0_1_0::VERSION,
        }
    }

    /// The supported version named `version`, if any.
    pub(crate) fn find(version: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == version)
    }

    /// A linker with WASI and this version's host imports.
    fn linker(self, engine: &Engine) -> wasmtime::Result<Linker<SandboxState>> {
        match self {
            ContractVersion::V0_1_0 => since_v0_1_0::linker(engine),
        }
    }
}

/// One linker per supported version, built once per engine (versions never share a linker,
/// so two versions may name the same import without a clash).
pub(crate) struct Linkers(Vec<(ContractVersion, Linker<SandboxState>)>);

impl Linkers {
    /// Builds the linker of every supported version.
    pub(crate) fn new(engine: &Engine) -> wasmtime::Result<Self> {
        ContractVersion::ALL
            .iter()
            .map(|v| Ok((*v, v.linker(engine)?)))
            .collect::<wasmtime::Result<_>>()
            .map(Linkers)
    }

    fn get(&self, version: ContractVersion) -> &Linker<SandboxState> {
        self.0
            .iter()
            .find_map(|(v, l)| (*v == version).then_some(l))
            .expect("Linkers::new builds a linker for every supported version")
    }
}

/// A component linked against the imports of the version it was built for, ready to be
/// instantiated for each call.
pub(crate) enum ContractPre {
    /// Built for contract 0.1.0.
    V0_1_0(since_v0_1_0::PluginPre<SandboxState>),
}

impl ContractPre {
    /// Links `component` for `version` (what `contract_version::check` found):
    /// fails when it needs imports that version does not provide.
    pub(crate) fn new(
        linkers: &Linkers,
        component: &Component,
        version: ContractVersion,
    ) -> wasmtime::Result<Self> {
        let linker = linkers.get(version);
        Ok(match version {
            ContractVersion::V0_1_0 => ContractPre::V0_1_0(since_v0_1_0::pre(linker, component)?),
        })
    }

    /// The contract version this component was linked for.
    pub(crate) fn version(&self) -> ContractVersion {
        match self {
            ContractPre::V0_1_0(_) => ContractVersion::V0_1_0,
        }
    }

    /// The plugin instantiated in `store`, which becomes a fresh sandbox: its exports (this
    /// runs guest code: set limits and the deadline first).
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<SandboxState>,
    ) -> wasmtime::Result<ContractExports> {
        Ok(match self {
            ContractPre::V0_1_0(pre) => {
                ContractExports::V0_1_0(pre.instantiate_async(store).await?)
            }
        })
    }
}

/// The exports of a plugin instantiated in a sandbox's store, of whichever contract version it
/// was built for.
pub(crate) enum ContractExports {
    /// Built for contract 0.1.0.
    V0_1_0(since_v0_1_0::Plugin),
}

impl ContractExports {
    /// Calls the reconcile export: checked actions or the error the plugin reported; the outer
    /// error is a trap (classified by the caller).
    pub(crate) async fn reconcile(
        &self,
        store: &mut Store<SandboxState>,
        request: &ReconcileRequest,
        output: OutputLimits,
    ) -> wasmtime::Result<Result<Vec<Action>, CallError>> {
        match self {
            ContractExports::V0_1_0(p) => since_v0_1_0::reconcile(p, store, request, output).await,
        }
    }

    /// Calls the metadata export: what the plugin says about itself, not yet checked.
    pub(crate) async fn metadata(
        &self,
        store: &mut Store<SandboxState>,
    ) -> wasmtime::Result<PluginMetadata> {
        match self {
            ContractExports::V0_1_0(p) => since_v0_1_0::metadata(p, store).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::NoObjects;
    use crate::contract::SUPPORTED_VERSIONS;
    use crate::plugin::call::{self, Metadata};
    use crate::plugin::contract_version;
    use crate::plugin::engine::{RuntimeConfig, build_engine};
    use crate::plugin::error::LoadError;
    use crate::plugin::limits::Limits;
    use crate::plugin::log_gate::{LogRate, LogRateConfig};
    use crate::plugin::sandbox::CallIdentity;
    use crate::plugin::test_support::test_plugin;
    use std::sync::Arc;

    #[test]
    fn the_versions_dispatched_are_the_versions_the_contract_lists() {
        let names: Vec<&str> = ContractVersion::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, SUPPORTED_VERSIONS);
        for v in ContractVersion::ALL {
            assert_eq!(ContractVersion::find(v.as_str()), Some(*v));
        }
        assert_eq!(ContractVersion::find("9.9.0"), None);
        assert_eq!(ContractVersion::find("0.1"), None);
    }

    #[tokio::test]
    async fn the_variant_is_chosen_from_the_components_exports_and_reaches_them() {
        let engine = build_engine(&RuntimeConfig {
            max_sandboxes: 4,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let linkers = Linkers::new(&engine).unwrap();
        let component = Component::from_file(&engine, test_plugin("hostile")).unwrap();
        let version = contract_version::check(&engine, &component, "hostile.wasm").unwrap();
        assert_eq!(version, ContractVersion::V0_1_0);
        let pre = ContractPre::new(&linkers, &component, version).unwrap();
        assert_eq!(pre.version(), version);
        // The call goes through the variant to the component's own export.
        let limits = Limits::default();
        let who = CallIdentity {
            plugin: "hostile".into(),
            key: "metadata".into(),
            log_rate: Arc::new(LogRate::new(LogRateConfig::default())),
            cpu: None,
        };
        let clock = call::CallClock::start(limits.timeout);
        let objects = Arc::new(NoObjects);
        let retries = prometheus_client::metrics::counter::Counter::default();
        let settled = call::run_fresh(
            &engine, clock, &pre, &limits, objects, who, Metadata, &retries,
        )
        .await;
        assert_eq!(settled.outcome.unwrap().name, "hostile");
    }

    #[test]
    fn an_unsupported_version_is_refused_naming_it_and_the_supported_ones() {
        let engine = build_engine(&RuntimeConfig {
            max_sandboxes: 4,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let component = Component::from_file(&engine, test_plugin("future-contract")).unwrap();
        let err = contract_version::check(&engine, &component, "future.wasm").unwrap_err();
        let LoadError::ContractMismatch {
            found, supported, ..
        } = &err
        else {
            panic!("expected a contract mismatch, got {err:?}")
        };
        assert_eq!(found, "9.9.0");
        assert_eq!(supported, &SUPPORTED_VERSIONS.join(", "));
        let text = err.to_string();
        assert!(
            text.contains("future.wasm") && text.contains("9.9.0") && text.contains("0.1.0"),
            "{text}"
        );
    }
}
