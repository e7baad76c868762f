//! Runs a plugin offline to a fixed point, with or without one perturbation, and judges the
//! perturbed run against the fault-free one: it must reach a fixed point, reach the same
//! final state, and a duplicated event must not change anything a second time.
//!
//! A fixed point is a call whose writes change nothing (no write at all, patches to the same
//! content, deletes of the gone, creates of names that exist). Events, logs and requeues are
//! not effects on the state: a duplicated event may repeat them (the host's Events aggregate),
//! and so may a create of a fixed name (AlreadyExists is done); a second object from the same
//! generateName, or a patch that changes the object again, may not.

use super::perturbation::Perturbation;
use super::world::{Effect, Key, World, comparable};
use crate::contract::{Action, Reason};
use serde_json::Value;
use std::collections::BTreeMap;

/// Calls made before a run that keeps writing is said not to converge.
pub const MAX_CALLS: usize = 10;

/// One call's input: what the host would hand the plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The object (as last seen, when `deleted`).
    pub object: Value,
    /// The object is gone.
    pub deleted: bool,
    /// The version last reconciled.
    pub previous: Option<Value>,
    /// The objects the plugin can get and list (the object among them unless deleted).
    pub reads: Vec<Value>,
    /// Why the call is made.
    pub reason: Reason,
    /// The attempt number.
    pub attempt: u32,
}

/// A plugin as the engine calls it.
pub trait Reconciler {
    /// One call: the plugin's actions, or why it failed.
    fn reconcile(&self, call: Call) -> impl Future<Output = Result<Vec<Action>, String>>;
}

/// Where a run starts: a golden case.
#[derive(Debug, Clone)]
pub struct Start {
    /// The object and what it reads.
    pub world: World,
    /// The reconciled object's key.
    pub target: Key,
    /// The version last reconciled, for the first call.
    pub previous: Option<Value>,
}

/// What a run did, call by call.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Per call: the world it started from, how many writes it returned, and what it created.
    pub calls: Vec<CallTrace>,
    /// The state at the end.
    pub last: World,
}

/// One call of a run.
#[derive(Debug, Clone)]
pub struct CallTrace {
    /// The world before the call.
    pub before: World,
    /// The write actions (patch, create, delete) it returned.
    pub writes: usize,
    /// Whether its writes changed the world.
    pub changed: bool,
    /// The objects it created.
    pub created: Vec<Key>,
}

/// A plugin that does not survive a perturbation (or has no fixed point at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Finding {
    /// Still writing after [`MAX_CALLS`] calls.
    #[error("does not converge{after}: still changing the state after {MAX_CALLS} calls ({last})")]
    NoFixedPoint {
        /// ` after PERTURBATION`, or empty for the fault-free run.
        after: String,
        /// What the last call did.
        last: String,
    },
    /// A duplicated event had an effect the first delivery had already had.
    #[error("not idempotent: {perturbation} {what}")]
    NotIdempotent {
        /// The duplicate delivery.
        perturbation: String,
        /// What its second call did again.
        what: String,
    },
    /// A fixed point, but not the fault-free run's.
    #[error(
        "does not converge after {perturbation}: the final state differs from the fault-free run's: {diff}"
    )]
    Diverges {
        /// What was perturbed.
        perturbation: String,
        /// How the final states differ.
        diff: String,
    },
}

