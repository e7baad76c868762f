//! How many plugins get series of their own: up to a limit of running `Plugin` objects
//! (`--metrics-per-plugin-limit`), each plugin's series are its own (`plugin="ns/name"`);
//! past it, those of every namespaced plugin are exported summed per namespace
//! (`plugin="ns/*"`), so the series grow with the namespaces, not the plugins. The
//! operator's plugin files (names without `/`) are few and in no namespace: they always keep
//! their own series and do not count.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// The limit `kubeplug run` applies unless told otherwise.
pub const DEFAULT_PER_PLUGIN_LIMIT: usize = 100;

/// The running namespaced plugins, and the limit past which their series are summed per
/// namespace. Clones share them.
#[derive(Debug, Clone)]
pub struct SeriesLimit {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: usize,
    live: Mutex<Live>,
}

/// The namespaced plugins started and not stopped, and how many per namespace.
#[derive(Debug, Default)]
struct Live {
    plugins: HashSet<String>,
    namespaces: HashMap<String, usize>,
}

impl Default for SeriesLimit {
    /// The limit of `kubeplug run`'s default ([`DEFAULT_PER_PLUGIN_LIMIT`]).
    fn default() -> Self {
        Self::new(DEFAULT_PER_PLUGIN_LIMIT)
    }
}

thread_local! {
    /// Set while [`per_plugin_view`] runs on this thread.
    static PER_PLUGIN_VIEW: Cell<bool> = const { Cell::new(false) };
}

/// Runs `encode` with every series per plugin whatever the limit: for the host's own
/// readers (the dashboard's sampler), which are not a time-series database.
pub fn per_plugin_view<T>(encode: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            PER_PLUGIN_VIEW.with(|v| v.set(self.0));
        }
    }
    let _reset = Reset(PER_PLUGIN_VIEW.with(|v| v.replace(true)));
    encode()
}

/// The namespace of plugin instance `plugin` (`ns/name`, or `ns/name@shadow`); `None` for
/// a plugin file's instance.
pub fn namespace_of(plugin: &str) -> Option<&str> {
    plugin.split_once('/').map(|(ns, _)| ns)
}

/// The `plugin` label of namespace `ns`'s summed series: `ns/*` (no plugin name holds a
/// `*`, and `plugin=~"ns/.*"` selects a namespace's series in either form).
pub fn namespace_label(ns: &str) -> String {
    format!("{ns}/*")
}

impl SeriesLimit {
    /// Plugins keep series of their own while at most `limit` namespaced ones run (0: always
    /// summed per namespace).
    pub fn new(limit: usize) -> Self {
        SeriesLimit {
            inner: Arc::new(Inner {
                limit,
                live: Mutex::new(Live::default()),
            }),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.inner.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plugin `plugin` runs (again: counted once).
    pub fn started(&self, plugin: &str) {
        let Some(ns) = namespace_of(plugin) else {
            return;
        };
        let mut live = self.live();
        if live.plugins.insert(plugin.to_string()) {
            *live.namespaces.entry(ns.to_string()).or_default() += 1;
        }
    }

    /// Plugin `plugin` stopped.
    pub fn stopped(&self, plugin: &str) {
        let Some(ns) = namespace_of(plugin) else {
            return;
        };
        let mut live = self.live();
        if live.plugins.remove(plugin)
            && let Some(n) = live.namespaces.get_mut(ns)
        {
            *n -= 1;
            if *n == 0 {
                live.namespaces.remove(ns);
            }
        }
    }

    /// Whether namespaced series are exported summed per namespace now: more namespaced
    /// plugins run than the limit (never inside [`per_plugin_view`]).
    pub fn aggregated(&self) -> bool {
        !PER_PLUGIN_VIEW.with(Cell::get) && self.live().plugins.len() > self.inner.limit
    }

    /// Whether a plugin of namespace `ns` runs.
    pub fn namespace_runs(&self, ns: &str) -> bool {
        self.live().namespaces.contains_key(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_limit_of_namespaced_plugins_series_are_summed() {
        let limit = SeriesLimit::new(2);
        limit.started("file-plugin");
        limit.started("a/one");
        limit.started("a/one");
        limit.started("b/two");
        assert!(!limit.aggregated(), "files and restarts do not count");
        limit.started("b/two@shadow");
        assert!(limit.aggregated());
        assert!(!per_plugin_view(|| limit.aggregated()));
        assert!(limit.aggregated(), "the view ends with its closure");
        limit.stopped("b/two@shadow");
        assert!(!limit.aggregated());
        assert!(limit.namespace_runs("b"));
        limit.stopped("b/two");
        assert!(!limit.namespace_runs("b"));
        assert!(limit.namespace_runs("a"));
    }

    #[test]
    fn zero_sums_as_soon_as_one_namespaced_plugin_runs() {
        let limit = SeriesLimit::new(0);
        limit.started("file-plugin");
        assert!(!limit.aggregated());
        limit.started("a/one");
        assert!(limit.aggregated());
    }

    #[test]
    fn names_and_labels() {
        assert_eq!(namespace_of("team-a/pinner@shadow"), Some("team-a"));
        assert_eq!(namespace_of("pinner"), None);
        assert_eq!(namespace_label("team-a"), "team-a/*");
    }
}
