//! A host as a process of its own, in process: a thread with its own tokio runtime runs a
//! [`Host`]; killing it drops the host and shuts the runtime down without waiting, so every
//! task (watches, workers, writes in flight) stops where it is, as SIGKILL would stop it.

use super::schedule::HOST_AGENT;
use crate::app::{Host, HostConfig};
use crate::controller::Controller;
use crate::reload::Reloader;
use anyhow::Context;
use std::thread::JoinHandle;

/// A running host; [`HostProcess::kill`] (or dropping it) stops it abruptly.
pub struct HostProcess {
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    controller: Controller,
    reloader: Reloader,
}

impl HostProcess {
    /// Starts host number `n` against the API server of `config`, its requests sent with a
    /// User-Agent naming it (`kubeplug/chaos (chaos-host-N)`, which fault rules match).
    pub async fn start(
        n: u64,
        mut kube: kube::Config,
        config: HostConfig,
    ) -> anyhow::Result<HostProcess> {
        let agent = format!("kubeplug/chaos ({HOST_AGENT}-{n})");
        kube.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(&agent).context("user agent")?,
        ));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("{HOST_AGENT}-{n}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = started_tx.send(Err(anyhow::Error::from(err)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let started = async {
                        let client = kube::Client::try_from(kube)?;
                        Host::start(client, config).await
                    }
                    .await;
                    match started {
                        Ok(host) => {
                            let handles = (host.controller().clone(), host.reloader().clone());
                            if started_tx.send(Ok(handles)).is_ok() {
                                let _ = kill_rx.await;
                            }
                            drop(host);
                        }
                        Err(err) => {
                            let _ = started_tx.send(Err(err));
                        }
                    }
                });
                runtime.shutdown_background();
            })
            .context("a thread for the host")?;
        let (controller, reloader) = match started_rx.await {
            Ok(Ok(handles)) => handles,
            Ok(Err(err)) => {
                let _ = thread.join();
                return Err(err);
            }
            Err(_) => {
                let _ = thread.join();
                anyhow::bail!("the host's thread ended before it started");
            }
        };
        Ok(HostProcess {
            kill: Some(kill_tx),
            thread: Some(thread),
            controller,
            reloader,
        })
    }

    /// What is wrong with the host's plugins: files that do not run (with their error) and
    /// plugins the controller does not run.
    pub fn plugin_problems(&self, wanted: &[&str]) -> Vec<String> {
        let running = self.controller.plugins();
        let mut problems: Vec<String> = self
            .reloader
            .status()
            .into_iter()
            .filter_map(|s| {
                s.error
                    .map(|e| format!("plugin file {} left failed: {e}", s.file.display()))
            })
            .collect();
        for name in wanted {
            if !running.iter().any(|r| r == name) {
                problems.push(format!("plugin {name} is not running"));
            }
        }
        problems
    }

    /// Stops the host at once: no drain, writes in flight abandoned.
    pub fn kill(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
