//! Fault injection, set from embedding code ([`Faults`]) or over HTTP (`POST /sim/faults`,
//! `GET /sim/faults`, `DELETE /sim/faults`), to make the sim misbehave the way real API
//! servers do. One mechanism decides every injected fault: a [`Schedule`] of rules (see
//! `fault_schedule`). The convenience switches (`gone_next_watches`, `conflict_next_writes`,
//! `inject_errors`, ... and their JSON fields) each set a one-rule schedule of their own,
//! tried before the main schedule. Beside them: latency on every request, dropping every open
//! watch now, and requests held at the door until released (to put another client's write
//! between a controller's decision and its own write, deterministically).

use super::errors::ApiError;
use super::fault_schedule::{
    Active, Fault, Match, RequestInfo, Rule, Schedule, ScheduleError, ScheduleReport,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Error answers for a share of requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ErrorFault {
    /// HTTP status to answer with (429, 500, 503, ...).
    pub status: u16,
    /// Fail every Nth matching request (1 = all).
    pub every_nth: Option<u64>,
    /// Fail this share (0..=1) of matching requests, drawn from a PRNG seeded with `seed`.
    pub ratio: Option<f64>,
    /// Seed for `ratio` (deterministic sequence).
    pub seed: u64,
    /// Only these verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`); empty = all.
    pub verbs: Vec<String>,
    /// Only these resources (plural, e.g. `deployments`); empty = all.
    pub resources: Vec<String>,
    /// Only requests whose `User-Agent` contains one of these (a replica's identity); empty = all.
    pub user_agents: Vec<String>,
    /// `Retry-After` seconds (default 1 for 429).
    pub retry_after_seconds: Option<u64>,
    /// Stop after failing this many requests; `None` = until cleared.
    pub remaining: Option<u64>,
}

impl ErrorFault {
    /// Fails every `n`th request with `status`.
    pub fn every_nth(status: u16, n: u64) -> Self {
        Self {
            status,
            every_nth: Some(n.max(1)),
            ..Self::default()
        }
    }

    /// Fails a `ratio` share of requests with `status`, deterministically from `seed`.
    pub fn ratio(status: u16, ratio: f64, seed: u64) -> Self {
        Self {
            status,
            ratio: Some(ratio),
            seed,
            ..Self::default()
        }
    }

    /// Restricts to these verbs.
    pub fn verbs<I: IntoIterator<Item = S>, S: Into<String>>(mut self, verbs: I) -> Self {
        self.verbs = verbs.into_iter().map(Into::into).collect();
        self
    }

    /// Restricts to these resources (plural names).
    pub fn resources<I: IntoIterator<Item = S>, S: Into<String>>(mut self, resources: I) -> Self {
        self.resources = resources.into_iter().map(Into::into).collect();
        self
    }

    /// Restricts to requests whose `User-Agent` contains one of these strings.
    pub fn user_agents<I: IntoIterator<Item = S>, S: Into<String>>(mut self, agents: I) -> Self {
        self.user_agents = agents.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `Retry-After`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    /// Fails at most `n` requests.
    pub fn times(mut self, n: u64) -> Self {
        self.remaining = Some(n);
        self
    }
}

/// Requests held before they are served until [`Faults::release`]: a test arms it, makes the
/// change a controller reacts to, waits until [`Faults::held`] counts the controller's write,
/// changes the object again behind its back, and releases the write into the new state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HoldFault {
    /// Only these verbs; empty = all.
    pub verbs: Vec<String>,
    /// Only these resources (plural names); empty = all.
    pub resources: Vec<String>,
    /// Only requests whose `User-Agent` contains one of these; empty = all.
    pub user_agents: Vec<String>,
}

impl HoldFault {
    /// Holds requests of these verbs on these resources (plural names).
    pub fn writes<I: IntoIterator<Item = S>, S: Into<String>>(verbs: I, resources: I) -> Self {
        Self {
            verbs: verbs.into_iter().map(Into::into).collect(),
            resources: resources.into_iter().map(Into::into).collect(),
            user_agents: Vec::new(),
        }
    }

    /// Whether a request passes the filters (an empty filter passes everything).
    fn matches(&self, verb: &str, resource: &str, user_agent: &str) -> bool {
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb))
            && (self.resources.is_empty() || self.resources.iter().any(|r| r == resource))
            && (self.user_agents.is_empty()
                || self
                    .user_agents
                    .iter()
                    .any(|a| user_agent.contains(a.as_str())))
    }
}

