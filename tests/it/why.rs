//! The decision ledger end to end: `kubeplug run` records every reconcile under its state
//! directory; `/api/why` and `kubeplug why --server` answer from the running host, after
//! `kubectl scale` name the scale and each plugin's decision on it, still do after the host
//! restarts, and `kubeplug why --state-dir` reads the same history once the host has stopped.

use crate::common::host_process::HostProcess;
use crate::common::{has_kubectl, http, kubectl, plugin};
use std::process::Command;
use std::time::{Duration, Instant};

fn why(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .arg("why")
        .args(args)
        .env_remove("KUBEPLUG_STATE_DIR")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubeplug run --embedded` on `plugins` with its ledger in `state_dir`, served and its
/// plugins loaded (their first compile may be slow beside other tests): it and its address.
fn serve(plugins: &std::path::Path, state_dir: &str) -> (HostProcess, String) {
    let mut host = HostProcess::start(
        plugins,
        &["--listen", "127.0.0.1:0", "--state-dir", state_dir],
    );
    assert!(
        host.saw_within("dashboard: http://", Duration::from_secs(300)),
        "{}",
        host.seen
    );
    assert!(
        host.seen.contains("running; stop with")
            || host.saw_within("running; stop with", Duration::from_secs(300)),
        "{}",
        host.seen
    );
    let addr = host
        .logged("dashboard: http://", "http://")
        .trim_end_matches('/')
        .to_string();
    (host, addr)
}

#[test]
fn why_answers_from_a_running_host_and_from_a_stopped_ones_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["image-pinner", "sample-controller", "change-logger"] {
        std::fs::copy(plugin(name), dir.path().join(format!("{name}.wasm"))).unwrap();
        std::fs::copy(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("samples/policies/{name}.policy.yaml")),
            dir.path().join(format!("{name}.policy.yaml")),
        )
        .unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let (mut host, addr) = serve(dir.path(), state_dir);

    // The embedded cluster's demo/web runs nginx:latest: the pinner patches it.
    let path = "/api/why?kind=Deployment&namespace=demo&name=web";
    let deadline = Instant::now() + Duration::from_secs(300);
    let report = loop {
        let (code, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(code, 200, "{body}");
        let report: serde_json::Value = serde_json::from_str(&body).unwrap();
        let patched = report["entries"].as_array().unwrap().iter().any(|e| {
            e["plugin"] == "image-pinner"
                && e["actions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["action"] == "patch" && a["decision"] == "executed")
        });
        if patched {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "no executed patch recorded: {body}\n{}",
            host.seen
        );
        host.saw_within("never", Duration::from_millis(100));
    };
    let entry = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["writes"].as_array().is_some_and(|w| !w.is_empty()))
        .expect("the patch's write is recorded");
    assert_eq!(entry["object"]["kind"], "Deployment");
    assert_eq!(entry["digest"].as_str().unwrap().len(), 64, "{entry}");
    assert!(entry["resourceVersion"].is_string(), "{entry}");
    assert_eq!(entry["writes"][0]["change"], "patched", "{entry}");
    assert!(entry["writes"][0]["resourceVersion"].is_string(), "{entry}");

    // What queued it: its addition (the watch event, at the version the plugin saw, or the
    // plugin's start queuing every cached key, which names no version).
    assert_eq!(entry["triggers"][0]["reason"], "added", "{entry}");
    let rv_after = &entry["triggers"][0]["rvAfter"];
    assert!(
        rv_after.is_null() || *rv_after == entry["resourceVersion"],
        "{entry}"
    );

    // What a plugin read through host imports: sample-controller looks up the example Foo's
    // Deployment by name and by its label.
    let path = "/api/why?kind=Foo&namespace=crd-demo&name=example-foo";
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (code, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(code, 200, "{body}");
        let report: serde_json::Value = serde_json::from_str(&body).unwrap();
        let read = report["entries"].as_array().unwrap().iter().any(|e| {
            e["plugin"] == "sample-controller"
                && e["reads"].as_array().is_some_and(|r| {
                    r.iter().any(|r| {
                        r.as_str()
                            .unwrap()
                            .starts_with("Deployment crd-demo/example-foo@")
                    })
                })
        });
        if read {
            break;
        }
        assert!(Instant::now() < deadline, "no read recorded: {body}");
        host.saw_within("never", Duration::from_millis(100));
    }

    // Names are checked before they reach the index.
    let (code, body) = http(
        &addr,
        "GET",
        "/api/why?kind=Deployment&namespace=demo&name=a/b",
        &[],
        "",
    );
    assert_eq!(code, 400, "{body}");

    // kubectl's spelling, asked of the running host.
    let server = format!("http://{addr}");
    let (ok, out, err) = why(&["-n", "demo", "deploy/web", "--server", &server]);
    assert!(ok, "{err}");
    assert!(out.contains(" image-pinner ("), "{out}");
    assert!(
        out.contains("patch Deployment demo/web → executed"),
        "{out}"
    );
    let (ok, json, err) = why(&[
        "-n",
        "demo",
        "deploy/web",
        "--server",
        &server,
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let asked: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(!asked["entries"].as_array().unwrap().is_empty(), "{json}");

    // The running host holds its ledger: reading the file says to ask the host.
    let (ok, _, err) = why(&["-n", "demo", "deploy/web", "--state-dir", state_dir]);
    assert!(!ok && err.contains("--server"), "{err}");

    // `kubectl scale`, as in the demo: the scale is the trigger of each plugin's reconcile.
    let scaled = has_kubectl();
    if scaled {
        kubectl(
            &host.kubeconfig(),
            &["-n", "demo", "scale", "deploy/web", "--replicas=3"],
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (ok, out, err) = why(&["deploy/demo/web", "--server", &server]);
            assert!(ok, "{err}");
            if out.contains("/spec/replicas 1→3")
                && out.contains("event Deployment demo/web → executed")
            {
                assert!(out.contains(" change-logger ("), "{out}");
                assert!(out.contains(" by kubectl"), "{out}");
                break;
            }
            assert!(Instant::now() < deadline, "no scale recorded:\n{out}");
            host.saw_within("never", Duration::from_millis(200));
        }
    }

    // A restarted host keeps the history: the scale is still there.
    host.stop();
    let (host, addr) = serve(dir.path(), state_dir);
    let (ok, out, err) = why(&["deploy/demo/web", "--server", &format!("http://{addr}")]);
    assert!(ok, "{err}");
    assert!(
        out.contains("patch Deployment demo/web → executed"),
        "{out}"
    );
    if scaled {
        assert!(out.contains("/spec/replicas 1→3"), "{out}");
    }

    host.stop();
    let (ok, out, err) = why(&[
        "-n",
        "demo",
        "deployments/web",
        "--state-dir",
        state_dir,
        "--plugin",
        "image-pinner",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("patch Deployment demo/web → executed"),
        "{out}"
    );
    let (ok, out, _) = why(&[
        "-n",
        "demo",
        "deploy/web",
        "--state-dir",
        state_dir,
        "--plugin",
        "someone-else",
    ]);
    assert!(
        ok && out.starts_with("no reconcile of Deployment demo/web is recorded"),
        "{out}"
    );
}
