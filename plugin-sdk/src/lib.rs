//! # kubeplug-sdk: write kubeplug reconcile plugins in Rust
//!
//! A plugin is a type that implements [`Reconciler`], exported with [`export!`] and built
//! with `cargo build --target wasm32-wasip2` into one `.wasm` component. The host hands it
//! one [`Request`] per dequeued key and executes the [`Action`]s it returns, after checking
//! them against the operator's policy.
//!
//! ```no_run
//! use k8s_openapi::api::apps::v1::Deployment;
//! use kubeplug_sdk::{Action, Error, Metadata, Reconciler, Request};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize)]
//! #[serde(default)]
//! struct Config {
//!     replicas: i32,
//! }
//!
//! impl Default for Config {
//!     fn default() -> Self {
//!         Config { replicas: 2 }
//!     }
//! }
//!
//! struct MinReplicas;
//!
//! impl Reconciler for MinReplicas {
//!     fn metadata() -> Metadata {
//!         Metadata::new("min-replicas", "0.1.0")
//!     }
//!
//!     fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
//!         let config: Config = req.config()?;
//!         let Some(deploy) = req.object::<Deployment>()? else {
//!             return Ok(vec![]);
//!         };
//!         let replicas = deploy.spec.and_then(|s| s.replicas).unwrap_or(1);
//!         if replicas >= config.replicas {
//!             return Ok(vec![]);
//!         }
//!         Ok(vec![
//!             Action::merge_patch(&req.target, json!({"spec": {"replicas": config.replicas}})),
//!             Action::info(format!("scaled {} to {}", req.target.name, config.replicas)),
//!         ])
//!     }
//! }
//!
//! kubeplug_sdk::export!(MinReplicas);
//! # fn main() {}
//! ```
//!
//! Objects arrive as JSON: [`Request::object`] parses them into k8s-openapi types (or any
//! serde type, for custom kinds), [`Request::object_json`] gives the raw text.
//!
//! For controllers of custom resources that own children: [`CustomResource`] and
//! [`custom_kind!`] type a custom kind from a spec/status pair; [`owner`] builds owner
//! references and finds owned children in the host's cache; [`children::plan`] turns the
//! children a parent wants into creates, server-side applies and deletes (only of children
//! it controls); [`pool::plan`] does the same for interchangeable children with generated
//! names; [`status_patch`], [`conditions`] and [`finalizers`] cover status and cleanup.

mod action;
pub mod children;
pub mod conditions;
mod error;
pub mod finalizers;
pub mod host;
mod metadata;
pub mod owner;
pub mod pool;
mod request;
mod resource;
mod status;

/// Bindings generated from the contract in `wit/`. Most plugins need only the re-exports at
/// the crate root.
// Generated code: the WIT files document every item it declares.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit/v0.1.0",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_world",
        default_bindings_module: "kubeplug_sdk::bindings",
    });
}

pub use bindings::kubeplug::plugin::types::{
    Action, EventType, KindRef, LogLevel, ObjectRef, PatchType, PluginMetadata as Metadata, Reason,
    Request,
};
pub use error::Error;
pub use resource::{CustomKind, CustomResource};
pub use status::status_patch;

/// The contract version this SDK builds plugins for.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// A reconcile plugin: describe yourself, then turn one request into actions.
pub trait Reconciler {
    /// Name, version and the kinds this plugin reconciles and owns.
    fn metadata() -> Metadata;

    /// Reconciles one key. Return no actions when nothing needs to change, so that the
    /// plugin never loops on its own writes.
    fn reconcile(request: Request) -> Result<Vec<Action>, Error>;
}

/// Exports a [`Reconciler`] as the plugin's component interface: `kubeplug_sdk::export!(MyType);`
///
/// The exports exist only in wasm builds; a native build of the same crate (for unit tests
/// or a native baseline) links as an ordinary library.
#[macro_export]
macro_rules! export {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct KubeplugExport;

            impl $crate::bindings::exports::kubeplug::plugin::reconciler::Guest for KubeplugExport {
                fn metadata() -> $crate::Metadata {
                    <$ty as $crate::Reconciler>::metadata()
                }

                fn reconcile(
                    request: $crate::Request,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<$crate::Action>,
                    $crate::bindings::kubeplug::plugin::types::ReconcileError,
                > {
                    <$ty as $crate::Reconciler>::reconcile(request)
                        .map_err(::core::convert::Into::into)
                }
            }

    $crate::bindings::__export_plugin_world!(KubeplugExport with_types_in $crate::bindings);
        };
    };
}
