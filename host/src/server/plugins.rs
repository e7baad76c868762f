//! `GET /plugins`: the plugins running (version, digest, policy, queue) and every plugin
//! file's status (a file whose current content does not run says why).

use super::ServerState;
use crate::policy::Mode;
use crate::reload::FileStatus;
use axum::Json;
use axum::extract::State;
use serde::Serialize;

/// The answer of `GET /plugins`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginsReport {
    pub running: Vec<RunningPlugin>,
    pub files: Vec<FileStatus>,
    /// Leader election or sharding: whether this replica leads, the ring it sees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordination: Option<crate::coordination::CoordinationStatus>,
}

/// One running plugin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningPlugin {
    /// The instance name (its file's name): what its policy, queue and metrics go by.
    pub name: String,
    /// The name the plugin declares in its metadata: informational only.
    pub declared: String,
    pub version: String,
    pub digest: String,
    pub reconciles: String,
    pub mode: Mode,
    /// The policy file in force; `None` for the dry-run default.
    pub policy: Option<String>,
    /// Keys waiting in its queue.
    pub queued: usize,
    /// Reconciles it has run (as `kubeplug_reconcile_total` counts them).
    pub reconciles_total: u64,
    /// Those that did not succeed (any result but `success`).
    pub errors_total: u64,
}

pub(super) async fn list(State(state): State<ServerState>) -> Json<PluginsReport> {
    let controller = &state.controller;
    let depths = controller.queue_depths();
    let running = controller
        .plugins()
        .into_iter()
        .filter_map(|name| {
            let plugin = controller.plugin(&name)?;
            let policy = controller.policy(&name)?;
            let counts = controller.reconcile_counts(&name);
            Some(RunningPlugin {
                declared: plugin.declared_name().to_string(),
                version: plugin.metadata().version.clone(),
                digest: plugin.digest().to_string(),
                reconciles: plugin.metadata().reconciles.to_string(),
                mode: policy.mode,
                policy: policy.source.as_ref().map(|p| p.display().to_string()),
                queued: depths.get(&name).copied().unwrap_or(0),
                reconciles_total: counts.total,
                errors_total: counts.errors,
                name,
            })
        })
        .collect();
    Json(PluginsReport {
        running,
        files: state.reloader.status(),
        coordination: state.coordination.as_ref().map(|c| c.status()),
    })
}
