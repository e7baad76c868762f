//! Which contract version a component was built for, read from its exports.

use super::error::LoadError;
use super::wit::ContractVersion;
use crate::contract::PACKAGE;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The version of `kubeplug:plugin/reconciler@X` the component exports, checked against the
/// versions this host supports.
pub(crate) fn check(
    engine: &Engine,
    component: &Component,
    origin: &str,
) -> Result<ContractVersion, LoadError> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let prefix = format!("{PACKAGE}/reconciler@");
    let Some(found) = exports.iter().find_map(|e| e.strip_prefix(&prefix)) else {
        return Err(LoadError::NotAPlugin {
            origin: origin.to_string(),
            exports: if exports.is_empty() {
                "none".into()
            } else {
                exports.join(", ")
            },
        });
    };
    ContractVersion::find(found).ok_or_else(|| LoadError::ContractMismatch {
        origin: origin.to_string(),
        found: found.to_string(),
        supported: ContractVersion::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    })
}
