//! A configured plugin: one `.wasm` may run as several instances, each with its own name
//! (its queue, metrics label and field manager) and configuration.

use crate::plugin::Plugin;
use crate::policy::Policy;
use std::sync::Arc;

/// A plugin as the controller runs it.
#[derive(Debug, Clone)]
pub struct PluginInstance {
    /// Unique within the host; names the queue, the metrics label and the field manager.
    pub name: String,
    pub plugin: Arc<Plugin>,
    /// The operator's configuration, handed to every call as JSON text.
    pub config: Option<Arc<str>>,
    /// What the operator granted it; the default (no policy document) runs it in dry-run.
    pub policy: Arc<Policy>,
}

impl PluginInstance {
    /// The plugin under its own name, without configuration.
    pub fn new(plugin: Arc<Plugin>) -> Self {
        PluginInstance {
            name: plugin.name().to_string(),
            plugin,
            config: None,
            policy: Arc::default(),
        }
    }

    /// The same plugin under another name with a configuration.
    pub fn named(plugin: Arc<Plugin>, name: &str, config: Option<&str>) -> Self {
        PluginInstance {
            name: name.to_string(),
            plugin,
            config: config.map(Into::into),
            policy: Arc::default(),
        }
    }

    /// The same instance under `policy`; the policy's configuration, if it has one,
    /// replaces the instance's.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        if policy.config.is_some() {
            self.config = policy.config.clone();
        }
        self.policy = Arc::new(policy);
        self
    }
}