/// Runs from `start` to a fixed point, applying `fault` at its call.
pub async fn run<R: Reconciler>(
    plugin: &R,
    start: &Start,
    fault: Option<&Perturbation>,
) -> Result<Trace, Finding> {
    let mut world = start.world.clone();
    let mut trace = Trace::default();
    let mut previous = start.previous.clone();
    let mut last_seen = world.get(&start.target).cloned().unwrap_or(Value::Null);
    let (mut retry, mut attempt) = (false, 1);
    let mut last = String::new();
    for number in 1..=MAX_CALLS {
        let at_fault = fault.filter(|f| f.call() == number);
        let call = input(
            &world,
            &trace,
            start,
            at_fault,
            &mut last_seen,
            &previous,
            retry,
            attempt,
        );
        let mut record = CallTrace {
            before: world.clone(),
            writes: 0,
            changed: false,
            created: Vec::new(),
        };
        let actions = match plugin.reconcile(call.clone()).await {
            Ok(actions) => actions,
            Err(why) => {
                last = format!("call {number} failed: {}", error_line(&why));
                trace.calls.push(record);
                (retry, attempt) = (true, attempt + 1);
                continue;
            }
        };
        let limit = match at_fault {
            Some(Perturbation::Crash { after, .. }) => *after,
            _ => usize::MAX,
        };
        let (effects, failed) = apply(&mut world, &actions, limit, &start.target);
        record.writes = actions.iter().filter(|a| is_write(a)).count();
        record.changed = effects.iter().any(Effect::changed);
        record.created = created(&effects);
        if let Some(Perturbation::Duplicate { .. }) = at_fault {
            let again =
                plugin
                    .reconcile(call.clone())
                    .await
                    .map_err(|why| Finding::NotIdempotent {
                        perturbation: at_fault.map(ToString::to_string).unwrap_or_default(),
                        what: format!("failed the second time: {}", error_line(&why)),
                    })?;
            let (second, _) = apply(&mut world, &again, usize::MAX, &start.target);
            if let Some(what) = repeated(&effects, &second) {
                return Err(Finding::NotIdempotent {
                    perturbation: at_fault.map(ToString::to_string).unwrap_or_default(),
                    what,
                });
            }
        }
        previous = (!call.deleted).then(|| call.object.clone());
        last = describe(number, &effects, failed.as_deref());
        // A perturbed call is never the last: the host delivers the fresh state after it
        // (the cache catches up, the created child appears, the crashed call is retried).
        let crashed = matches!(at_fault, Some(Perturbation::Crash { .. }));
        let fixed = !record.changed && failed.is_none() && at_fault.is_none();
        trace.calls.push(record);
        if fixed {
            trace.last = world;
            return Ok(trace);
        }
        (retry, attempt) = if failed.is_some() || crashed {
            (true, attempt + 1)
        } else {
            (false, 1)
        };
    }
    Err(Finding::NoFixedPoint {
        after: fault.map(|f| format!(" after {f}")).unwrap_or_default(),
        last,
    })
}

/// The input of the next call, perturbed when `fault` strikes it.
#[allow(clippy::too_many_arguments)]
fn input(
    world: &World,
    trace: &Trace,
    start: &Start,
    fault: Option<&Perturbation>,
    last_seen: &mut Value,
    previous: &Option<Value>,
    retry: bool,
    attempt: u32,
) -> Call {
    let before = trace.calls.last().map(|c| &c.before);
    let mut view: BTreeMap<Key, Value> = world.objects().clone();
    match (fault, before) {
        (Some(Perturbation::StaleObject { .. }), Some(before)) => {
            match before.get(&start.target) {
                Some(old) => view.insert(start.target.clone(), old.clone()),
                None => view.remove(&start.target),
            };
        }
        (Some(Perturbation::StaleReads { .. }), Some(before)) => {
            let current = view.remove(&start.target);
            view = before.objects().clone();
            view.remove(&start.target);
            if let Some(current) = current {
                view.insert(start.target.clone(), current);
            }
        }
        (Some(Perturbation::NotVisible { hidden, .. }), _) => {
            for key in hidden {
                view.remove(key);
            }
        }
        _ => {}
    }
    let object = view.get(&start.target).cloned();
    if let Some(object) = &object {
        *last_seen = object.clone();
    }
    let deleted = object.is_none();
    let reason = if deleted {
        Reason::Deleted
    } else if retry {
        Reason::Retry
    } else if trace.calls.is_empty() {
        if previous.is_some() {
            Reason::Changed
        } else {
            Reason::Added
        }
    } else if previous.as_ref().map(comparable) != object.as_ref().map(comparable) {
        Reason::Changed
    } else {
        Reason::Requeue
    };
    Call {
        object: last_seen.clone(),
        deleted,
        previous: previous.clone(),
        reads: view.into_values().collect(),
        reason,
        attempt,
    }
}

