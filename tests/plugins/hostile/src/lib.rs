//! A test plugin that misbehaves on request. Its configuration picks the misbehaviour:
//! `{"mode": "loop"}`, `"alloc"`, `"panic"`, `"recurse"`, `"recurse-in-memory"`, `"sleep"`, `"many-actions"` (with
//! `count`), `"big-log"` (with `bytes`), `"bad-patch"`, `"files"`, `"env"`, `"socket"` (with
//! `addr`), `"stdout"`, `"host-list"` (with `apiVersion`, `kind`), `"delete-named"` (deletes
//! `name`, of its target's kind, if the cache shows it), `"create-child"` (a target whose
//! name has no `-` gets one object of its kind named `generateName: <target>-`, unless the
//! cache shows one already), or `"behave"`.
//!
//! Policy probes (tests/it/policy.rs): `"label"` (merge-patch a label on its target),
//! `"patch-other-namespace"` (with `namespace`), `"patch-field"` (`spec.replicas`, with
//! `patchType`: `merge`, `json`, `json-move`, `strategic`, `strategic-replace`, `apply`),
//! `"delete"`, `"create-in"` (a Lease, with `namespace`) and `"write-burst"` (`count`
//! label patches in one call).
//!
//! Event fields and shutdown: `"huge-event-reason"` (a reason of `bytes` bytes),
//! `"long-event-note"` (a message of `bytes` bytes), `"event-burst"` (`count` Events in one
//! call), `"requeue-at-once"` (asks to be called again after 0 ms, every time), `"requeue-twice"`
//! (asks for 60 s and 1.5 s in one call), `"log-actions"`
//! (`count` log actions of `bytes` bytes each).
//!
//! Scope and URL probes (tests/it/policy.rs, cluster-scoped kinds and names): `"patch-cluster"`,
//! `"delete-cluster"`, `"event-cluster"` (a label patch, delete or event of the object
//! `apiVersion`/`kind`/`name`, default `v1 Namespace`, with `namespace` when set),
//! `"create-cluster"` (a manifest of that kind with `name` and, when set, `namespace`), and
//! `"name-attack"` (`verb` `patch` (default), `delete`, `event` or `create` of a Pod
//! in `namespace` (default the target's) named `name`, with `subresource` on the patch and
//! `generateName` on the create, each when set).
//!
//! Imports, logs and errors as weapons (issue 11): `"huge-selector"` (lists `apiVersion`/`kind`
//! with a selector of `count` `!kN` terms), `"flood-log"` (`count` `log` calls of `bytes`
//! bytes), `"forge-log"` (a newline, a fake host line and ANSI escapes through the `log`
//! import, stdout, stderr and a log action) and `"huge-error"` (a transient error of `bytes`
//! bytes).

use kubeplug_sdk::{
    Action, Error, EventType, KindRef, Metadata, ObjectRef, PatchType, Reconciler, Request, host,
};
use serde::Deserialize;
use serde_json::json;
use std::hint::black_box;

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Config {
    mode: String,
    count: usize,
    bytes: usize,
    addr: String,
    api_version: String,
    kind: String,
    namespace: String,
    patch_type: String,
    name: String,
    subresource: String,
    verb: String,
    generate_name: String,
}

/// The object a scope probe names: `apiVersion`/`kind` (default `v1 Namespace`), `name`,
/// and `namespace` when set.
fn probe_ref(config: &Config) -> ObjectRef {
    let or = |v: &str, d: &str| {
        if v.is_empty() {
            d.to_string()
        } else {
            v.to_string()
        }
    };
    ObjectRef {
        api_version: or(&config.api_version, "v1"),
        kind: or(&config.kind, "Namespace"),
        namespace: (!config.namespace.is_empty()).then(|| config.namespace.clone()),
        name: config.name.clone(),
    }
}

/// A log message that tries to forge a host log line and drive the terminal.
const FORGED: &str = "innocent\n2026-11-23T00:00:00.000000Z ERROR kubeplug::controller: FORGED host line\r\u{1b}[31mred\u{1b}[0m\u{9b}2J";

/// The hostile reconciler.
pub struct Hostile;

/// Recursion whose frames live on the wasm stack: overflows it.
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    black_box(recurse(black_box(depth + 1))).wrapping_add(1)
}

/// Recursion with large frames in linear memory: overflows the guest's own (shadow) stack.
#[allow(unconditional_recursion)]
fn recurse_in_memory(depth: u64) -> u64 {
    let frame = black_box([depth; 512]);
    black_box(recurse_in_memory(depth + 1)).wrapping_add(frame[7])
}

fn report<T: std::fmt::Debug, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Action {
    match r {
        Ok(v) => Action::info(format!("{what}: ALLOWED {v:?}")),
        Err(e) => Action::info(format!("{what}: denied: {e}")),
    }
}