/// The current switches (also the JSON of `GET /sim/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultState {
    /// Added to every API request.
    pub latency_ms: u64,
    /// Of the next watch requests, how many more get a 410 Gone ERROR event.
    pub gone_watches: u64,
    /// Of the next watch requests, how many more get an HTTP 410 Gone status (the form a real
    /// API server answers a watch from a compacted resourceVersion with).
    pub gone_status_watches: u64,
    /// Of the next watch requests, how many more get a stream that stays open and sends
    /// nothing (no event, no bookmark, no end at `timeoutSeconds`) until the client leaves.
    pub stall_watches: u64,
    /// Of the next updates/patches, how many more get 409 Conflict.
    pub conflicts: u64,
    /// Error answers (`remaining` counting down as they are given).
    pub error: Option<ErrorFault>,
    /// Requests held until released.
    pub hold: Option<HoldFault>,
    /// Requests held now.
    pub held: u64,
    /// The fault schedule with its per-rule counters, if one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleReport>,
    /// Watches a `stallWatch` fault holds open now.
    pub stalled_watches: u64,
}

/// Body of `POST /sim/faults`: every field optional; present ones change the state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRequest {
    /// Drop all open watches now.
    pub drop_watches: bool,
    /// Set the 410 counter.
    pub gone_watches: Option<u64>,
    /// Set the HTTP 410 status counter.
    pub gone_status_watches: Option<u64>,
    /// Set the stalled watch counter.
    pub stall_watches: Option<u64>,
    /// Set the conflict counter.
    pub conflicts: Option<u64>,
    /// Set the latency.
    pub latency_ms: Option<u64>,
    /// Set the error fault.
    pub error: Option<ErrorFault>,
    /// Clear the error fault.
    pub clear_error: bool,
    /// Hold matching requests until released.
    pub hold: Option<HoldFault>,
    /// Release every held request and stop holding.
    pub release: bool,
    /// Reset everything first.
    pub reset: bool,
}

/// A convenience switch: each stands for a one-rule [`Schedule`] of its own, tried (in this
/// order) before the schedule set with [`Faults::set_schedule`]; setting one again replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Switch {
    /// [`Faults::inject_errors`]: an `error` rule.
    Error,
    /// [`Faults::conflict_next_writes`]: `{fault: conflict, maxFaults: N}`.
    Conflicts,
    /// [`Faults::gone_status_next_watches`]: `{fault: goneWatch, maxFaults: N}`.
    GoneStatusWatches,
    /// [`Faults::stall_next_watches`]: `{fault: stallWatch, maxFaults: N}`.
    StallWatches,
    /// [`Faults::gone_next_watches`]: `{fault: goneWatchEvent, maxFaults: N}`.
    GoneWatches,
}

impl Switch {
    /// The name in the request log and in the JSON body.
    fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Conflicts => "conflicts",
            Self::GoneStatusWatches => "goneStatusWatches",
            Self::StallWatches => "stallWatches",
            Self::GoneWatches => "goneWatches",
        }
    }
}

impl ErrorFault {
    /// The same fault as a one-rule schedule: its filters are the rule's match, its `seed`
    /// the schedule's, `remaining` the rule's `maxFaults` (`everyNth` wins over `ratio`).
    fn schedule(&self) -> Schedule {
        let rule = Rule {
            matcher: Match {
                verbs: self.verbs.clone(),
                resources: self.resources.clone(),
                user_agents: self.user_agents.clone(),
                ..Match::default()
            },
            every_nth: self.every_nth.map(|n| n.max(1)),
            ratio: self.ratio.filter(|_| self.every_nth.is_none()),
            max_faults: self.remaining,
            ..Rule::new(Fault::Error {
                status: self.status,
                retry_after_seconds: self.retry_after_seconds,
            })
        };
        Schedule {
            seed: self.seed,
            rules: vec![rule],
        }
    }
}

