//! The wiring of the client-go controller architecture around plugins: shared watches feed
//! per-kind caches; the router turns changes into keys on each plugin's workqueue; workers
//! call the plugin in a fresh sandbox off the async runtime and execute its actions.
//! Plugins can be added, swapped and removed while the controller runs.

mod config;
mod error;
mod handover;
mod host;
mod instance;

pub use crate::actions::MIN_REQUEUE_AFTER;
pub use config::{ControllerConfig, DEFAULT_WORKERS};
pub use error::ControllerError;
pub use host::{Applied, Controller, DEFAULT_SHUTDOWN_TIMEOUT, Drain};
pub use instance::{MAX_INSTANCE_NAME, PluginInstance, validate_instance_name};
