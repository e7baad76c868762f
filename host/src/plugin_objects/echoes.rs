//! The watch events of the host's own status writes. Every Plugin event woke a pass, and
//! each pass wrote the statuses whose counts were due, whose events woke the next pass: at
//! 1,000 Plugins the passes (100 to 200 ms of work each) ran back to back while tenants'
//! reconciles changed counts. A Plugin event at the version the host's last status write
//! returned is that write come back, and wakes nothing; any other version (a spec change, a
//! tenant writing the status, a deletion) still does.

use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::HashMap;
use std::sync::Mutex;

/// Most writes remembered: beyond it the oldest are forgotten (their events then wake a
/// pass, as every event did before), so the map stays bounded whatever the API server does.
pub(super) const MAX_ECHOES: usize = 16_384;

/// The resourceVersion each Plugin's last status write gave it, by `namespace/name`.
#[derive(Debug, Default)]
pub(super) struct Echoes(Mutex<HashMap<String, String>>);

impl Echoes {
    /// The host's status write gave Plugin `namespace/name` version `rv`.
    pub(super) fn expect(&self, namespace: &str, name: &str, rv: String) {
        let mut all = self.lock();
        if all.len() >= MAX_ECHOES {
            all.clear();
        }
        if !rv.is_empty() {
            all.insert(format!("{namespace}/{name}"), rv);
        }
    }

    /// Whether `obj` is at the version the host's last status write gave it (the one event
    /// that write causes: the expectation is used up).
    pub(super) fn is_echo(&self, obj: &DynamicObject) -> bool {
        let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
        let mut all = self.lock();
        match (all.get(&key), obj.resource_version()) {
            (Some(expected), Some(rv)) if *expected == rv => {
                all.remove(&key);
                true
            }
            _ => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn plugin(rv: &str) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some("team-a".into()),
                name: Some("p".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            data: serde_json::json!({}),
        }
    }

    #[test]
    fn only_the_written_version_is_an_echo_and_only_once() {
        let echoes = Echoes::default();
        assert!(!echoes.is_echo(&plugin("5")), "nothing written yet");
        echoes.expect("team-a", "p", "7".into());
        assert!(!echoes.is_echo(&plugin("6")), "another writer's version");
        assert!(echoes.is_echo(&plugin("7")));
        assert!(!echoes.is_echo(&plugin("7")), "used up");
    }

    #[test]
    fn the_memory_is_bounded() {
        let echoes = Echoes::default();
        for i in 0..MAX_ECHOES + 10 {
            echoes.expect("ns", &format!("p{i}"), "1".into());
        }
        assert!(echoes.lock().len() <= MAX_ECHOES);
    }
}