/// `fault` for the next `n` requests it applies to: a one-rule schedule capped at `n` faults.
fn next_n(fault: Fault, n: u64) -> Schedule {
    Schedule {
        seed: 0,
        rules: vec![Rule {
            max_faults: Some(n),
            ..Rule::new(fault)
        }],
    }
}

#[derive(Default)]
struct Inner {
    latency_ms: u64,
    hold: Option<HoldFault>,
    held: u64,
    /// The switches set now, each a running one-rule schedule.
    switches: BTreeMap<Switch, Active>,
    /// The error switch as given, for [`Faults::state`].
    error: Option<ErrorFault>,
    schedule: Option<Active>,
}

impl Inner {
    /// Faults a switch's rule may still inject (0 when unset, `u64::MAX` when unbounded).
    fn left(&self, switch: Switch) -> u64 {
        self.switches.get(&switch).map_or(0, |active| {
            let report = active.report();
            let rule = &report.rules[0];
            rule.rule
                .max_faults
                .map_or(u64::MAX, |max| max.saturating_sub(rule.injected))
        })
    }

    fn set_switch(&mut self, switch: Switch, schedule: Option<Schedule>) {
        match schedule {
            Some(schedule) => self.switches.insert(switch, Active::new(schedule)),
            None => self.switches.remove(&switch),
        };
    }
}

/// The fault switches and the fault schedule of one sim.
pub struct Faults {
    inner: Mutex<Inner>,
    drop_tx: watch::Sender<u64>,
    /// Bumped by each release: held requests wait for it to pass the value they saw.
    release_tx: watch::Sender<u64>,
    /// Watches held silent by a `stallWatch` fault now.
    stalled: std::sync::Arc<AtomicU64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            drop_tx: watch::channel(0).0,
            release_tx: watch::channel(0).0,
            stalled: std::sync::Arc::default(),
        }
    }
}

