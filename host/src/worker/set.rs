//! The set of running plugins, shared by the router, the resync timer and the controller:
//! readers take a snapshot, changes replace it whole.

use super::running::RunningPlugin;
use std::sync::{Arc, RwLock};

/// The running plugins; cloning shares the set.
#[derive(Clone, Default)]
pub(crate) struct RunningPlugins(Arc<RwLock<Arc<Vec<Arc<RunningPlugin>>>>>);

impl RunningPlugins {
    /// The plugins running now.
    pub fn snapshot(&self) -> Arc<Vec<Arc<RunningPlugin>>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The running plugin named `name`, if any.
    pub fn get(&self, name: &str) -> Option<Arc<RunningPlugin>> {
        self.snapshot()
            .iter()
            .find(|p| p.name.as_str() == name)
            .cloned()
    }

    /// Adds a running plugin (the caller ensures its name is free).
    pub fn insert(&self, plugin: Arc<RunningPlugin>) {
        self.update(|running| running.push(plugin));
    }

    /// Takes the running plugin named `name` out of the set.
    pub fn remove(&self, name: &str) -> Option<Arc<RunningPlugin>> {
        let mut removed = None;
        self.update(|running| {
            if let Some(i) = running.iter().position(|p| p.name.as_str() == name) {
                removed = Some(running.remove(i));
            }
        });
        removed
    }

    fn update(&self, change: impl FnOnce(&mut Vec<Arc<RunningPlugin>>)) {
        let mut set = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut running = Vec::clone(&set);
        change(&mut running);
        *set = Arc::new(running);
    }
}