fn is_write(action: &Action) -> bool {
    matches!(
        action,
        Action::Patch { .. } | Action::Create { .. } | Action::Delete { .. }
    )
}

/// Applies at most `limit` writes of `actions`, stopping at the first the API server would
/// refuse: their effects, and the refusal.
fn apply(
    world: &mut World,
    actions: &[Action],
    limit: usize,
    target: &Key,
) -> (Vec<Effect>, Option<String>) {
    let mut effects = Vec::new();
    for action in actions.iter().filter(|a| is_write(a)).take(limit) {
        match world.apply(action, target.namespace.as_deref()) {
            Some(Ok(effect)) => effects.push(effect),
            Some(Err(refused)) => return (effects, Some(refused.to_string())),
            None => {}
        }
    }
    (effects, None)
}

fn created(effects: &[Effect]) -> Vec<Key> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Created { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

/// What the second delivery of an event did again: a second object from the generateName
/// the first delivery created from, a create the first did not make, or a change of the
/// state. A create of the same name again is not: the API server answers AlreadyExists,
/// which the host takes as done.
fn repeated(first: &[Effect], second: &[Effect]) -> Option<String> {
    for effect in second {
        match effect {
            Effect::Created {
                key,
                generate_name: Some(prefix),
            } => {
                let from_prefix = |effects: &[Effect]| -> Vec<String> {
                    effects
                        .iter()
                        .filter_map(|e| match e {
                            Effect::Created {
                                key: k,
                                generate_name: Some(p),
                            } if p == prefix
                                && k.kind == key.kind
                                && k.namespace == key.namespace =>
                            {
                                Some(k.name.clone())
                            }
                            _ => None,
                        })
                        .collect()
                };
                let earlier = from_prefix(first);
                if !earlier.is_empty() {
                    return Some(format!(
                        "created {} from generateName {prefix} twice ({}, then {})",
                        key.kind,
                        earlier.join(" and "),
                        from_prefix(second).join(" and ")
                    ));
                }
                return Some(format!("created {key}, which the first delivery did not"));
            }
            Effect::Created { key, .. } => {
                return Some(format!("created {key}, which the first delivery did not"));
            }
            Effect::Changed(key) => {
                return Some(format!(
                    "changed {key} again (a write whose effect depends on how often it runs)"
                ));
            }
            _ => {}
        }
    }
    None
}

/// What a call did, for a run that does not converge.
fn describe(number: usize, effects: &[Effect], failed: Option<&str>) -> String {
    let changes: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Changed(key) => Some(format!("changed {key}")),
            Effect::Created { key, .. } => Some(format!("created {key}")),
            _ => None,
        })
        .collect();
    let mut text = format!("call {number} ");
    text += &if changes.is_empty() {
        "changed nothing".to_string()
    } else {
        changes.join(", ")
    };
    if let Some(failed) = failed {
        text += &format!("; then {failed}");
    }
    text
}

/// The line of a failed call's report that says why (its last; the plugin's logs come first).
fn error_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text)
}

