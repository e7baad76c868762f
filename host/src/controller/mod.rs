//! The wiring of the client-go controller architecture around plugins: shared watches feed
//! per-kind caches; the router turns changes into keys on each plugin's workqueue; workers
//! call the plugin in a fresh sandbox off the async runtime and execute its actions.
//! Plugins can be added, swapped and removed while the controller runs.

mod cache_objects;
mod config;
mod error;
mod expectations;
mod host;
mod instance;
mod router;
mod unit;
mod units;
mod version;
mod watches;

pub use cache_objects::CacheObjects;
pub use config::{ControllerConfig, DEFAULT_WORKERS};
pub use error::ControllerError;
pub use host::{Applied, Controller, DEFAULT_SHUTDOWN_TIMEOUT, Drain};
pub use instance::{MAX_INSTANCE_NAME, PluginInstance, validate_instance_name};
pub use unit::MIN_REQUEUE_AFTER;
