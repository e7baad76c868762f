//! Plugin slots, shared fairly between namespaces. The host runs at most
//! `--max-plugin-objects` Plugins, and each namespace at most
//! `--max-plugins-per-namespace` of them; Plugins are admitted oldest first. Only a Plugin
//! that runs (or may soon: its module is being pulled or compiled, or its previous revision
//! runs) holds a slot: one that cannot load (a module that does not compile, a request no
//! policy grants, ...) is looked at and refused for its own reason, and the slot goes to the
//! next. So one namespace's flood of broken Plugins costs that namespace its own share, never
//! another namespace's Plugin its place.
//!
//! Looking at a Plugin costs the host (a ConfigMap read, a grant), so a namespace gets at
//! most its cap of Plugins that do not load looked at per pass besides the ones holding its
//! slots; the rest are refused `TooManyPlugins` naming the per-namespace cap, unresolved.

use super::refusal::{Reason, Refusal};
use std::collections::HashMap;

/// The per-namespace cap when none is set: a quarter of the host's (at least one), so that
/// at least four namespaces fit at their full share.
pub fn default_per_namespace(max_plugins: usize) -> usize {
    max_plugins.div_ceil(4).max(1)
}

/// Whether a Plugin whose current spec came to `outcome` (None: it resolved) holds a slot:
/// it runs, or its previous revision does (`fallback`), or it is on its way (pulled or
/// compiled now, or waiting for its namespace's compile budget).
pub(super) fn holds_slot(outcome: Option<Reason>, fallback: bool) -> bool {
    fallback
        || match outcome {
            None => true,
            Some(reason) => matches!(
                reason,
                Reason::Pulling | Reason::Compiling | Reason::CompileThrottled
            ),
        }
}

#[derive(Debug, Default, Clone, Copy)]
struct Use {
    /// Plugins holding a slot.
    held: usize,
    /// Plugins looked at that did not load.
    tried: usize,
}

/// One pass's admission of Plugins to slots.
#[derive(Debug)]
pub(super) struct Slots {
    max_plugins: usize,
    per_namespace: usize,
    held: usize,
    by_namespace: HashMap<String, Use>,
}

impl Slots {
    /// Admission to `max_plugins` slots, at most `per_namespace` for one namespace.
    pub(super) fn new(max_plugins: usize, per_namespace: usize) -> Self {
        Slots {
            max_plugins,
            per_namespace,
            held: 0,
            by_namespace: HashMap::new(),
        }
    }

    /// Whether the next Plugin of `namespace` (of `total` Plugins) may be resolved, or why
    /// not.
    pub(super) fn admit(&self, namespace: &str, total: usize) -> Result<(), Refusal> {
        let max = self.max_plugins;
        if self.held >= max {
            return Err(Refusal::new(
                Reason::TooManyPlugins,
                format!(
                    "this host runs at most {max} Plugin objects (--max-plugin-objects) and {total} exist; older ones run first. A ResourceQuota on count/plugins.kubeplug.dev bounds each namespace"
                ),
            ));
        }
        let used = self
            .by_namespace
            .get(namespace)
            .copied()
            .unwrap_or_default();
        let cap = self.per_namespace;
        if used.held >= cap || used.tried >= cap {
            return Err(Refusal::new(
                Reason::TooManyPlugins,
                format!(
                    "this host runs at most {cap} Plugin objects of namespace {namespace} (--max-plugins-per-namespace; {} run or are being loaded, {} more do not load); older ones go first, other namespaces' Plugins are not held back by these",
                    used.held, used.tried
                ),
            ));
        }
        Ok(())
    }

    /// Records what an admitted Plugin of `namespace` came to.
    pub(super) fn settle(&mut self, namespace: &str, holds: bool) {
        let used = self.by_namespace.entry(namespace.to_string()).or_default();
        match holds {
            true => {
                used.held += 1;
                self.held += 1;
            }
            false => used.tried += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_share_is_a_quarter_and_never_zero() {
        assert_eq!(default_per_namespace(256), 64);
        assert_eq!(default_per_namespace(6), 2);
        assert_eq!(default_per_namespace(1), 1);
        assert_eq!(default_per_namespace(0), 1);
    }

    #[test]
    fn plugins_that_do_not_load_hold_no_slot_and_a_flood_costs_its_namespace_only() {
        let mut slots = Slots::new(6, 2);
        // Namespace a: twelve Plugins that do not load. Two are looked at, the rest refused
        // naming the per-namespace cap.
        let mut refused = 0;
        for _ in 0..12 {
            match slots.admit("a", 13) {
                Ok(()) => slots.settle("a", holds_slot(Some(Reason::CompileFailed), false)),
                Err(r) => {
                    assert!(r.message.contains("--max-plugins-per-namespace"), "{r:?}");
                    refused += 1;
                }
            }
        }
        assert_eq!(refused, 10);
        // b's Plugin gets a slot: a holds none.
        assert!(slots.admit("b", 13).is_ok());
        slots.settle("b", holds_slot(None, false));
        assert_eq!(slots.held, 1);
    }

    #[test]
    fn running_and_loading_plugins_hold_slots_up_to_both_caps() {
        let mut slots = Slots::new(3, 2);
        for outcome in [None, Some(Reason::Compiling)] {
            slots.admit("a", 5).unwrap();
            slots.settle("a", holds_slot(outcome, false));
        }
        let per_ns = slots.admit("a", 5).unwrap_err();
        assert!(
            per_ns
                .message
                .contains("at most 2 Plugin objects of namespace a")
        );
        slots.admit("b", 5).unwrap();
        // Refused now, but its previous revision runs: it keeps its slot.
        slots.settle("b", holds_slot(Some(Reason::CompileFailed), true));
        let host = slots.admit("c", 5).unwrap_err();
        assert!(
            host.message
                .contains("at most 3 Plugin objects (--max-plugin-objects)")
        );
    }
}