/// How two final states differ, shortly: objects only in one, and the first differing field
/// of each object in both. `None` when they are the same.
pub fn difference(expected: &World, actual: &World) -> Option<String> {
    let (e, a) = (expected.comparable(), actual.comparable());
    let mut parts = Vec::new();
    for (key, object) in &a {
        match e.get(key) {
            None => {
                let generated = object
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                    .map(|p| format!(" (one more from generateName {p})"))
                    .unwrap_or_default();
                parts.push(format!("an extra {key}{generated}"));
            }
            Some(expected) if expected != object => {
                let (path, want, got) = first_difference(expected, object, String::new());
                parts.push(format!(
                    "{key} differs at {path} ({}, not {})",
                    short(&got),
                    short(&want)
                ));
            }
            Some(_) => {}
        }
    }
    for key in e.keys().filter(|k| !a.contains_key(*k)) {
        parts.push(format!("{key} is missing"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The first JSON pointer where `a` and `b` differ, with the two values there.
fn first_difference(a: &Value, b: &Value, path: String) -> (String, Value, Value) {
    if let (Value::Object(x), Value::Object(y)) = (a, b) {
        let names: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
        for name in names {
            let (u, v) = (x.get(name), y.get(name));
            if u != v {
                let (u, v) = (
                    u.cloned().unwrap_or(Value::Null),
                    v.cloned().unwrap_or(Value::Null),
                );
                return first_difference(&u, &v, format!("{path}/{name}"));
            }
        }
    }
    if let (Value::Array(x), Value::Array(y)) = (a, b)
        && x.len() == y.len()
        && let Some(i) = (0..x.len()).find(|&i| x[i] != y[i])
    {
        return first_difference(&x[i], &y[i], format!("{path}/{i}"));
    }
    let path = if path.is_empty() { "/".into() } else { path };
    (path, a.clone(), b.clone())
}

fn short(value: &Value) -> String {
    let text = match value {
        Value::Null => "absent".to_string(),
        other => other.to_string(),
    };
    if text.chars().count() > 80 {
        text.chars().take(77).collect::<String>() + "..."
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{ObjectRef, PatchType};
    use serde_json::json;

    /// A test plugin: a pure function of the call.
    struct Fake(fn(&Call) -> Vec<Action>);

    impl Reconciler for Fake {
        async fn reconcile(&self, call: Call) -> Result<Vec<Action>, String> {
            Ok((self.0)(&call))
        }
    }

    fn start() -> Start {
        let web = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "shop"}, "data": {"n": "1"}});
        Start {
            target: Key::of(&web),
            world: World::new([web]),
            previous: None,
        }
    }

    fn target() -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    fn children(call: &Call) -> usize {
        call.reads
            .iter()
            .filter(|o| o["metadata"]["name"].as_str().unwrap().starts_with("web-"))
            .count()
    }

    fn pod(name: &str) -> Action {
        Action::Create {
            manifest: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}}),
        }
    }

    /// Labels its object and creates its Pod `web-0` unless it sees it: idempotent.
    fn good(call: &Call) -> Vec<Action> {
        let mut out = vec![Action::Patch {
            target: target(),
            patch_type: PatchType::Merge,
            subresource: None,
            body: json!({"metadata": {"labels": {"seen": "yes"}}}),
        }];
        if children(call) == 0 {
            out.push(pod("web-0"));
        }
        out.push(Action::Log {
            level: crate::contract::LogLevel::Info,
            message: "done".into(),
        });
        out
    }

    /// Creates a child from generateName unless it sees one.
    fn generated(call: &Call) -> Vec<Action> {
        if children(call) > 0 {
            return vec![];
        }
        vec![Action::Create {
            manifest: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"}}),
        }]
    }

    /// Adds "a" to its list with a JSON patch `add` unless the list holds it.
    fn appender(call: &Call) -> Vec<Action> {
        let items = call.object.pointer("/spec/items").and_then(Value::as_array);
        if items.is_some_and(|items| items.contains(&json!("a"))) {
            return vec![];
        }
        vec![Action::Patch {
            target: target(),
            patch_type: PatchType::Json,
            subresource: None,
            body: json!([{"op": "add", "path": "/spec/items/-", "value": "a"}]),
        }]
    }

    /// Writes a counter one higher than it read, every time.
    fn counter(call: &Call) -> Vec<Action> {
        let n: u64 = call.object["data"]["n"].as_str().unwrap().parse().unwrap();
        vec![Action::Patch {
            target: target(),
            patch_type: PatchType::Merge,
            subresource: None,
            body: json!({"data": {"n": (n + 1).to_string()}}),
        }]
    }

    /// Creates two children, a and b, then labels them: the label patch of b fails when a
    /// crash left b uncreated, and it creates b only when it sees neither.
    fn careless(call: &Call) -> Vec<Action> {
        if children(call) > 0 {
            return vec![];
        }
        vec![pod("web-a"), pod("web-b")]
    }

    async fn reference(plugin: &Fake) -> Trace {
        run(plugin, &start(), None).await.unwrap()
    }

    async fn check(plugin: &Fake, fault: Perturbation) -> Result<(), Finding> {
        let expected = reference(plugin).await;
        let trace = run(plugin, &start(), Some(&fault)).await?;
        match difference(&expected.last, &trace.last) {
            None => Ok(()),
            Some(diff) => Err(Finding::Diverges {
                perturbation: fault.to_string(),
                diff,
            }),
        }
    }

    #[tokio::test]
    async fn an_idempotent_plugin_survives_every_perturbation() {
        let plugin = Fake(good);
        let trace = reference(&plugin).await;
        assert_eq!(trace.calls.len(), 2);
        assert_eq!(trace.calls[0].writes, 2);
        assert!(!trace.calls[1].changed);
        let hidden = trace.calls[0].created.clone();
        for fault in [
            Perturbation::StaleObject { call: 2 },
            Perturbation::StaleReads { call: 2 },
            Perturbation::NotVisible { call: 2, hidden },
            Perturbation::Duplicate { call: 1 },
            Perturbation::Crash { call: 1, after: 1 },
        ] {
            check(&plugin, fault).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_generate_name_create_is_found_by_the_duplicate_and_the_invisible_child() {
        let plugin = Fake(generated);
        let err = check(&plugin, Perturbation::Duplicate { call: 1 })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "not idempotent: the same event delivered twice (call 1) created Pod from generateName web- twice (web-bbbbb, then web-bbbbc)"
        );
        let hidden = reference(&plugin).await.calls[0].created.clone();
        let err = check(&plugin, Perturbation::NotVisible { call: 2, hidden })
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "the final state differs from the fault-free run's: an extra Pod shop/web-bbbbc (one more from generateName web-)"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_fixed_name_created_twice_is_harmless() {
        check(&Fake(careless), Perturbation::Duplicate { call: 1 })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_crash_between_creates_is_found_when_the_rerun_does_not_finish_the_job() {
        let err = check(&Fake(careless), Perturbation::Crash { call: 1, after: 1 })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "does not converge after a crash between write actions 1 and 2 of call 1 and a re-run: the final state differs from the fault-free run's: Pod shop/web-b is missing"
        );
    }

    #[tokio::test]
    async fn a_stale_read_is_found_when_the_plugin_writes_what_it_derived_from_it() {
        let plugin = Fake(appender);
        let mut with_list = start();
        with_list.world = World::new([json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"items": []}})]);
        let expected = run(&plugin, &with_list, None).await.unwrap();
        assert_eq!(expected.calls.len(), 2);
        // Call 2, given the object of call 1, adds "a" a second time.
        let fault = Perturbation::StaleObject { call: 2 };
        let trace = run(&plugin, &with_list, Some(&fault)).await.unwrap();
        assert_eq!(
            difference(&expected.last, &trace.last).unwrap(),
            r#"ConfigMap shop/web differs at /spec/items (["a","a"], not ["a"])"#
        );
        // Its input twice: the second add changes the object again.
        let fault = Perturbation::Duplicate { call: 1 };
        let err = run(&plugin, &with_list, Some(&fault)).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("(call 1) changed ConfigMap shop/web again"),
            "{err}"
        );
        // A plugin that reads nothing stale is not disturbed by a stale read.
        check(&Fake(good), Perturbation::StaleObject { call: 2 })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_plugin_that_always_writes_has_no_fixed_point() {
        let err = run(&Fake(counter), &start(), None).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "does not converge: still changing the state after 10 calls (call 10 changed ConfigMap shop/web)"
        );
    }

    #[test]
    fn the_first_difference_is_named_by_its_path() {
        let (path, a, b) = first_difference(
            &json!({"spec": {"replicas": 1, "x": [1, 2]}}),
            &json!({"spec": {"replicas": 1, "x": [1, 3]}}),
            String::new(),
        );
        assert_eq!((path.as_str(), a, b), ("/spec/x/1", json!(2), json!(3)));
    }
}
