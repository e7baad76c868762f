//! What a source of Plugin objects follows beside the objects themselves: ConfigMap versions
//! (a module's change wakes a pass), denied actions (reported as Events) and every call's
//! decisions (fed to the shadow comparisons).

use super::source::{PluginObjects, lock};
use crate::policy::{AuditRecord, Decision};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use std::sync::Arc;

impl PluginObjects {
    /// Follows ConfigMap versions (not their content): a change to one a Plugin uses wakes
    /// a pass, which fetches it again.
    pub(super) async fn follow_config_maps(self) {
        let api: Api<ConfigMap> = Api::all(self.inner.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let key = |cm: &ConfigMap| (cm.namespace().unwrap_or_default(), cm.name_any());
            let changed = match event {
                Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                    let k = key(&cm);
                    let rv = cm.resource_version().unwrap_or_default();
                    lock(&self.inner.config_maps).insert(k.clone(), rv);
                    Some(k)
                }
                Ok(Event::Delete(cm)) => {
                    let k = key(&cm);
                    lock(&self.inner.config_maps).remove(&k);
                    Some(k)
                }
                Ok(Event::Init) => {
                    lock(&self.inner.config_maps).clear();
                    None
                }
                Ok(Event::InitDone) => {
                    self.inner.wake.notify_one();
                    None
                }
                Err(err) => {
                    tracing::warn!("watch of ConfigMaps failed, retrying: {err}");
                    None
                }
            };
            if changed.is_some_and(|k| lock(&self.inner.referenced).contains(&k)) {
                self.inner.wake.notify_one();
            }
        }
    }

    /// Counts denied actions of object-backed instances and keeps the first of each grant
    /// kind to report as an Event.
    pub(super) async fn follow_audit(self) {
        let mut audit = self.inner.controller.audit();
        loop {
            let record: Arc<AuditRecord> = match audit.recv().await {
                Ok(r) => r,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => return,
            };
            if !record.plugin.name.contains('/') {
                continue;
            }
            if let Decision::Denied(denial) = &record.decision {
                let mut all = lock(&self.inner.denials);
                let d = all.entry(record.plugin.name.clone()).or_default();
                d.count += 1;
                let grant = denial.grant.as_str().to_string();
                if !d.reported.contains(&grant) && !d.unreported.iter().any(|(g, _)| *g == grant) {
                    let what = format!(
                        "{} {} denied ({grant}): {}",
                        record.action, record.target, denial.reason
                    );
                    d.unreported.push((grant, what));
                    self.inner.wake.notify_one();
                }
            }
        }
    }

    /// Feeds the shadow comparisons with what the live and candidate revisions decide.
    pub(super) async fn follow_calls(self) {
        let mut calls = self.inner.audit.calls();
        loop {
            let call = match calls.recv().await {
                Ok(c) => c,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        missed = n,
                        "shadow comparison fell behind: {n} decisions not compared"
                    );
                    continue;
                }
                Err(_) => return,
            };
            let name = call.plugin.name.as_str();
            let mut all = lock(&self.inner.comparisons);
            let (live, is_shadow) = crate::worker::live_of(name);
            let Some(cmp) = all.get_mut(live) else {
                continue;
            };
            let before = cmp.compared();
            match is_shadow {
                true => cmp.shadow(&call.key, call.decided.clone()),
                false => cmp.live(&call.key, call.decided.clone()),
            }
            if cmp.compared() != before {
                self.inner.wake.notify_one();
            }
        }
    }
}
