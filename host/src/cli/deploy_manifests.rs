//! The deploy manifests (`host/deploy/`) against the code: the RBAC grants what the
//! reference plugins' sample policies use, and every `kubeplug` argument the manifests pass
//! parses as a flag of `kubeplug run` once expanded. Beside the CLI, whose flags it checks.

use crate::manifest::read_file;
use std::path::Path;

#[test]
fn deploy_manifests_parse_and_grant_what_the_reference_plugins_use() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let rbac = read_file(&dir.join("rbac.yaml")).unwrap();
    let role = rbac.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let rules = role["rules"].to_string();
    for verb in ["watch", "patch", "create"] {
        assert!(rules.contains(verb), "ClusterRole lacks {verb}: {rules}");
    }
    // One ClusterRole per custom-resource plugin, granting the API verbs its sample
    // policy's rules need on each kind (patch-status is `patch` on `<plural>/status`).
    let role_of = |name: &str| {
        rbac.iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no ClusterRole {name}"))["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let grants = |rules: &[serde_json::Value], resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
        })
    };
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    for (plugin, kinds) in [
        (
            "sample-controller",
            [("Foo", "foos"), ("Deployment", "deployments")],
        ),
        (
            "customcluster",
            [("Customcluster", "customclusters"), ("Pod", "pods")],
        ),
    ] {
        let rules = role_of(&format!("kubeplug-{plugin}"));
        let policy = read_file(&samples.join(format!("{plugin}.policy.yaml"))).unwrap();
        for (kind, plural) in kinds {
            for verb in ["get", "list", "watch"] {
                assert!(grants(&rules, plural, verb), "{plugin}: {verb} {plural}");
            }
            let rule = policy[0]["spec"]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["kind"] == kind)
                .unwrap();
            for verb in rule["verbs"].as_array().unwrap() {
                let (resource, api_verb) = match verb.as_str().unwrap() {
                    "patch-status" => (format!("{plural}/status"), "patch"),
                    "event" => continue, // the shared kubeplug role creates Events
                    v => (plural.to_string(), v),
                };
                assert!(
                    grants(&rules, &resource, api_verb),
                    "{plugin}: {api_verb} {resource}"
                );
            }
        }
    }
    let deploy = read_file(&dir.join("deployment.yaml")).unwrap();
    assert_eq!(
        deploy[0]["spec"]["template"]["spec"]["serviceAccountName"],
        "kubeplug"
    );
}

#[test]
fn ha_manifests_run_several_replicas_with_leases() {
    use clap::Parser;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    for (file, flag) in [
        ("ha.yaml", "--leader-elect"),
        ("sharded.yaml", "--sharding"),
    ] {
        let docs = read_file(&dir.join(file)).unwrap();
        let deploy = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(deploy["spec"]["replicas"], 3, "{file}");
        let pod = &deploy["spec"]["template"];
        let container = &pod["spec"]["containers"][0];
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert!(args.contains(&flag.to_string()), "{file}: {args:?}");
        assert!(args.contains(&"--identity=$(POD_NAME)".to_string()));
        for (var, field) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let env = container["env"].as_array().unwrap();
            let e = env.iter().find(|e| e["name"] == var).unwrap();
            assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], field, "{file}");
        }
        // The arguments are what `kubeplug` accepts, once the kubelet expanded them.
        let expanded = args.iter().map(|a| {
            a.replace("$(POD_NAME)", "kubeplug-7d9f-x2")
                .replace("$(POD_NAMESPACE)", "kubeplug")
        });
        let cli = crate::cli::Cli::try_parse_from(
            std::iter::once("kubeplug".to_string()).chain(expanded),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let crate::cli::Command::Run(run) = cli.command else {
            panic!("{file}: not `run`");
        };
        let config = crate::cli::run_settings::host_config(&run)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .coordination
            .unwrap();
        assert_eq!(config.identity, "kubeplug-7d9f-x2");
        assert_eq!(config.lease_namespace, "kubeplug");
        let pdb = docs
            .iter()
            .find(|d| d["kind"] == "PodDisruptionBudget")
            .unwrap_or_else(|| panic!("{file}: no PodDisruptionBudget"));
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"],
            "{file}: the budget covers the replicas"
        );
    }
    let rbac = read_file(&dir.join("lease-rbac.yaml")).unwrap();
    let role = rbac.iter().find(|d| d["kind"] == "Role").unwrap();
    assert!(rbac.iter().all(|d| d["kind"] != "ClusterRole"));
    assert_eq!(role["metadata"]["namespace"], "kubeplug");
    let rule = &role["rules"][0];
    assert_eq!(rule["apiGroups"][0], "coordination.k8s.io");
    assert_eq!(rule["resources"][0], "leases");
    for verb in ["get", "list", "create", "update", "delete"] {
        assert!(
            rule["verbs"].as_array().unwrap().iter().any(|v| v == verb),
            "{verb}"
        );
    }
    let binding = rbac.iter().find(|d| d["kind"] == "RoleBinding").unwrap();
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], "kubeplug");
    assert_eq!(binding["subjects"][0]["namespace"], "kubeplug");
    let dockerfile = std::fs::read_to_string(dir.join("Dockerfile")).unwrap();
    let last_stage = dockerfile.rsplit("FROM ").next().unwrap();
    assert!(
        last_stage.contains("ENTRYPOINT [\"/kubeplug\"]"),
        "{dockerfile}"
    );
}
