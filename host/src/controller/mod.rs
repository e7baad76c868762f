//! The wiring of the client-go controller architecture around plugins: shared watches feed
//! per-kind caches; the router turns changes into keys on each plugin's workqueue; workers
//! call the plugin in a fresh sandbox off the async runtime and execute its actions.

mod cache_objects;
mod config;
mod expectations;
mod host;
mod instance;
mod router;
mod unit;

pub use cache_objects::CacheObjects;
pub use config::ControllerConfig;
pub use host::Controller;
pub use instance::PluginInstance;
