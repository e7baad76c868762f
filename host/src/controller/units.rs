//! The set of running plugin units, shared by the router, the resync timer and the
//! controller: readers take a snapshot, changes replace it whole.

use super::unit::PluginUnit;
use std::sync::{Arc, RwLock};

/// The running units; cloning shares the set.
#[derive(Clone, Default)]
pub(crate) struct UnitSet(Arc<RwLock<Arc<Vec<Arc<PluginUnit>>>>>);

impl UnitSet {
    /// The units running now.
    pub fn snapshot(&self) -> Arc<Vec<Arc<PluginUnit>>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The unit named `name`, if it runs.
    pub fn get(&self, name: &str) -> Option<Arc<PluginUnit>> {
        self.snapshot().iter().find(|u| &*u.name == name).cloned()
    }

    /// Adds `unit` (the caller ensures its name is free).
    pub fn insert(&self, unit: Arc<PluginUnit>) {
        self.update(|units| units.push(unit));
    }

    /// Takes the unit named `name` out of the set.
    pub fn remove(&self, name: &str) -> Option<Arc<PluginUnit>> {
        let mut removed = None;
        self.update(|units| {
            if let Some(i) = units.iter().position(|u| &*u.name == name) {
                removed = Some(units.remove(i));
            }
        });
        removed
    }

    fn update(&self, change: impl FnOnce(&mut Vec<Arc<PluginUnit>>)) {
        let mut set = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut units = Vec::clone(&set);
        change(&mut units);
        *set = Arc::new(units);
    }
}
