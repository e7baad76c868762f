//! Host bindings of each contract version this host supports, generated from `wit/`.
//! Imports are trappable: an import called past the call's deadline fails the call.

/// Contract 0.1.0 (`wit/v0.1.0`).
pub(crate) mod v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}
