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
fn the_status_records_get_exactly_a_role_in_kubeplugs_namespace() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let rbac = read_file(&dir.join("rbac.yaml")).unwrap();
    let named = |kind: &str| {
        rbac.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "kubeplug-records")
            .unwrap_or_else(|| panic!("no {kind} kubeplug-records"))
    };
    let role = named("Role");
    let account = rbac.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    let host_namespace = &account["metadata"]["namespace"];
    assert_eq!(&role["metadata"]["namespace"], host_namespace);
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["apiGroups"], serde_json::json!([""]));
    assert_eq!(rules[0]["resources"], serde_json::json!(["configmaps"]));
    // What the record store uses (watched list, server-side apply, delete), nothing else:
    // no get or update, and never a ClusterRole.
    let mut verbs: Vec<&str> = rules[0]["verbs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    verbs.sort();
    assert_eq!(verbs, ["create", "delete", "list", "patch", "watch"]);
    let binding = named("RoleBinding");
    assert_eq!(&binding["metadata"]["namespace"], host_namespace);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(&binding["subjects"][0]["namespace"], host_namespace);
    assert!(
        rbac.iter()
            .all(|d| d["kind"] != "ClusterRole" || d["metadata"]["name"] != "kubeplug-records")
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

/// The CRDs of `host/deploy/crds/` as the embedded API server reads them: one served
/// version, `kubeplug.dev/v1alpha1`, the status subresource, the printer columns and a schema.
#[test]
fn crds_define_the_plugin_kinds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    for (file, kind, plural, namespaced, short, columns) in [
        (
            "plugins.yaml",
            "Plugin",
            "plugins",
            true,
            "kp",
            &["Mode", "Ready", "Reason", "Digest", "Age"][..],
        ),
        (
            "pluginpolicies.yaml",
            "PluginPolicy",
            "pluginpolicies",
            false,
            "kpp",
            &["Mode", "Applies-To", "Ready", "Reason", "Age"][..],
        ),
    ] {
        let docs = read_file(&dir.join(file)).unwrap();
        assert_eq!(docs.len(), 1, "{file}");
        assert_eq!(
            docs[0]["metadata"]["name"],
            format!("{plural}.kubeplug.dev")
        );
        let kinds = kubeplug_sim::kinds::kinds_from_crd(&docs[0]).unwrap();
        let [k] = kinds.as_slice() else {
            panic!("{file}: one served version");
        };
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str()),
            ("kubeplug.dev", "v1alpha1", kind)
        );
        assert_eq!(k.api_version(), "kubeplug.dev/v1alpha1");
        assert_eq!(k.plural, plural);
        assert_eq!(k.namespaced, namespaced, "{file}");
        assert!(k.status_subresource, "{file}");
        assert_eq!(k.short_names, [short]);
        let names: Vec<&str> = k.printer_columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, columns, "{file}");
        assert!(k.schema.is_some(), "{file}");
    }
}

/// Every sample policy file's spec is a PluginPolicy spec (and, as a request, a Plugin's
/// `spec.permissions`) that the CRDs' schemas accept whole: nothing refused, nothing pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_policies_fit_the_crd_schemas() {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    let sim = kubeplug_sim::Sim::builder()
        .crd_file(crds.join("plugins.yaml"))
        .crd_file(crds.join("pluginpolicies.yaml"))
        .start()
        .await
        .unwrap();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/policies");
    let mut files: Vec<_> = std::fs::read_dir(&samples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let doc = read_file(&file).unwrap().remove(0);
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        // A file policy's `config` and `plugin` pin belong to one plugin: in the API they are
        // the Plugin's spec.config and spec.module.sha256.
        let mut spec = doc["spec"].clone();
        let spec_map = spec.as_object_mut().unwrap();
        spec_map.remove("config");
        spec_map.remove("plugin");
        spec_map
            .entry("mode")
            .or_insert_with(|| serde_json::json!("dry-run"));
        let mut policy_spec = spec.clone();
        policy_spec["appliesTo"] = serde_json::json!({"names": ["team-a"]});
        let policy = serde_json::json!({"apiVersion": "kubeplug.dev/v1alpha1",
            "kind": "PluginPolicy", "metadata": {"name": name}, "spec": policy_spec});
        let stored = sim
            .apply_yaml(&policy.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(stored[0]["spec"], policy_spec, "{}", file.display());

        let mut permissions = spec.clone();
        let permissions_map = permissions.as_object_mut().unwrap();
        permissions_map.remove("mode");
        if let Some(ns) = permissions_map.get_mut("namespaces") {
            // A Plugin asks for namespaces by name only (its own is implied).
            ns.as_object_mut()
                .unwrap()
                .retain(|k, _| k == "names" || k == "clusterScoped");
        }
        let plugin = serde_json::json!({"apiVersion": "kubeplug.dev/v1alpha1", "kind": "Plugin",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"module": {"configMap": {"name": name}}, "mode": "enforce",
                "config": doc["spec"]["config"].clone(), "permissions": permissions}});
        let stored = sim
            .apply_yaml(&plugin.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut expected = plugin["spec"].clone();
        expected["module"]["configMap"]["key"] = serde_json::json!("plugin.wasm");
        if expected["config"].is_null() {
            expected.as_object_mut().unwrap().remove("config");
        }
        assert_eq!(stored[0]["spec"], expected, "{}", file.display());
    }
}

