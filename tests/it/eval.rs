//! `kubeplug eval` end to end: the real binary, the built plugins, fixture manifests.

use crate::common;

use common::{fixture, plugin, test_plugin};
use serde_json::Value;
use std::process::{Command, Output};

fn eval(args: &[&str]) -> Output {
    eval_with_env(args, &[])
}

/// `kubeplug eval` with `env` set, and no call-limit variables but those.
fn eval_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .arg("eval")
        .args(args)
        .env("KUBEPLUG_CACHE_DIR", crate::common::compile_cache())
        .env_remove("KUBEPLUG_TIMEOUT_MS")
        .env_remove("KUBEPLUG_MEMORY_MIB")
        .envs(env.iter().copied())
        .output()
        .expect("run kubeplug")
}

fn eval_json(args: &[&str]) -> Value {
    let out = eval(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"))
}

fn eval_error(args: &[&str]) -> String {
    let out = eval(args);
    assert!(
        !out.status.success(),
        "eval should fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn actions_of(kind: &str, out: &Value) -> Vec<Value> {
    out["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == kind)
        .cloned()
        .collect()
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn image_pinner_patches_alpine_to_nginx_once() {
    let out = eval_json(&[
        "--plugin",
        s(&plugin("image-pinner")),
        "--object",
        s(&fixture("web-alpine.yaml")),
    ]);
    assert_eq!(out["plugin"]["name"], "image-pinner");
    assert_eq!(out["plugin"]["contract"], "0.1.0");
    let patches = actions_of("patch", &out);
    assert_eq!(patches.len(), 1, "{out:#}");
    let p = &patches[0];
    assert_eq!(p["patchType"], "strategic");
    assert_eq!(p["target"]["namespace"], "shop");
    assert_eq!(p["target"]["name"], "web");
    assert_eq!(
        p["body"]["spec"]["template"]["spec"]["containers"],
        serde_json::json!([{"name": "app", "image": "nginx:1.13"}])
    );
}

#[test]
fn image_pinner_does_nothing_when_already_pinned() {
    let out = eval_json(&[
        "--plugin",
        s(&plugin("image-pinner")),
        "--object",
        s(&fixture("web-pinned.yaml")),
    ]);
    assert_eq!(out["actions"], serde_json::json!([]));
}

#[test]
fn image_pinner_takes_its_target_from_config_text_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, r#"{"image": "nginx:1.25"}"#).unwrap();
    for config in [
        r#"{"image": "nginx:1.25"}"#.to_string(),
        format!("@{}", file.display()),
    ] {
        let out = eval_json(&[
            "--plugin",
            s(&plugin("image-pinner")),
            "--object",
            s(&fixture("web-pinned.yaml")),
            "--config",
            &config,
        ]);
        let patch = &actions_of("patch", &out)[0];
        assert_eq!(
            patch["body"]["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.25"
        );
    }
}

#[test]
fn change_logger_reports_both_replica_numbers() {
    let out = eval_json(&[
        "--plugin",
        s(&plugin("change-logger")),
        "--object",
        s(&fixture("web-alpine-3.yaml")),
        "--previous",
        s(&fixture("web-alpine.yaml")),
    ]);
    let logs: Vec<_> = actions_of("log", &out)
        .iter()
        .map(|l| l["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(logs, ["Deployment web updated - Replicas changed: 1 -> 3"]);
    let events = actions_of("event", &out);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "ReplicasChanged");
    assert_eq!(events[0]["eventType"], "Normal");
}

#[test]
fn change_logger_reports_additions_and_deletions() {
    let added = eval_json(&[
        "--plugin",
        s(&plugin("change-logger")),
        "--object",
        s(&fixture("web-alpine.yaml")),
    ]);
    assert_eq!(
        actions_of("log", &added)[0]["message"],
        "Deployment web added - Replicas: 1, Image: alpine"
    );
    let deleted = eval_json(&[
        "--plugin",
        s(&plugin("change-logger")),
        "--object",
        s(&fixture("web-alpine.yaml")),
        "--deleted",
    ]);
    assert_eq!(
        actions_of("log", &deleted)[0]["message"],
        "Deployment shop/web has been deleted"
    );
}

#[test]
fn cache_directory_is_visible_through_list() {
    let out = eval_json(&[
        "--plugin",
        s(&test_plugin("hostile")),
        "--object",
        s(&fixture("web-alpine.yaml")),
        "--config",
        r#"{"mode": "host-list", "apiVersion": "v1", "kind": "Pod"}"#,
        "--cache",
        s(&fixture("cache")),
    ]);
    assert_eq!(actions_of("log", &out)[0]["message"], "listed: db-1,web-1");
}

#[test]
fn reads_are_refused_without_a_cache() {
    let err = eval_error(&[
        "--plugin",
        s(&test_plugin("hostile")),
        "--object",
        s(&fixture("web-alpine.yaml")),
        "--config",
        r#"{"mode": "host-list", "apiVersion": "v1", "kind": "Pod"}"#,
    ]);
    assert!(err.contains("not granted"), "{err}");
}

#[test]
fn plugin_errors_exit_non_zero_with_the_reason() {
    let err = eval_error(&[
        "--plugin",
        s(&test_plugin("hostile")),
        "--object",
        s(&fixture("web-alpine.yaml")),
        "--config",
        r#"{"mode": "panic"}"#,
    ]);
    assert!(
        err.contains("panicked: hostile plugin panicked on purpose"),
        "{err}"
    );
}

#[test]
fn limits_are_taken_and_checked_as_kubeplug_run_takes_them() {
    let hostile = test_plugin("hostile");
    let object = fixture("web-alpine.yaml");
    let looping = [
        "--plugin",
        s(&hostile),
        "--object",
        s(&object),
        "--config",
        r#"{"mode": "loop"}"#,
    ];
    // run's environment variable sets eval's timeout too.
    let out = eval_with_env(&looping, &[("KUBEPLUG_TIMEOUT_MS", "50")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("timed out after 50ms"),
        "{err}"
    );
    // A memory limit the runtime could not give is refused, naming its cap, before the
    // plugin loads (it was silently lowered to 1 GiB before).
    let mut at_cap = looping.to_vec();
    at_cap.extend(["--memory-mib", "1024", "--timeout-ms", "50"]);
    let err = eval_error(&at_cap);
    assert!(err.contains("timed out after 50ms"), "{err}");
    let mut over = looping.to_vec();
    over.extend(["--memory-mib", "4096"]);
    let err = eval_error(&over);
    assert!(
        err.contains(
            "--memory-mib 4096 is not between 1 and 1024: 1024 MiB is the most memory the runtime gives one call's sandbox"
        ),
        "{err}"
    );
}

#[test]
fn clear_errors_for_bad_input() {
    let pinner = plugin("image-pinner");
    let object = fixture("web-alpine.yaml");
    let err = eval_error(&["--plugin", "/nonexistent/p.wasm", "--object", s(&object)]);
    assert!(
        err.contains("cannot read plugin /nonexistent/p.wasm"),
        "{err}"
    );
    let err = eval_error(&["--plugin", s(&pinner), "--object", "/nonexistent/o.yaml"]);
    assert!(err.contains("cannot read /nonexistent/o.yaml"), "{err}");
    let err = eval_error(&["--plugin", s(&pinner), "--object", s(&fixture("bad.yaml"))]);
    assert!(err.contains("bad.yaml is not valid YAML"), "{err}");
    let err = eval_error(&["--plugin", s(&object), "--object", s(&object)]);
    assert!(err.contains("is not a WebAssembly file"), "{err}");
    let err = eval_error(&[
        "--plugin",
        s(&test_plugin("future-contract")),
        "--object",
        s(&object),
    ]);
    assert!(
        err.contains("built for plugin contract 9.9.0, but this host supports 0.1.0"),
        "{err}"
    );
    let err = eval_error(&[
        "--plugin",
        s(&pinner),
        "--object",
        s(&object),
        "--config",
        "{nope",
    ]);
    assert!(err.contains("--config is not valid JSON"), "{err}");
}

#[test]
fn core_modules_are_refused_as_not_components() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("core.wasm");
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let err = eval_error(&[
        "--plugin",
        s(&module),
        "--object",
        s(&fixture("web-alpine.yaml")),
    ]);
    assert!(
        err.contains("is a core WebAssembly module, not a component"),
        "{err}"
    );
}

/// What a terminal could act on: escape sequences (C0 ESC, C1 CSI), carriage returns, bidi
/// overrides.
fn has_terminal_controls(text: &str) -> bool {
    text.contains(['\u{1b}', '\u{9b}', '\r', '\u{202e}'])
}

#[test]
fn plugin_text_reaches_the_terminal_escaped() {
    let args = |config: &'static str| {
        [
            "--plugin".to_string(),
            s(&test_plugin("hostile")).to_string(),
            "--object".to_string(),
            s(&fixture("web-alpine.yaml")).to_string(),
            "--config".to_string(),
            config.to_string(),
        ]
    };
    let forged = args(r#"{"mode": "forge-log"}"#);
    let out = eval(&forged.iter().map(String::as_str).collect::<Vec<_>>());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(!has_terminal_controls(&stdout), "stdout: {stdout}");
    assert!(!has_terminal_controls(&stderr), "stderr: {stderr}");
    // Every line carrying the plugin's text is one of the host's plugin events, never a bare
    // line that starts like a host line of its own.
    for line in stderr.lines().filter(|l| l.contains("FORGED")) {
        assert!(
            !line.starts_with("2026-11-23T00:00:00") && line.contains(" kubeplug::plugin: "),
            "a forged line reached stderr: {line}"
        );
    }
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        actions_of("log", &json)[0]["message"]
            .as_str()
            .unwrap()
            .contains("\u{9b}2J"),
        "the JSON still carries the plugin's text exactly: {json}"
    );
    // A 40 MiB error is neither printed whole nor with its control characters.
    let huge = args(r#"{"mode": "huge-error", "bytes": 41943040}"#);
    let out = eval(&huge.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!out.status.success());
    assert!(
        out.stderr.len() < 16 << 10,
        "stderr of {} bytes",
        out.stderr.len()
    );
}

#[test]
fn the_plugin_is_named_by_its_file_and_its_declared_name_is_only_shown() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my-pinner.wasm");
    std::fs::copy(test_plugin("pinner-v1"), &file).unwrap();
    let out = eval_json(&[
        "--plugin",
        s(&file),
        "--object",
        s(&fixture("web-alpine.yaml")),
    ]);
    assert_eq!(out["plugin"]["name"], "my-pinner", "{out:#}");
    assert_eq!(out["plugin"]["declared"], "pinner", "{out:#}");
    let bad = dir.path().join("My_Pinner.wasm");
    std::fs::copy(&file, &bad).unwrap();
    let out = eval(&[
        "--plugin",
        s(&bad),
        "--object",
        s(&fixture("web-alpine.yaml")),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("kubeplug run would not start this file") && stderr.contains("DNS-1123"),
        "{stderr}"
    );
}

/// `kubeplug test` with `args`: exit status and stdout.
fn kubeplug_test(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
        .arg("test")
        .args(args)
        .env("KUBEPLUG_CACHE_DIR", crate::common::compile_cache())
        .output()
        .expect("run kubeplug");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn yaml_output_is_the_json_output_and_recording_it_is_an_expectation() {
    let (pinner, object) = (plugin("image-pinner"), fixture("web-alpine.yaml"));
    let args = ["--plugin", s(&pinner), "--object", s(&object)];
    let json_out = eval_json(&args);
    let yaml = eval(&[&args[..], &["--format", "yaml"]].concat());
    assert!(yaml.status.success());
    let yaml_out: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&yaml.stdout)).unwrap();
    assert_eq!(yaml_out, json_out);

    let dir = tempfile::tempdir().unwrap();
    let expect = dir.path().join("web.expect.yaml");
    std::fs::write(&expect, &yaml.stdout).unwrap();
    let met = eval(&[&args[..], &["--expect", s(&expect)]].concat());
    let stderr = String::from_utf8_lossy(&met.stderr);
    assert!(met.status.success(), "{stderr}");
    assert!(stderr.contains("expectation met (2 actions)"), "{stderr}");
    assert!(met.stdout.is_empty());

    // Another image expected: exit 1, the two lines shown as a diff.
    let text = String::from_utf8_lossy(&yaml.stdout).replace("nginx:1.13", "nginx:1.14");
    std::fs::write(&expect, text).unwrap();
    let err = eval_error(&[&args[..], &["--expect", s(&expect)]].concat());
    assert!(
        err.contains("web.expect.yaml: the actions differ from the expectation"),
        "{err}"
    );
    // The patch's image line and the log line that names it differ; nothing else does.
    let changed = |mark: &str| -> Vec<&str> {
        err.lines()
            .filter(|l| l.starts_with(mark))
            .map(|l| l[2..].trim())
            .collect()
    };
    assert_eq!(changed("- ").len(), 2, "{err}");
    assert!(changed("- ").contains(&"- image: nginx:1.14"), "{err}");
    assert!(changed("+ ").contains(&"- image: nginx:1.13"), "{err}");

    // No action expected of a Deployment the pinner patches.
    std::fs::write(&expect, "actions: []\n").unwrap();
    let err = eval_error(&[&args[..], &["--expect", s(&expect)]].concat());
    assert!(err.contains("+ writes:"), "{err}");

    // A broken expectation is named before the plugin runs.
    std::fs::write(&expect, "actoins: []\n").unwrap();
    let err = eval_error(&[&args[..], &["--expect", s(&expect)]].concat());
    assert!(
        err.contains("web.expect.yaml") && err.contains("unknown key `actoins`"),
        "{err}"
    );
    let err = eval_error(&[&args[..], &["--expect", "/nonexistent/e.yaml"]].concat());
    assert!(
        err.contains("cannot read expectation /nonexistent/e.yaml"),
        "{err}"
    );
}

#[test]
fn kubeplug_test_runs_every_case_of_a_folder() {
    let pinner = plugin("image-pinner");
    let dir = tempfile::tempdir().unwrap();
    let case = |name: &str, object: &str, expect: Option<&str>| {
        std::fs::copy(
            fixture(object),
            dir.path().join(format!("{name}.object.yaml")),
        )
        .unwrap();
        if let Some(expect) = expect {
            std::fs::write(dir.path().join(format!("{name}.expect.yaml")), expect).unwrap();
        }
    };
    let recorded = eval(&[
        "--plugin",
        s(&pinner),
        "--object",
        s(&fixture("web-alpine.yaml")),
        "--format",
        "yaml",
    ]);
    case(
        "alpine",
        "web-alpine.yaml",
        Some(&String::from_utf8_lossy(&recorded.stdout)),
    );
    case("pinned", "web-pinned.yaml", Some("actions: []\n"));
    // The configuration of one case only: this one pins another image.
    case("configured", "web-pinned.yaml", Some("actions: []\n"));
    std::fs::write(
        dir.path().join("configured.config.json"),
        r#"{"image": "nginx:1.25"}"#,
    )
    .unwrap();
    let (ok, stdout, stderr) = kubeplug_test(&[s(dir.path()), "--plugin", s(&pinner)]);
    assert!(!ok, "{stdout}{stderr}");
    assert!(stdout.contains("ok   alpine"), "{stdout}");
    assert!(stdout.contains("ok   pinned"), "{stdout}");
    assert!(stdout.contains("FAIL configured"), "{stdout}");
    assert!(
        stdout.contains("+ writes:") && stdout.contains("nginx:1.25"),
        "{stdout}"
    );
    assert!(stdout.contains("2 passed, 1 failed"), "{stdout}");

    std::fs::remove_file(dir.path().join("configured.config.json")).unwrap();
    let (ok, stdout, stderr) = kubeplug_test(&[s(dir.path()), "--plugin", s(&pinner)]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");

    // A case without its expectation, an empty folder: errors that say what to add.
    case("orphan", "web-alpine.yaml", None);
    let (ok, _, stderr) = kubeplug_test(&[s(dir.path()), "--plugin", s(&pinner)]);
    assert!(!ok);
    assert!(
        stderr.contains("orphan.object.yaml has no expectation: record one with `kubeplug eval"),
        "{stderr}"
    );
    let empty = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = kubeplug_test(&[s(empty.path()), "--plugin", s(&pinner)]);
    assert!(!ok);
    assert!(
        stderr.contains("has no NAME.object.yaml / NAME.expect.yaml cases"),
        "{stderr}"
    );
}

/// `kubeplug new` (its scaffolds are tested with `kubeplug test`, whose tests are above).
#[path = "new.rs"]
mod new;

/// `kubeplug eval --from-cluster` against the embedded API server, objects made by kubectl:
/// the object and what the plugin reads come from the cluster (sample-controller sees its
/// Deployment and its status, so it creates nothing), `--save-case` writes a case that
/// `kubeplug test` passes, and what it reads is bounded (objects, MiB) and checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_cluster_takes_the_object_and_what_the_plugin_reads() {
    use std::path::Path;
    if !crate::common::has_kubectl() {
        return;
    }
    common::cluster::capture_logs();
    let sim = kubeplug_sim::Sim::builder()
        .crd_file(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sample-controller/crd.yaml"),
        )
        .status_delay(std::time::Duration::from_millis(20))
        .auto_create_namespaces(true)
        .start()
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let env = Env {
        kubeconfig: kubeconfig.clone(),
        compile_cache: crate::common::compile_cache(),
    };
    let kubectl = |args: &[&str], stdin: &str| {
        let out = env.run("kubectl", args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    kubectl(
        &["apply", "-f", "-"],
        "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata: {name: example-foo, namespace: capture}\nspec: {deploymentName: example-web, replicas: 2}\n",
    );
    let uid = kubectl(
        &[
            "get",
            "foo",
            "example-foo",
            "-n",
            "capture",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        "",
    );
    kubectl(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: example-web
  namespace: capture
  labels: {{app: nginx, controller: example-foo}}
  ownerReferences:
  - {{apiVersion: samplecontroller.k8s.io/v1alpha1, kind: Foo, name: example-foo, uid: "{uid}", controller: true, blockOwnerDeletion: true}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: nginx, controller: example-foo}}}}
  template:
    metadata: {{labels: {{app: nginx, controller: example-foo}}}}
    spec: {{containers: [{{name: nginx, image: "nginx:latest"}}]}}
"#
        ),
    );
    // An unrelated Deployment elsewhere is not read.
    kubectl(
        &[
            "create",
            "deployment",
            "elsewhere",
            "-n",
            "other",
            "--image=nginx",
        ],
        "",
    );
    common::cluster::eventually(
        std::time::Duration::from_secs(10),
        "the Deployment's status",
        || {
            sim.get("deployments", Some("capture"), "example-web")
                .and_then(|d| {
                    d.pointer("/status/availableReplicas")
                        .and_then(Value::as_i64)
                })
                == Some(2)
        },
    )
    .await;

    let plugin_file = plugin("sample-controller");
    let plugin_path = plugin_file.to_str().unwrap().to_string();
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--plugin", &plugin_path];
        args.extend(extra);
        env.run("kubeplug", &args, "")
    };
    let case = tmp.path().join("case");
    let out = eval(&[
        "--from-cluster",
        "foo/capture/example-foo",
        "--save-case",
        case.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions = json["actions"].as_array().unwrap();
    // The Deployment exists and is owned: no create, and the Foo's status is the
    // Deployment's, as read from the cluster.
    assert!(!actions.iter().any(|a| a["action"] == "create"), "{json}");
    let status = actions
        .iter()
        .find(|a| a["subresource"] == "status")
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(status["body"]["status"]["availableReplicas"], 2, "{json}");
    assert_eq!(json["target"]["namespace"], "capture");

    // The saved case: the object, the recording, what the plugin read, nothing else.
    let mut files: Vec<String> = walk(&case);
    files.sort();
    assert_eq!(
        files,
        [
            "cache/deployment-capture-example-web.yaml",
            "cache/foo-capture-example-foo.yaml",
            "example-foo.expect.yaml",
            "example-foo.object.yaml",
        ],
        "{stderr}"
    );
    let saved =
        std::fs::read_to_string(case.join("cache/deployment-capture-example-web.yaml")).unwrap();
    assert!(!saved.contains("managedFields"), "{saved}");
    let test = env.run(
        "kubeplug",
        &["test", case.to_str().unwrap(), "--plugin", &plugin_path],
        "",
    );
    let text = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success() && text.contains("1 passed, 0 failed"),
        "{text}"
    );
    // Without what it read, the same object gives another answer: the cache mattered.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let bare = eval(&[
        "--object",
        case.join("example-foo.object.yaml").to_str().unwrap(),
        "--cache",
        empty.to_str().unwrap(),
    ]);
    let bare: Value = serde_json::from_slice(&bare.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&bare.stderr)));
    assert!(
        bare["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"] == "create"),
        "{bare}"
    );

    // Bounds, each an error naming it. Objects: the Foo, itself again in the list, then
    // the Deployment is one too many.
    let err = |out: Output| {
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let text = err(eval(&[
        "--from-cluster",
        "foo/capture/example-foo",
        "--capture-max-objects",
        "2",
    ]));
    assert!(text.contains("more than 2 objects to read"), "{text}");
    // Bytes: two ConfigMaps of 600 KB, readable under a policy, are more than 1 MiB.
    let big = tmp.path().join("big.txt");
    std::fs::write(&big, "x".repeat(600_000)).unwrap();
    for name in ["big-1", "big-2"] {
        kubectl(
            &[
                "create",
                "configmap",
                name,
                "-n",
                "capture",
                &format!("--from-file=data={}", big.display()),
            ],
            "",
        );
    }
    let policy = tmp.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {name: sample-controller}\nspec:\n  namespaces: {names: [capture]}\n  reads: [{apiVersion: v1, kind: ConfigMap}]\n  rules:\n    - {apiVersion: samplecontroller.k8s.io/v1alpha1, kind: Foo, verbs: [patch-status]}\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let text = err(eval(&[
        "--from-cluster",
        "foo/capture/example-foo",
        "--policy",
        policy,
        "--capture-max-mib",
        "1",
    ]));
    assert!(text.contains("more than 1 MiB of answers"), "{text}");
    // Under that policy, it reads the ConfigMaps and not the Deployments (no write on them):
    // its lookup of its Foo's Deployment is refused, as `kubeplug run` would refuse it.
    let text = err(eval(&[
        "--from-cluster",
        "foo/capture/example-foo",
        "--policy",
        policy,
    ]));
    assert!(
        text.contains("reading apps/v1/Deployment is not granted to this plugin"),
        "{text}"
    );
    // The kind must be the one the plugin reconciles; the object must exist.
    let text = err(eval(&["--from-cluster", "deployment/capture/example-web"]));
    assert!(
        text.contains("is not the kind the plugin reconciles"),
        "{text}"
    );
    let text = err(eval(&[
        "--from-cluster",
        "foos.samplecontroller.k8s.io/capture/missing",
    ]));
    assert!(text.contains("capture/missing not found"), "{text}");
    sim.shutdown().await;
}

/// Files under `dir`, as paths relative to it.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let sub = path.file_name().unwrap().to_string_lossy().into_owned();
            out.extend(walk(&path).into_iter().map(|f| format!("{sub}/{f}")));
        } else {
            out.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

/// Runs programs against one kubeconfig and compile cache.
struct Env {
    kubeconfig: std::path::PathBuf,
    compile_cache: std::path::PathBuf,
}

impl Env {
    /// Runs `program` (`kubeplug` is the binary under test) with `stdin` piped in, blocking
    /// this worker thread only (the API server runs on the others).
    fn run(&self, program: &str, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let program = if program == "kubeplug" {
            env!("CARGO_BIN_EXE_kubeplug")
        } else {
            program
        };
        tokio::task::block_in_place(|| {
            let mut child = Command::new(program)
                .args(args)
                .env("KUBECONFIG", &self.kubeconfig)
                .env("KUBEPLUG_CACHE_DIR", &self.compile_cache)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stdin.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
    }
}
