//! kubectl against the embedded API server with RBAC on, as a platform team and a tenant
//! would type it: kubeplug's own RBAC YAML applied, a ServiceAccount's token from `kubectl
//! create token`, `kubectl --token` refused and then allowed after `kubectl create role` and
//! `kubectl create rolebinding`, `kubectl auth can-i` (and `--list`, `--as`), `kubectl auth
//! whoami`, and an unknown token, over the sim's TLS. Skipped when kubectl is not on PATH
//! (except under CI).

use super::kubectl::kubectl_available;
use kubeplug_sim::Sim;
use std::path::{Path, PathBuf};
use std::process::Command;

/// kubectl's exit status, stdout and stderr.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn kubectl(kubeconfig: PathBuf, line: String) -> Out {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(line.split_whitespace())
        .output()
        .expect("kubectl runs");
    Out {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
    }
}

const SEED: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: t1}
---
apiVersion: v1
kind: Namespace
metadata: {name: t2}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: t1}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: t2}
stringData: {k: v}
";

/// Over TLS (`.tls(true)`): client-go sends a kubeconfig's token, `--token` and `--as` only
/// to an `https` server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_tokens_rolebindings_and_can_i() -> anyhow::Result<()> {
    if !kubectl_available() {
        println!("SKIPPED kubectl_tokens_rolebindings_and_can_i: kubectl is not on PATH");
        return Ok(());
    }
    let sim = Sim::builder()
        .rbac(true)
        .tls(true)
        .manifest(SEED)
        .start()
        .await?;
    let dir = tempfile::tempdir()?;
    let admin_kc = dir.path().join("admin");
    sim.write_kubeconfig(&admin_kc)?;
    let admin = |line: &str| {
        let (kc, line) = (admin_kc.clone(), line.to_string());
        tokio::task::spawn_blocking(move || kubectl(kc, line))
    };
    let ok = |out: Out| {
        assert!(out.ok, "kubectl failed: {}{}", out.stderr, out.stdout);
        out.stdout
    };

    // kubeplug's own RBAC applies as on a cluster (ServiceAccount, ClusterRoles, bindings).
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let files = ["crds/plugins.yaml", "rbac.yaml", "tenant-rbac.yaml"]
        .map(|f| format!("-f {}", deploy.join(f).display()))
        .join(" ");
    ok(admin(&format!("apply {files}")).await?);
    let roles = ok(admin("get clusterroles -o name").await?);
    for role in ["kubeplug", "kubeplug-tenant", "cluster-admin", "view"] {
        let name = format!("clusterrole.rbac.authorization.k8s.io/{role}");
        assert!(roles.lines().any(|l| l == name), "{role}: {roles}");
    }
    assert_eq!(
        ok(admin("get sa kubeplug -n kubeplug -o jsonpath={.metadata.name}").await?),
        "kubeplug"
    );

    // A tenant ServiceAccount and its token, as a user gets them.
    ok(admin("create serviceaccount app -n t1").await?);
    let token = ok(admin("create token app -n t1").await?);
    assert!(!token.is_empty() && !token.contains(' '), "{token}");
    let tenant = |line: &str| admin(&format!("--token {token} {line}"));

    let out = tenant("get secrets -n t1").await?;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(r#"secrets is forbidden: User "system:serviceaccount:t1:app" cannot list resource "secrets" in API group "" in the namespace "t1""#),
        "{}",
        out.stderr
    );
    let out = tenant("auth can-i list secrets -n t1").await?;
    assert_eq!(
        (out.ok, out.stdout.as_str()),
        (false, "no"),
        "{}",
        out.stderr
    );
    let out = admin("auth can-i list secrets -n t1 --as system:serviceaccount:t1:app").await?;
    assert_eq!(
        (out.ok, out.stdout.as_str()),
        (false, "no"),
        "{}",
        out.stderr
    );
    assert_eq!(ok(admin("auth can-i list secrets -n t1").await?), "yes");

    // After a Role and a RoleBinding in t1: allowed there, and only there.
    ok(admin("create role secret-reader -n t1 --verb=get,list --resource=secrets").await?);
    let rule = ok(admin("get role secret-reader -n t1 -o jsonpath={.rules[0].apiGroups}").await?);
    assert_eq!(rule, r#"[""]"#, "the core group survives the protobuf body");
    ok(
        admin("create rolebinding app-reads -n t1 --role=secret-reader --serviceaccount=t1:app")
            .await?,
    );
    let listed = ok(tenant("get secrets -n t1 -o name").await?);
    assert_eq!(listed, "secret/s");
    let out = tenant("get secrets -n t2").await?;
    assert!(
        !out.ok && out.stderr.contains("forbidden"),
        "{}",
        out.stderr
    );
    assert_eq!(ok(tenant("auth can-i list secrets -n t1").await?), "yes");
    let out = tenant("auth can-i list secrets -n t2").await?;
    assert_eq!((out.ok, out.stdout.as_str()), (false, "no"));
    let out = tenant("auth can-i watch secrets -n t1").await?;
    assert_eq!((out.ok, out.stdout.as_str()), (false, "no"));
    assert_eq!(
        ok(admin("auth can-i get secrets -n t1 --as system:serviceaccount:t1:app").await?),
        "yes"
    );
    let rules = ok(tenant("auth can-i --list -n t1").await?);
    assert!(
        rules
            .lines()
            .any(|l| l.starts_with("secrets ") && l.contains("[get list]")),
        "{rules}"
    );
    let whoami = ok(tenant("auth whoami -o jsonpath={.status.userInfo.username}").await?);
    assert_eq!(whoami, "system:serviceaccount:t1:app");

    // The shipped tenant role, bound to a group, for a user of that group.
    ok(
        admin("create rolebinding team-plugins -n t2 --clusterrole=kubeplug-tenant --group=team-b")
            .await?,
    );
    let user_kc = dir.path().join("user");
    sim.kubeconfig_with_token(&sim.token_for("bob", &["team-b"]), &user_kc)?;
    let bob = |line: &str| {
        let (kc, line) = (user_kc.clone(), line.to_string());
        tokio::task::spawn_blocking(move || kubectl(kc, line))
    };
    assert_eq!(
        ok(bob("auth can-i create plugins.kubeplug.dev -n t2").await?),
        "yes"
    );
    let out = bob("auth can-i create plugins.kubeplug.dev -n t1").await?;
    assert_eq!((out.ok, out.stdout.as_str()), (false, "no"));
    ok(bob("create configmap m -n t2 --from-literal=a=b").await?);
    let out = bob("get secrets -n t2").await?;
    assert!(
        !out.ok && out.stderr.contains("forbidden"),
        "{}",
        out.stderr
    );

    // An unknown token.
    let out = admin("--token not-a-token get pods").await?;
    assert!(!out.ok);
    assert!(out.stderr.contains("Unauthorized"), "{}", out.stderr);
    Ok(())
}