/// kubeplug's own role reads Plugins, PluginPolicies and ConfigMaps and writes their status
/// and Events; the tenants' role is Plugins and ConfigMaps only (bound per namespace); the
/// platform admins' role writes PluginPolicies.
#[test]
fn rbac_covers_plugin_objects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let grants = |rules: &serde_json::Value, group: &str, resource: &str, verb: &str| {
        rules.as_array().unwrap().iter().any(|r| {
            let has = |field: &str, want: &str| {
                r[field]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == want || x == "*")
            };
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    let rbac = read_file(&dir.join("rbac.yaml")).unwrap();
    let own = &rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "kubeplug")
        .unwrap()["rules"];
    for resource in ["plugins", "pluginpolicies"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                grants(own, "kubeplug.dev", resource, verb),
                "{verb} {resource}"
            );
        }
        for verb in ["update", "patch"] {
            let status = format!("{resource}/status");
            assert!(
                grants(own, "kubeplug.dev", &status, verb),
                "{verb} {status}"
            );
        }
        assert!(
            !grants(own, "kubeplug.dev", resource, "patch"),
            "spec is the tenant's"
        );
    }
    for verb in ["get", "list", "watch"] {
        assert!(grants(own, "", "configmaps", verb), "{verb} configmaps");
    }
    assert!(grants(own, "", "secrets", "get"), "get a pull Secret");
    for verb in ["list", "watch"] {
        assert!(!grants(own, "", "secrets", verb), "never {verb} secrets");
    }
    for verb in ["create", "patch"] {
        assert!(
            grants(own, "events.k8s.io", "events", verb),
            "{verb} events"
        );
    }
    // Plugins act as their namespace's ServiceAccounts, and nothing more.
    assert!(grants(own, "", "serviceaccounts", "impersonate"));
    for (group, resource) in [
        ("", "users"),
        ("", "groups"),
        ("authentication.k8s.io", "uids"),
        ("authentication.k8s.io", "userextras/scopes"),
    ] {
        assert!(!grants(own, group, resource, "impersonate"), "{resource}");
    }
    assert!(grants(
        own,
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create"
    ));

    let roles = read_file(&dir.join("tenant-rbac.yaml")).unwrap();
    assert!(
        roles.iter().all(|d| d["kind"] == "ClusterRole"),
        "no bindings shipped"
    );
    let role = |name: &str| {
        &roles
            .iter()
            .find(|d| d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no ClusterRole {name}"))["rules"]
    };
    let verbs = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let tenant = role("kubeplug-tenant");
    for verb in verbs {
        assert!(
            grants(tenant, "kubeplug.dev", "plugins", verb),
            "tenant {verb}"
        );
        assert!(grants(tenant, "", "configmaps", verb), "tenant {verb}");
    }
    let resources: Vec<&serde_json::Value> = tenant
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .collect();
    assert_eq!(resources, ["plugins", "configmaps"], "nothing else");
    let admin = role("kubeplug-platform-admin");
    for verb in verbs {
        assert!(
            grants(admin, "kubeplug.dev", "pluginpolicies", verb),
            "admin {verb}"
        );
    }
    assert!(!grants(admin, "kubeplug.dev", "plugins", "patch"));
}

/// `kubeplug run --embedded` (and so `make demo`) serves kubeplug's own CRDs.
#[test]
fn the_embedded_api_server_serves_the_plugin_crds() {
    let served: Vec<String> = crate::cli::run::SAMPLE_CUSTOM_RESOURCES
        .iter()
        .flat_map(|text| kubeplug_sim::load::parse_documents(text, "embedded").unwrap())
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for crd in ["plugins.kubeplug.dev", "pluginpolicies.kubeplug.dev"] {
        assert!(served.iter().any(|s| s == crd), "{crd}: {served:?}");
    }
}