/// splitmix64: a tiny deterministic PRNG for seeded error ratios.
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes every open watch now (clients see the stream end and re-watch).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|n| *n += 1);
    }

    /// The next `n` watch requests get a 410 Gone ERROR event (`goneWatchEvent`).
    pub fn gone_next_watches(&self, n: u64) {
        self.arm(Switch::GoneWatches, Fault::GoneWatchEvent {}, n);
    }

    /// The next `n` watch requests get an HTTP 410 Gone status (`goneWatch`).
    pub fn gone_status_next_watches(&self, n: u64) {
        self.arm(Switch::GoneStatusWatches, Fault::GoneWatch {}, n);
    }

    /// The next `n` watch requests get a stream that stays open and sends nothing
    /// (`stallWatch`).
    pub fn stall_next_watches(&self, n: u64) {
        self.arm(
            Switch::StallWatches,
            Fault::StallWatch { after_events: 0 },
            n,
        );
    }

    /// The next `n` updates or patches get 409 Conflict (`conflict`).
    pub fn conflict_next_writes(&self, n: u64) {
        self.arm(Switch::Conflicts, Fault::Conflict {}, n);
    }

    /// Sets `switch` to `fault` on the next `n` requests it applies to (0 turns it off).
    fn arm(&self, switch: Switch, fault: Fault, n: u64) {
        self.lock()
            .set_switch(switch, (n > 0).then(|| next_n(fault, n)));
    }

    /// Adds `latency` to every API request.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency_ms = latency.as_millis() as u64;
    }

    /// Answers matching requests with an error (replacing an earlier error fault).
    pub fn inject_errors(&self, fault: ErrorFault) {
        let mut inner = self.lock();
        inner.set_switch(Switch::Error, Some(fault.schedule()));
        inner.error = Some(fault);
    }

    /// Stops answering with errors.
    pub fn clear_errors(&self) {
        let mut inner = self.lock();
        inner.set_switch(Switch::Error, None);
        inner.error = None;
    }

    /// Holds matching requests before they are served, until [`Self::release`].
    pub fn hold(&self, fault: HoldFault) {
        self.lock().hold = Some(fault);
    }

    /// Lets every held request through and stops holding.
    pub fn release(&self) {
        self.lock().hold = None;
        self.release_tx.send_modify(|n| *n += 1);
    }

    /// How many requests are held now.
    pub fn held(&self) -> u64 {
        self.lock().held
    }

    /// Turns every switch and the schedule off (held requests are let through).
    pub fn reset(&self) {
        let mut inner = self.lock();
        *inner = Inner {
            held: inner.held,
            ..Inner::default()
        };
        drop(inner);
        self.release_tx.send_modify(|n| *n += 1);
    }

    /// The current switches, with the schedule's counters.
    pub fn state(&self) -> FaultState {
        let inner = self.lock();
        let error = inner.error.clone().map(|mut error| {
            let injected = inner
                .switches
                .get(&Switch::Error)
                .map_or(0, |a| a.report().injected);
            error.remaining = error.remaining.map(|r| r.saturating_sub(injected));
            error
        });
        FaultState {
            latency_ms: inner.latency_ms,
            gone_watches: inner.left(Switch::GoneWatches),
            gone_status_watches: inner.left(Switch::GoneStatusWatches),
            stall_watches: inner.left(Switch::StallWatches),
            conflicts: inner.left(Switch::Conflicts),
            error,
            hold: inner.hold.clone(),
            held: inner.held,
            schedule: inner.schedule.as_ref().map(Active::report),
            stalled_watches: self.stalled.load(Ordering::Relaxed),
        }
    }

    /// Applies `schedule` from now on, with fresh counters (an empty one turns it off).
    pub fn set_schedule(&self, schedule: Schedule) -> Result<(), ScheduleError> {
        schedule.validate()?;
        tracing::info!(
            seed = schedule.seed,
            rules = schedule.rules.len(),
            "fault schedule set"
        );
        self.lock().schedule = (!schedule.rules.is_empty()).then(|| Active::new(schedule));
        Ok(())
    }

    /// Stops applying the schedule.
    pub fn clear_schedule(&self) {
        self.lock().schedule = None;
    }

    /// Faults the schedule injected so far (0 without one).
    pub fn injected(&self) -> u64 {
        self.lock()
            .schedule
            .as_ref()
            .map_or(0, |a| a.report().injected)
    }

    /// The fault for this request, if a switch or else a schedule rule fires; logged, and
    /// returned with what the request log says of it (`conflicts: ...`, `rule 2: ...`).
    pub(crate) fn decide(&self, request: &RequestInfo<'_>) -> Option<(String, Fault)> {
        let mut inner = self.lock();
        let switched = inner.switches.iter_mut().find_map(|(switch, active)| {
            Some((switch.name().to_string(), active.decide(request)?))
        });
        let (source, injection) = match switched {
            Some(found) => found,
            None => {
                let injection = inner.schedule.as_mut()?.decide(request)?;
                (format!("rule {}", injection.rule), injection)
            }
        };
        drop(inner);
        tracing::info!(
            seed = injection.seed,
            source,
            verb = request.verb,
            resource = request.resource,
            namespace = request.namespace.unwrap_or(""),
            user_agent = request.user_agent,
            fault = %injection.fault,
            "fault injected"
        );
        Some((format!("{source}: {}", injection.fault), injection.fault))
    }

    /// The counter of stalled watches, for a watch to hold a [`StallGuard`] on.
    pub(crate) fn stall_gauge(&self) -> std::sync::Arc<AtomicU64> {
        self.stalled.clone()
    }

    /// Applies a `POST /sim/faults` body.
    pub fn apply(&self, request: FaultRequest) {
        if request.reset {
            self.reset();
        }
        if request.drop_watches {
            self.drop_watches();
        }
        if let Some(n) = request.gone_watches {
            self.gone_next_watches(n);
        }
        if let Some(n) = request.gone_status_watches {
            self.gone_status_next_watches(n);
        }
        if let Some(n) = request.stall_watches {
            self.stall_next_watches(n);
        }
        if let Some(n) = request.conflicts {
            self.conflict_next_writes(n);
        }
        if let Some(ms) = request.latency_ms {
            self.set_latency(Duration::from_millis(ms));
        }
        if request.clear_error {
            self.clear_errors();
        }
        if let Some(e) = request.error {
            self.inject_errors(e);
        }
        if request.release {
            self.release();
        }
        if let Some(h) = request.hold {
            self.hold(h);
        }
    }

    /// Waits while a hold matches this request; returns whether it was held.
    pub(crate) async fn wait_if_held(&self, verb: &str, resource: &str, user_agent: &str) -> bool {
        // Subscribed under the lock: a release after it is seen, whenever the wait starts.
        let mut released = {
            let mut inner = self.lock();
            match &inner.hold {
                Some(hold) if hold.matches(verb, resource, user_agent) => {
                    inner.held += 1;
                    self.release_tx.subscribe()
                }
                _ => return false,
            }
        };
        // Only a release (or reset) ends the wait; a dropped sender means the sim is going away.
        let _ = released.changed().await;
        self.lock().held -= 1;
        true
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drop_tx.subscribe()
    }

    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.lock().latency_ms)
    }
}