/// The RBAC kinds and reviews through kubectl's typed (protobuf) commands, on a sim without
/// authorization (kubectl sends no credentials over plain HTTP): kubeplug's RBAC YAML
/// applies, `create serviceaccount|role|rolebinding` store what a real server stores, the
/// reviews answer (everything allowed, as with `AlwaysAllow`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rbac_objects_and_reviews_without_authorization() -> anyhow::Result<()> {
    if !kubectl_available() {
        println!(
            "SKIPPED kubectl_rbac_objects_and_reviews_without_authorization: kubectl is not on PATH"
        );
        return Ok(());
    }
    let sim = Sim::builder().manifest(SEED).start().await?;
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc)?;
    let run = |line: &str| {
        let (kc, line) = (kc.clone(), line.to_string());
        tokio::task::spawn_blocking(move || kubectl(kc, line))
    };
    let ok = |out: Out| {
        assert!(out.ok, "kubectl failed: {}{}", out.stderr, out.stdout);
        out.stdout
    };
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let files = ["crds/plugins.yaml", "rbac.yaml", "tenant-rbac.yaml"]
        .map(|f| format!("-f {}", deploy.join(f).display()))
        .join(" ");
    ok(run(&format!("apply {files}")).await?);
    let roles = ok(run("get clusterroles -o name").await?);
    for role in ["kubeplug", "kubeplug-tenant", "kubeplug-platform-admin"] {
        let name = format!("clusterrole.rbac.authorization.k8s.io/{role}");
        assert!(roles.lines().any(|l| l == name), "{role}: {roles}");
    }
    ok(run("create serviceaccount app -n t1").await?);
    ok(run("create role secret-reader -n t1 --verb=get,list --resource=secrets").await?);
    let groups = ok(run("get role secret-reader -n t1 -o jsonpath={.rules[0].apiGroups}").await?);
    assert_eq!(
        groups, r#"[""]"#,
        "the core group survives the protobuf body"
    );
    ok(
        run("create rolebinding app-reads -n t1 --role=secret-reader --serviceaccount=t1:app")
            .await?,
    );
    let subject = ok(run(
        "get rolebinding app-reads -n t1 -o jsonpath={.subjects[0].kind}/{.subjects[0].namespace}/{.subjects[0].name}/{.roleRef.name}",
    )
    .await?);
    assert_eq!(subject, "ServiceAccount/t1/app/secret-reader");
    assert_eq!(ok(run("auth can-i list secrets -n t1").await?), "yes");
    let whoami = ok(run("auth whoami -o jsonpath={.status.userInfo.username}").await?);
    assert_eq!(whoami, "kubeplug-admin");
    Ok(())
}
