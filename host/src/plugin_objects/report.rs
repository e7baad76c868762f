//! The report step of a pass: each Plugin's status (kstatus conditions, revisions, counts)
//! and its Events, written by the one replica that owns the object, only when they changed.

use super::events::{EventType, Regarding, record};
use super::pass_state::{Entry, State};
use super::records::{Lookup, PluginRef, Record};
use super::refusal::{Reason, Refusal};
use super::source::{PluginObjects, lock, now, plugin_resource, while_held};
use super::status::{Observation, differs_beyond_counts, plugin_status};
use super::truth::{StatusWrite, note_forgery, write_status};
use crate::cluster::ObjKey;
use crate::coordination::Scope;
use crate::policy::Mode;
use kube::ResourceExt;
use serde_json::Value;
use std::time::Instant;

impl PluginObjects {
    /// Writes one Plugin's status (and its Events) if this replica owns it and it changed.
    pub(super) async fn report(&self, state: &mut State, entry: &Entry) -> (String, Value) {
        let obj = &entry.obj;
        let instance = entry.instance.as_ref().ok();
        let refusal = entry.outcome.as_ref().err().or(entry.held.as_ref());
        let inner = &*self.inner;
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let generation = obj.metadata.generation.unwrap_or(0);
        let key = instance
            .map(|i| i.to_string())
            .unwrap_or_else(|| format!("{ns}/{name}"));
        let mut refusal = refusal.cloned();
        if let (None, Some(f)) = (&refusal, state.applier.failed().get(&key)) {
            refusal = Some(Refusal::new(Reason::StartRefused, f.error.clone()));
        }
        let running = state.running_info.get(&key).cloned();
        let counts = inner.controller.reconcile_counts(&key);
        let denied = lock(&inner.denials).get(&key).map_or(0, |d| d.count);
        let obs = Observation {
            generation,
            running: running.clone(),
            refusal: refusal.clone(),
            runner: self.runner(),
            counts: (counts.total, counts.errors, denied),
            rollout: entry.rollout.clone(),
        };
        // Carried forward from what the host recorded, never from the status read back.
        let read_back = obj.data.get("status");
        let plugin = PluginRef {
            namespace: ns.clone(),
            name: name.clone(),
            uid: obj.metadata.uid.clone().unwrap_or_default(),
        };
        let lookup = inner.records.lookup(&plugin);
        let recorded = match &lookup {
            Lookup::Found(r) => Some(&**r),
            _ => None,
        };
        let status = plugin_status(&obs, recorded.map(Record::view).as_ref(), &now());
        let Some(pass) = inner.gate.enter(&ObjKey::new(Some(&ns), &name)) else {
            inner.records.forget(&plugin);
            return (key, status);
        };
        if lookup == Lookup::Unavailable {
            // Written now, the status would lose what the records keep: wait for them.
            return (key, status);
        }
        let rv = obj.metadata.resource_version.as_deref();
        let forged = recorded
            .map(|r| state.marks.forged(&key, rv, read_back, &r.written))
            .unwrap_or_default();
        let counts_due = state
            .counts_written
            .get(&key)
            .is_none_or(|t| t.elapsed() >= inner.config.counts_every);
        let changed = differs_beyond_counts(&status, read_back);
        let counts_changed = read_back.and_then(|p| p.get("counts")) != status.get("counts");
        // Whether the object now shows this status (beyond counts).
        let mut shown = !changed;
        if (changed || (counts_changed && counts_due)) && pass.holds() {
            let resource = plugin_resource();
            let written = write_status(
                &inner.client,
                &resource,
                Some(&ns),
                &name,
                &status,
                read_back,
                rv,
            );
            match while_held(&pass, &key, written).await {
                Some(StatusWrite::Written(new_rv)) => {
                    inner.echoes.expect(&ns, &name, new_rv);
                    shown = true;
                    state.marks.wrote_over(&key, rv, read_back);
                }
                // Decided on an older object: a pass decides again on the newer one.
                Some(StatusWrite::Conflict) => inner.wake.notify_one(),
                _ => {}
            }
            state.counts_written.insert(key.clone(), Instant::now());
        }
        if shown && pass.holds() {
            let record = Record::of(&plugin, &status);
            if recorded != Some(&record)
                && let Some(Err(err)) = while_held(&pass, &key, inner.records.put(&record)).await
            {
                tracing::warn!(plugin = %key, "cannot record the Plugin's status: {err}");
            }
        }
        let regarding = Regarding {
            namespace: ns.clone(),
            name: name.clone(),
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
        };
        let reporter = inner.config.identity.clone();
        // An Event about the Plugin, sent only while this replica holds it.
        let event = async |type_: EventType, reason: &str, message: &str| {
            let sent = record(&inner.client, &regarding, type_, reason, message, &reporter);
            while_held(&pass, &key, sent).await;
        };
        if !forged.is_empty() && pass.holds() && state.marks.first_notice(&key, rv) {
            while_held(
                &pass,
                &key,
                note_forgery(&inner.client, &regarding, &forged, &reporter),
            )
            .await;
        }
        if let Some(r) = &refusal {
            let mark = (key.clone(), r.reason.as_str().to_string(), generation);
            if !state.evented.contains(&mark) && pass.holds() {
                let type_ = match r.reason.is_normal() {
                    true => EventType::Normal,
                    false => EventType::Warning,
                };
                event(type_, r.reason.as_str(), &r.message).await;
                state.evented.insert(mark);
            }
        }
        // Once per revision and grant, by the replica holding the Plugin when it first can
        // (a shard may own it only after the ring settles, passes after the start).
        if let Some(run) = &running {
            let mark = (
                key.clone(),
                format!("Loaded {} {}", run.digest, run.grant),
                generation,
            );
            if !state.evented.contains(&mark) && pass.holds() {
                let message = format!(
                    "revision {} ({} {}, contract {}) runs in {} mode",
                    &run.digest[..12.min(run.digest.len())],
                    run.declared.0,
                    run.declared.1,
                    run.declared.2,
                    if run.mode == Mode::Enforce {
                        "enforce"
                    } else {
                        "dry-run"
                    }
                );
                event(EventType::Normal, "Loaded", &message).await;
                state.evented.insert(mark);
            }
        }
        let unreported: Vec<(String, String)> = {
            let mut all = lock(&inner.denials);
            match all.get_mut(&key) {
                Some(d) => {
                    let taken = std::mem::take(&mut d.unreported);
                    d.reported.extend(taken.iter().map(|(g, _)| g.clone()));
                    taken
                }
                None => Vec::new(),
            }
        };
        for (_, what) in unreported {
            if pass.holds() {
                event(EventType::Warning, "ActionDenied", &what).await;
            }
        }
        (key, status)
    }

    /// Which replica runs the Plugins, as status shows it.
    pub(super) fn runner(&self) -> String {
        let me = &self.inner.config.identity;
        match &*self.inner.gate.scope() {
            Scope::Everything => me.clone(),
            Scope::Leader { leading: true } => format!("{me} (leader)"),
            Scope::Leader { leading: false } => format!("{me} (follower)"),
            Scope::Shard(view) => {
                let n = view.current.as_ref().map_or(0, |r| r.members().len());
                format!("{n} shards; status by {me}")
            }
        }
    }
}
