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
        self.snapshot().iter().find(|u| &*u.name == name).cloned()
    }

    /// Adds a running plugin (the caller ensures its name is free).
    pub fn insert(&self, unit: Arc<RunningPlugin>) {
        self.update(|units| units.push(unit));
    }

    /// Takes the running plugin named `name` out of the set.
    pub fn remove(&self, name: &str) -> Option<Arc<RunningPlugin>> {
        let mut removed = None;
        self.update(|units| {
            if let Some(i) = units.iter().position(|u| &*u.name == name) {
                removed = Some(units.remove(i));
            }
        });
        removed
    }

    fn update(&self, change: impl FnOnce(&mut Vec<Arc<RunningPlugin>>)) {
        let mut set = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut units = Vec::clone(&set);
        change(&mut units);
        *set = Arc::new(units);
    }
}
