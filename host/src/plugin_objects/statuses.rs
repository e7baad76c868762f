//! The status each Plugin object's instance was last given, kept in memory for the
//! dashboard's per-plugin view: the status server has no API client of its own, and every
//! replica computes the status (only one writes it).

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The last computed status per instance (`namespace/name`); clones share it.
#[derive(Debug, Clone, Default)]
pub struct PluginStatuses {
    inner: Arc<Mutex<HashMap<String, Value>>>,
}

impl PluginStatuses {
    /// The status of instance `name` (a shadow's is its Plugin's), if a Plugin has it.
    pub fn get(&self, name: &str) -> Option<Value> {
        let (name, _) = crate::worker::live_of(name);
        self.lock().get(name).cloned()
    }

    /// Replaces every status at once, at the end of a pass.
    pub(crate) fn replace(&self, statuses: HashMap<String, Value>) {
        *self.lock() = statuses;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadow_reads_its_plugins_status() {
        let s = PluginStatuses::default();
        s.replace(HashMap::from([(
            "team-a/p".to_string(),
            serde_json::json!({"mode": "enforce"}),
        )]));
        assert_eq!(s.get("team-a/p@shadow").unwrap()["mode"], "enforce");
        assert!(s.get("team-a/q").is_none());
    }
}
