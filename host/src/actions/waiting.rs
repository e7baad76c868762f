//! Writes waiting for their plugin's write budget right now, per plugin instance, for the
//! whole process: the dashboard plots it. An entry exists only while a write waits, so the
//! map holds at most one entry per running plugin.

use std::collections::BTreeMap;
use std::sync::Mutex;

static WAITING: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn waiting_map() -> std::sync::MutexGuard<'static, BTreeMap<String, usize>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

/// One write waiting for `plugin`'s budget, counted until dropped (the wait ended, or the
/// call was cancelled).
#[derive(Debug)]
pub struct Waiting(String);

impl Waiting {
    /// Counts one more write of `plugin` waiting.
    pub fn enter(plugin: &str) -> Waiting {
        *waiting_map().entry(plugin.to_string()).or_default() += 1;
        Waiting(plugin.to_string())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut map = waiting_map();
        if let Some(n) = map.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.0);
            }
        }
    }
}

/// How many writes of `plugin` wait for its budget now.
pub fn waiting(plugin: &str) -> usize {
    waiting_map().get(plugin).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_while_held() {
        let name = "waiting-test-plugin";
        assert_eq!(waiting(name), 0);
        let a = Waiting::enter(name);
        let b = Waiting::enter(name);
        assert_eq!(waiting(name), 2);
        drop(a);
        assert_eq!(waiting(name), 1);
        drop(b);
        assert_eq!(waiting(name), 0);
        assert!(!waiting_map().contains_key(name));
    }
}