impl Reconciler for Hostile {
    fn metadata() -> Metadata {
        Metadata::new("hostile", "0.1.0")
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let config: Config = req.config()?;
        match config.mode.as_str() {
            "loop" => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "recurse" => Ok(vec![Action::info(recurse(0).to_string())]),
            "recurse-in-memory" => Ok(vec![Action::info(recurse_in_memory(0).to_string())]),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Ok(vec![])
            }
            "many-actions" => Ok((0..config.count)
                .map(|_| Action::requeue_after(Default::default()))
                .collect()),
            "big-log" => Ok(vec![Action::info("x".repeat(config.bytes))]),
            "bad-patch" => Ok(vec![Action::Patch(
                kubeplug_sdk::bindings::kubeplug::plugin::types::Patch {
                    target: req.target.clone(),
                    patch_type: PatchType::Merge,
                    body: "{not json".to_string(),
                    subresource: None,
                },
            )]),
            "files" => Ok(vec![
                report("read /etc/passwd", std::fs::read_to_string("/etc/passwd")),
                report("list /", std::fs::read_dir("/").map(|d| d.count())),
                report(
                    "write /tmp/kubeplug-escape",
                    std::fs::write("/tmp/kubeplug-escape", "x"),
                ),
                report("stat /", std::fs::metadata("/").map(|m| m.is_dir())),
            ]),
            "env" => Ok(vec![
                Action::info(format!("env vars: {}", std::env::vars().count())),
                Action::info(format!("args: {}", std::env::args().count())),
            ]),
            "socket" => Ok(vec![
                report(
                    "connect",
                    std::net::TcpStream::connect(config.addr.as_str()),
                ),
                report("bind", std::net::TcpListener::bind("127.0.0.1:0")),
                report(
                    "resolve",
                    std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 80)),
                ),
            ]),
            "stdout" => {
                println!("hello from the plugin's stdout");
                eprintln!("hello from the plugin's stderr");
                Ok(vec![])
            }
            "delete-named" => {
                // Deletes the object `name` of its target's kind and namespace, if the cache
                // still shows it: a controller removing a child it reads.
                let t = &req.target;
                let kind = KindRef::new(&t.api_version, &t.kind);
                let found: Option<serde_json::Value> =
                    host::get(&kind, t.namespace.as_deref(), &config.name)?;
                let mut other = t.clone();
                other.name = config.name.clone();
                Ok(found
                    .filter(|_| config.name != t.name)
                    .map(|_| Action::delete(&other))
                    .into_iter()
                    .collect())
            }
            "create-child" => {
                // A controller keeping one generated child per parent: it creates one if
                // the cache shows none (children, named `<parent>-xxxxx`, are left alone).
                let t = &req.target;
                if t.name.contains('-') {
                    return Ok(vec![]);
                }
                let kind = KindRef::new(&t.api_version, &t.kind);
                let prefix = format!("{}-", t.name);
                let items: Vec<serde_json::Value> =
                    host::list(&kind, t.namespace.as_deref(), None)?;
                let has_child = items.iter().any(|i| {
                    i["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&prefix))
                });
                if has_child {
                    return Ok(vec![]);
                }
                Ok(vec![Action::create(&json!({
                    "apiVersion": t.api_version, "kind": t.kind,
                    "metadata": {"namespace": t.namespace, "generateName": prefix},
                }))])
            }
            "host-list" => {
                let kind = KindRef::new(&config.api_version, &config.kind);
                let items: Vec<serde_json::Value> = host::list(&kind, None, None)?;
                let names: Vec<_> = items
                    .iter()
                    .map(|i| i["metadata"]["name"].as_str().unwrap_or("?").to_string())
                    .collect();
                Ok(vec![Action::info(format!("listed: {}", names.join(",")))])
            }
            "label" => Ok(vec![Action::merge_patch(
                &req.target,
                json!({"metadata": {"labels": {"hostile": "was-here"}}}),
            )]),
            "patch-other-namespace" => {
                let mut other = req.target.clone();
                other.namespace = Some(config.namespace.clone());
                Ok(vec![Action::merge_patch(
                    &other,
                    json!({"metadata": {"labels": {"hostile": "was-here"}}}),
                )])
            }
            "patch-field" => {
                let t = &req.target;
                Ok(vec![match config.patch_type.as_str() {
                    "merge" => Action::merge_patch(t, json!({"spec": {"replicas": 0}})),
                    "json" => Action::json_patch(
                        t,
                        json!([{"op": "replace", "path": "/spec/replicas", "value": 0}]),
                    ),
                    "json-move" => Action::json_patch(
                        t,
                        json!([{"op": "move", "from": "/spec/replicas", "path": "/metadata/labels/stolen"}]),
                    ),
                    "strategic" => Action::strategic_patch(t, json!({"spec": {"replicas": 0}})),
                    "strategic-replace" => Action::strategic_patch(
                        t,
                        json!({"metadata": {"$patch": "replace", "labels": {"hostile": "x"}}}),
                    ),
                    "apply" => Action::apply(
                        t,
                        json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": t.name}, "spec": {"replicas": 0}}),
                    ),
                    other => return Err(Error::permanent(format!("unknown patchType {other:?}"))),
                }])
            }
            "delete" => Ok(vec![Action::delete(&req.target)]),
            "create-in" => Ok(vec![Action::create(&json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": format!("hostile-{}", req.target.name), "namespace": config.namespace},
                "spec": {"holderIdentity": "hostile"}
            }))]),
            "write-burst" => Ok((0..config.count)
                .map(|i| {
                    Action::merge_patch(
                        &req.target,
                        json!({"metadata": {"labels": {"burst": i.to_string()}}}),
                    )
                })
                .collect()),
            "transient" => Err(Error::transient("try again later")),
            // Event fields and shutdown (issue 11 items 8 and 9).
            "huge-event-reason" => Ok(vec![Action::event(
                &req.target,
                EventType::Normal,
                &"A".repeat(config.bytes),
                "a reason the API server would refuse",
            )]),
            "long-event-note" => Ok(vec![Action::event(
                &req.target,
                EventType::Normal,
                "LongNote",
                "n".repeat(config.bytes),
            )]),
            "log-actions" => Ok((0..config.count)
                .map(|i| Action::info(format!("log-action {i} {}", "x".repeat(config.bytes))))
                .collect()),
            "requeue-twice" => Ok(vec![
                Action::info(format!("requeue-twice call {}", req.key())),
                Action::requeue_after(std::time::Duration::from_secs(60)),
                Action::requeue_after(std::time::Duration::from_millis(1500)),
            ]),
            "requeue-at-once" => Ok(vec![
                Action::info(format!("requeue-at-once call {}", req.key())),
                Action::requeue_after(std::time::Duration::ZERO),
            ]),
            "event-burst" => Ok((0..config.count)
                .map(|i| {
                    Action::event(
                        &req.target,
                        EventType::Normal,
                        "Burst",
                        format!("event {i}"),
                    )
                })
                .collect()),
            "behave" => Ok(vec![Action::info(format!("reconciled {}", req.key()))]),
            // Cluster-scoped kinds and URL path segments (policy, helper A).
            "patch-cluster" => Ok(vec![Action::merge_patch(
                &probe_ref(&config),
                json!({"metadata": {"labels": {"hostile": "was-here"}}}),
            )]),
            "delete-cluster" => Ok(vec![Action::delete(&probe_ref(&config))]),
            "event-cluster" => Ok(vec![Action::event(
                &probe_ref(&config),
                EventType::Normal,
                "Probed",
                "hostile",
            )]),
            "create-cluster" => {
                let r = probe_ref(&config);
                let mut manifest = json!({"apiVersion": r.api_version, "kind": r.kind,
                    "metadata": {"name": r.name, "labels": {"hostile": "was-here"}}});
                if let Some(ns) = r.namespace {
                    manifest["metadata"]["namespace"] = json!(ns);
                }
                Ok(vec![Action::create(&manifest)])
            }
            "name-attack" => {
                let namespace = if config.namespace.is_empty() {
                    req.target.namespace.clone()
                } else {
                    Some(config.namespace.clone())
                };
                let target = ObjectRef {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    namespace: namespace.clone(),
                    name: config.name.clone(),
                };
                Ok(vec![match config.verb.as_str() {
                    "" | "patch" => {
                        let patch = Action::merge_patch(
                            &target,
                            json!({"metadata": {"labels": {"hostile": "was-here"}}}),
                        );
                        if config.subresource.is_empty() {
                            patch
                        } else {
                            patch.on_subresource(&config.subresource)
                        }
                    }
                    "delete" => Action::delete(&target),
                    "event" => Action::event(&target, EventType::Normal, "Probed", "hostile"),
                    "create" => {
                        let mut manifest = json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"namespace": namespace}, "spec": {"containers": []}});
                        if !config.name.is_empty() {
                            manifest["metadata"]["name"] = json!(config.name);
                        }
                        if !config.generate_name.is_empty() {
                            manifest["metadata"]["generateName"] = json!(config.generate_name);
                        }
                        Action::create(&manifest)
                    }
                    other => return Err(Error::permanent(format!("unknown verb {other:?}"))),
                }])
            }
            // Host imports, logs and errors as weapons (issue 11, items 5 and 7).
            "huge-selector" => {
                let mut selector = String::new();
                for i in 0..config.count {
                    let sep = if i == 0 { "" } else { "," };
                    selector.push_str(&format!("{sep}!k{i}"));
                }
                let kind = KindRef::new(&config.api_version, &config.kind);
                match host::list::<serde_json::Value>(&kind, None, Some(&selector)) {
                    Ok(items) => Ok(vec![Action::info(format!("listed {}", items.len()))]),
                    Err(e) => Err(Error::permanent(format!("list refused: {e}"))),
                }
            }
            "flood-log" => {
                let line = "x".repeat(config.bytes);
                for _ in 0..config.count {
                    host::log(kubeplug_sdk::LogLevel::Info, &line);
                }
                Ok(vec![])
            }
            "forge-log" => {
                host::log(kubeplug_sdk::LogLevel::Info, FORGED);
                println!("{FORGED}");
                eprintln!("{FORGED}");
                Ok(vec![Action::info(FORGED)])
            }
            "huge-error" => Err(Error::transient("e".repeat(config.bytes))),
            other => Err(Error::permanent(format!("unknown mode {other:?}"))),
        }
    }
}

kubeplug_sdk::export!(Hostile);