/// Counts one stalled watch while it lives.
pub(crate) struct StallGuard(std::sync::Arc<AtomicU64>);

impl StallGuard {
    /// Counts one more stalled watch on `gauge` until dropped.
    pub(crate) fn new(gauge: std::sync::Arc<AtomicU64>) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for StallGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The `Status` answer of an injected error: the reason a real server gives for `status`,
/// and `Retry-After` (`retry`, else 1 s for a 429) in the header and the details.
pub(crate) fn injected_error(status: u16, retry: Option<u64>) -> ApiError {
    let mut err = match status {
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later (injected)",
        ),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (injected)",
        ),
        504 => ApiError::new(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted (injected)",
        ),
        409 => ApiError::new(
            409,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version and try again (injected)",
        ),
        410 => ApiError::gone("too old resource version (injected)"),
        code => ApiError::new(
            code,
            "InternalError",
            "an error on the server has prevented the request from succeeding (injected)",
        ),
    };
    err.retry_after = retry.or((status == 429).then_some(1));
    if let Some(seconds) = err.retry_after {
        err = err.with_details(serde_json::json!({"retryAfterSeconds": seconds}));
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(verb: &'a str, resource: &'a str, user_agent: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            verb,
            resource,
            group: "",
            kind: "",
            namespace: Some("default"),
            user_agent,
            continued: false,
        }
    }

    /// The fault decided for a request of `verb` on pods.
    fn fault_for(f: &Faults, verb: &str) -> Option<Fault> {
        f.decide(&request(verb, "pods", "")).map(|(_, fault)| fault)
    }

    /// The error answer decided for this request, as the server gives it.
    fn error_for(f: &Faults, verb: &str, resource: &str, user_agent: &str) -> Option<ApiError> {
        match f.decide(&request(verb, resource, user_agent))?.1 {
            Fault::Error {
                status,
                retry_after_seconds,
            } => Some(injected_error(status, retry_after_seconds)),
            other => panic!("not an error: {other}"),
        }
    }

    #[test]
    fn every_nth_and_filters() {
        let f = Faults::default();
        f.inject_errors(ErrorFault::every_nth(503, 3).verbs(["list"]));
        let hits: Vec<bool> = (0..6)
            .map(|_| error_for(&f, "list", "pods", "").is_some())
            .collect();
        assert_eq!(hits, vec![false, false, true, false, false, true]);
        assert!(error_for(&f, "get", "pods", "").is_none());
    }

    #[test]
    fn a_fault_can_target_one_client_by_user_agent() {
        let f = Faults::default();
        f.inject_errors(ErrorFault::every_nth(503, 1).user_agents(["(replica-a)"]));
        assert!(error_for(&f, "get", "leases", "kubeplug/0.1 (replica-a)").is_some());
        assert!(error_for(&f, "get", "leases", "kubeplug/0.1 (replica-b)").is_none());
        assert!(error_for(&f, "get", "leases", "").is_none());
    }

    #[test]
    fn ratio_is_deterministic_and_bounded() {
        let run = || {
            let f = Faults::default();
            f.inject_errors(ErrorFault::ratio(500, 0.3, 42));
            (0..1000)
                .map(|_| error_for(&f, "get", "pods", "").is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let hits = a.iter().filter(|h| **h).count();
        assert!((200..400).contains(&hits), "{hits}");
    }

    #[test]
    fn remaining_and_retry_after() {
        let f = Faults::default();
        f.inject_errors(ErrorFault::every_nth(429, 1).times(1));
        let err = error_for(&f, "get", "pods", "").unwrap();
        assert_eq!(err.retry_after, Some(1));
        assert!(error_for(&f, "get", "pods", "").is_none());
    }

    #[tokio::test]
    async fn held_requests_wait_for_the_release() {
        let f = std::sync::Arc::new(Faults::default());
        assert!(!f.wait_if_held("patch", "deployments", "").await, "no hold");
        f.hold(HoldFault::writes(["patch"], ["deployments"]));
        assert!(
            !f.wait_if_held("get", "deployments", "").await,
            "other verb"
        );
        let held = tokio::spawn({
            let f = f.clone();
            async move { f.wait_if_held("patch", "deployments", "").await }
        });
        while f.held() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!held.is_finished());
        f.release();
        assert!(held.await.unwrap());
        assert_eq!(f.held(), 0);
        assert!(
            !f.wait_if_held("patch", "deployments", "").await,
            "released"
        );
    }

    #[test]
    fn injected_errors_carry_the_reason_a_real_server_gives() {
        let reasons: Vec<(u16, String)> = [409, 410, 429, 500, 503, 504]
            .into_iter()
            .map(|code| {
                (
                    code,
                    injected_error(code, None).status()["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(
            reasons,
            [
                (409, "Conflict"),
                (410, "Expired"),
                (429, "TooManyRequests"),
                (500, "InternalError"),
                (503, "ServiceUnavailable"),
                (504, "Timeout"),
            ]
            .map(|(c, r)| (c, r.to_string()))
        );
    }

    #[test]
    fn switches_are_one_rule_schedules_that_count_down() {
        let f = Faults::default();
        f.apply(FaultRequest {
            conflicts: Some(1),
            gone_watches: Some(2),
            stall_watches: Some(1),
            ..Default::default()
        });
        assert_eq!(fault_for(&f, "get"), None, "no switch applies to a get");
        assert_eq!(fault_for(&f, "patch"), Some(Fault::Conflict {}));
        assert_eq!(fault_for(&f, "update"), None, "one conflict only");
        assert_eq!(f.state().conflicts, 0);
        // Tried in a fixed order: the stall first, then the two 410 events.
        assert_eq!(
            fault_for(&f, "watch"),
            Some(Fault::StallWatch { after_events: 0 })
        );
        assert_eq!(f.state().gone_watches, 2);
        assert_eq!(fault_for(&f, "watch"), Some(Fault::GoneWatchEvent {}));
        assert_eq!(fault_for(&f, "watch"), Some(Fault::GoneWatchEvent {}));
        assert_eq!(fault_for(&f, "watch"), None);
        // Setting a switch again replaces it; 0 turns it off.
        f.gone_status_next_watches(5);
        f.gone_status_next_watches(1);
        assert_eq!(f.state().gone_status_watches, 1);
        f.conflict_next_writes(3);
        f.conflict_next_writes(0);
        assert_eq!(fault_for(&f, "watch"), Some(Fault::GoneWatch {}));
        assert_eq!(fault_for(&f, "watch"), None);
        assert_eq!(fault_for(&f, "patch"), None);
        assert_eq!(f.state(), FaultState::default());
    }

    #[test]
    fn switches_come_before_the_schedule_and_leave_its_counters_alone() {
        let f = Faults::default();
        f.set_schedule(Schedule {
            seed: 0,
            rules: vec![Rule::new(Fault::CloseWatch { after_events: 1 })],
        })
        .unwrap();
        f.gone_status_next_watches(1);
        let (said, fault) = f.decide(&request("watch", "pods", "")).unwrap();
        assert_eq!(
            (said.as_str(), fault),
            ("goneStatusWatches: {\"goneWatch\":{}}", Fault::GoneWatch {})
        );
        let (said, _) = f.decide(&request("watch", "pods", "")).unwrap();
        assert!(said.starts_with("rule 0: "), "{said}");
        assert_eq!(f.injected(), 1, "only the schedule's own fault counts");
    }

    #[test]
    fn the_error_switch_reports_what_remains() {
        let f = Faults::default();
        f.inject_errors(ErrorFault::every_nth(503, 1).times(2));
        assert!(error_for(&f, "get", "pods", "").is_some());
        assert_eq!(f.state().error.unwrap().remaining, Some(1));
        f.clear_errors();
        assert!(error_for(&f, "get", "pods", "").is_none());
        assert_eq!(f.state().error, None);
    }
}
