//! The wiring of the client-go controller architecture around plugins: shared watches feed
//! per-kind caches; the router turns changes into keys on each running plugin's workqueue;
//! workers call the plugin in a fresh sandbox (a task whose guest code yields at every epoch
//! tick) and execute its actions.
//! The controller orchestrates the set of running plugins (added, given new revisions and
//! removed while it runs); each running plugin's own lifecycle lives with it (`worker`).

mod config;
mod handover;
mod host;

pub use crate::actions::{DEFAULT_MAX_WRITES_IN_FLIGHT, MIN_REQUEUE_AFTER};
pub use crate::worker::{
    Drain, InstanceName, InvalidName, MAX_INSTANCE_NAME, PluginInstance, StartError,
};
pub use config::{ControllerConfig, DEFAULT_EXPECTATION_WAIT, DEFAULT_WORKERS};

pub use host::{Applied, Controller, DEFAULT_SHUTDOWN_TIMEOUT};
