//! Authentication, RBAC, impersonation and SubjectAccessReview of the embedded API server
//! (`Sim::builder().rbac(true)`), through real kube clients: what a tenant's ServiceAccount
//! may do, what impersonating it gives, and what a SubjectAccessReview answers.

use futures::{StreamExt, TryStreamExt};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kubeplug_sim::Sim;
use serde_json::json;
use std::path::Path;

const TENANTS: &str = "
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
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: t1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: other, namespace: t1}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-reader, namespace: t1}
rules:
- {apiGroups: [\"\"], resources: [secrets], verbs: [get, list]}
";

async fn rbac_sim() -> anyhow::Result<Sim> {
    Ok(Sim::builder().rbac(true).manifest(TENANTS).start().await?)
}

/// The HTTP status of a kube error (0 when it is not an API error).
fn code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        _ => 0,
    }
}

fn message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

fn bind(
    name: &str,
    namespace: &str,
    role_kind: &str,
    role: &str,
    subject: serde_json::Value,
) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }))
    .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_reads_secrets_only_where_a_binding_lets_it() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    let token = sim.service_account_token("t1", "default");
    let tenant = sim.client_with_token(&token)?;
    let t1: Api<Secret> = Api::namespaced(tenant.clone(), "t1");
    let err = t1.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"secrets is forbidden: User "system:serviceaccount:t1:default" cannot list resource "secrets" in API group "" in the namespace "t1""#
    );
    let err = t1.get("s").await.unwrap_err();
    assert_eq!(code(&err), 403, "{err}");

    sim.apply_yaml(&bind(
        "read",
        "t1",
        "Role",
        "secret-reader",
        json!({"kind": "ServiceAccount", "name": "default", "namespace": "t1"}),
    ))?;
    assert_eq!(t1.list(&ListParams::default()).await?.items.len(), 1);
    assert_eq!(t1.get("s").await?.data.unwrap_or_default().len(), 1);
    let t2: Api<Secret> = Api::namespaced(tenant.clone(), "t2");
    assert_eq!(
        code(&t2.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    let all: Api<Secret> = Api::all(tenant.clone());
    assert_eq!(
        code(&all.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    // The Role grants get and list, not create.
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "new"}}))?;
    let err = t1
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    // Another ServiceAccount of the same namespace is not bound.
    let other = sim.client_with_token(&sim.service_account_token("t1", "other"))?;
    let err = Api::<Secret>::namespaced(other, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403);
    // Discovery is allowed to every authenticated user (kube's Discovery walks it all).
    kube::Discovery::new(tenant).run().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tokens_are_401_and_the_admin_is_unaffected() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    let mut config = sim.kube_config()?;
    config.auth_info.token = Some("not-a-token".to_string().into());
    let unknown = kube::Client::try_from(config)?;
    let err = Api::<ConfigMap>::namespaced(unknown.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 401, "{err}");
    let err = unknown.apiserver_version().await.unwrap_err();
    assert_eq!(code(&err), 401, "{err}");
    let last = sim.requests().records().pop().expect("a record");
    assert_eq!((last.status, last.user.as_str()), (401, ""));
    // No credentials at all: system:anonymous, with what RBAC grants system:unauthenticated
    // (the version, not ConfigMaps), as a real server with anonymous authentication.
    let mut config = sim.kube_config()?;
    config.auth_info.token = None;
    let anonymous = kube::Client::try_from(config)?;
    let err = Api::<ConfigMap>::namespaced(anonymous.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert!(
        message(&err).contains(r#"User "system:anonymous" cannot list resource "configmaps""#),
        "{err}"
    );
    anonymous.apiserver_version().await?;
    // The sim's own client is system:masters: everything, everywhere.
    let admin = sim.client()?;
    let secrets: Api<Secret> = Api::all(admin.clone());
    assert_eq!(secrets.list(&ListParams::default()).await?.items.len(), 2);
    admin.apiserver_version().await?;
    let last = sim.requests().records().pop().expect("a record");
    assert_eq!(last.user, "kubeplug-admin");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rbac_every_request_is_allowed_as_before() -> anyhow::Result<()> {
    let sim = Sim::builder().manifest(TENANTS).start().await?;
    assert!(!sim.rbac() && sim.admin_token().is_none());
    let mut config = sim.kube_config()?;
    config.auth_info.token = None;
    let client = kube::Client::try_from(config)?;
    assert_eq!(
        Api::<Secret>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .len(),
        2
    );
    // A review answers as the real server with AlwaysAllow does.
    let review = sar_for(Some("nobody"), &[], "list", "", "secrets", "", "t1");
    let answered = Api::<SubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await?;
    assert!(answered.status.expect("status").allowed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_needs_the_watch_verb() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    sim.apply_yaml(&bind(
        "read",
        "t1",
        "Role",
        "secret-reader",
        json!({"kind": "User", "name": "alice"}),
    ))?;
    let alice = sim.client_with_token(&sim.token_for("alice", &["dev"]))?;
    let secrets: Api<Secret> = Api::namespaced(alice, "t1");
    secrets.list(&ListParams::default()).await?;
    let err = secrets
        .watch(&WatchParams::default(), "0")
        .await
        .err()
        .expect("a watch without the watch verb is refused");
    assert_eq!(code(&err), 403, "{err}");
    assert!(
        message(&err).contains("cannot watch resource \"secrets\""),
        "{err}"
    );

    sim.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-reader, namespace: t1}
rules:
- {apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}
",
    )?;
    let mut stream = secrets.watch(&WatchParams::default(), "0").await?.boxed();
    sim.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: s2, namespace: t1}\n")?;
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(event) = stream.try_next().await? {
            if let kube::core::WatchEvent::Added(secret) = event
                && secret.metadata.name.as_deref() == Some("s2")
            {
                return anyhow::Ok(true);
            }
        }
        anyhow::Ok(false)
    })
    .await??;
    assert!(
        seen,
        "the watch ended before the new Secret came through it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subresource_rule_does_not_grant_the_main_resource_nor_the_reverse() -> anyhow::Result<()>
{
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds/plugins.yaml");
    let sim = Sim::builder()
        .rbac(true)
        .crd_file(crds)
        .manifest(TENANTS)
        .manifest(
            "apiVersion: kubeplug.dev/v1alpha1
kind: Plugin
metadata: {name: p, namespace: t1}
spec:
  module: {configMap: {name: m}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: status-writer, namespace: t1}
rules:
- {apiGroups: [kubeplug.dev], resources: [plugins/status], verbs: [get, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: plugin-writer, namespace: t1}
rules:
- {apiGroups: [kubeplug.dev], resources: [plugins], verbs: [get, patch]}
",
        )
        .start()
        .await?;
    sim.apply_yaml(&bind(
        "status",
        "t1",
        "Role",
        "status-writer",
        json!({"kind": "User", "name": "status-only"}),
    ))?;
    sim.apply_yaml(&bind(
        "main",
        "t1",
        "Role",
        "plugin-writer",
        json!({"kind": "User", "name": "main-only"}),
    ))?;
    let gvk = GroupVersionKind::gvk("kubeplug.dev", "v1alpha1", "Plugin");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "plugins");
    let plugins = |token: String| -> anyhow::Result<Api<DynamicObject>> {
        Ok(Api::namespaced_with(
            sim.client_with_token(&token)?,
            "t1",
            &resource,
        ))
    };
    let status_only = plugins(sim.token_for("status-only", &[]))?;
    let main_only = plugins(sim.token_for("main-only", &[]))?;
    let status = Patch::Merge(json!({"status": {"observedGeneration": 1}}));
    let spec = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    let params = PatchParams::default();

    status_only.patch_status("p", &params, &status).await?;
    let err = status_only.patch("p", &params, &spec).await.unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"plugins.kubeplug.dev "p" is forbidden: User "status-only" cannot patch resource "plugins" in API group "kubeplug.dev" in the namespace "t1""#
    );

    main_only.patch("p", &params, &spec).await?;
    let err = main_only
        .patch_status("p", &params, &status)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert!(
        message(&err).contains(r#"cannot patch resource "plugins/status""#),
        "{err}"
    );
    Ok(())
}

/// A caller bound to `impersonate` one ServiceAccount acts as it (with its rights, not its
/// own), and cannot impersonate another ServiceAccount or a user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonating_a_service_account_gives_its_rights_and_no_more() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    sim.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: impersonate-t1-default}
rules:
- {apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [default]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: configmap-writer}
rules:
- {apiGroups: [\"\"], resources: [configmaps], verbs: [create, get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: host-writes-configmaps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: configmap-writer}
subjects:
- {kind: ServiceAccount, name: host, namespace: kubeplug}
",
    )?;
    sim.apply_yaml(&bind(
        "host-impersonates",
        "t1",
        "ClusterRole",
        "impersonate-t1-default",
        json!({"kind": "ServiceAccount", "name": "host", "namespace": "kubeplug"}),
    ))?;
    sim.apply_yaml(&bind(
        "read",
        "t1",
        "Role",
        "secret-reader",
        json!({"kind": "ServiceAccount", "name": "default"}),
    ))?;
    let host_token = sim.service_account_token("kubeplug", "host");
    let as_user = |user: &str, groups: Option<Vec<String>>| -> anyhow::Result<kube::Client> {
        let mut config = sim.kube_config_with_token(&host_token)?;
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = groups;
        Ok(kube::Client::try_from(config)?)
    };

    // The host itself may write ConfigMaps anywhere, but not read Secrets.
    let host = sim.client_with_token(&host_token)?;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "by-host"}}))?;
    Api::<ConfigMap>::namespaced(host.clone(), "t1")
        .create(&PostParams::default(), &cm)
        .await?;
    let err = Api::<Secret>::namespaced(host, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403);

    // As t1's default ServiceAccount: its rights (Secrets in t1), not the host's (ConfigMaps).
    let cursor = sim.requests().cursor();
    let tenant = as_user("system:serviceaccount:t1:default", None)?;
    assert_eq!(
        Api::<Secret>::namespaced(tenant.clone(), "t1")
            .list(&ListParams::default())
            .await?
            .items
            .len(),
        1
    );
    let served = sim.requests().since(cursor);
    let list = served
        .iter()
        .find(|r| r.resource == "secrets")
        .expect("logged");
    assert_eq!(list.user, "system:serviceaccount:t1:default");
    assert_eq!(
        list.impersonator.as_deref(),
        Some("system:serviceaccount:kubeplug:host")
    );
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "as-tenant"}}))?;
    let err = Api::<ConfigMap>::namespaced(tenant.clone(), "t1")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"configmaps is forbidden: User "system:serviceaccount:t1:default" cannot create resource "configmaps" in API group "" in the namespace "t1""#
    );
    // Not in t2 either, where the ServiceAccount has no binding.
    assert_eq!(
        code(
            &Api::<Secret>::namespaced(tenant, "t2")
                .list(&ListParams::default())
                .await
                .unwrap_err()
        ),
        403
    );

    // Another ServiceAccount, a user, or extra groups: not granted.
    let other = as_user("system:serviceaccount:t1:other", None)?;
    let err = Api::<Secret>::namespaced(other, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"serviceaccounts "other" is forbidden: User "system:serviceaccount:kubeplug:host" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "t1""#
    );
    let admin = as_user("kubeplug-admin", None)?;
    let err = Api::<Secret>::namespaced(admin, "t1")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert!(
        message(&err).contains(
            r#"cannot impersonate resource "users" in API group "authentication.k8s.io""#
        ),
        "{err}"
    );
    let masters = as_user(
        "system:serviceaccount:t1:default",
        Some(vec!["system:masters".into()]),
    )?;
    let err = Api::<Secret>::namespaced(masters, "t2")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert!(
        message(&err).contains(r#"cannot impersonate resource "groups""#),
        "{err}"
    );

    // system:masters may impersonate anyone.
    let mut config = sim.kube_config()?;
    config.auth_info.impersonate = Some("system:serviceaccount:t1:default".into());
    let by_admin = kube::Client::try_from(config)?;
    let err = Api::<Secret>::namespaced(by_admin, "t2")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        code(&err),
        403,
        "the admin acting as the tenant has the tenant's rights"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_headers_over_their_bounds_are_refused() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    let request = |user: String, groups: usize| -> anyhow::Result<kube::Client> {
        let mut config = sim.kube_config()?;
        config.auth_info.impersonate = Some(user);
        config.auth_info.impersonate_groups = Some((0..groups).map(|i| format!("g{i}")).collect());
        Ok(kube::Client::try_from(config)?)
    };
    let max = kubeplug_sim::impersonation::MAX_GROUPS;
    let len = kubeplug_sim::impersonation::MAX_VALUE_LEN;
    // At the bounds: accepted (the last group, system:masters, lets the request through).
    let mut config = sim.kube_config()?;
    config.auth_info.impersonate = Some("a".repeat(len));
    let mut groups: Vec<String> = (1..max).map(|i| format!("g{i}")).collect();
    groups.push("system:masters".into());
    config.auth_info.impersonate_groups = Some(groups);
    let at_bounds = kube::Client::try_from(config)?;
    Api::<Secret>::namespaced(at_bounds, "t1")
        .list(&ListParams::default())
        .await?;
    for (user, groups) in [("a".repeat(len + 1), 1), ("alice".to_string(), max + 1)] {
        let err = Api::<Secret>::namespaced(request(user, groups)?, "t1")
            .list(&ListParams::default())
            .await
            .unwrap_err();
        assert_eq!(code(&err), 400, "{err}");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn sar_for(
    user: Option<&str>,
    groups: &[&str],
    verb: &str,
    group: &str,
    resource: &str,
    subresource: &str,
    namespace: &str,
) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.map(str::to_string),
            groups: (!groups.is_empty()).then(|| groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: (!subresource.is_empty()).then(|| subresource.into()),
                namespace: Some(namespace.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_answer_for_users_groups_and_service_accounts() -> anyhow::Result<()>
{
    let sim = rbac_sim().await?;
    sim.apply_yaml(&bind(
        "read",
        "t1",
        "Role",
        "secret-reader",
        json!({"kind": "ServiceAccount", "name": "default"}),
    ))?;
    sim.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: devs-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: dev}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reviewer}
rules:
- {apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: host-reviews}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reviewer}
subjects:
- {kind: ServiceAccount, name: host, namespace: kubeplug}
",
    )?;
    let reviewer = sim.client_with_token(&sim.service_account_token("kubeplug", "host"))?;
    let reviews: Api<SubjectAccessReview> = Api::all(reviewer);
    let ask = |review: SubjectAccessReview| {
        let reviews = reviews.clone();
        async move {
            let answered = reviews.create(&PostParams::default(), &review).await?;
            anyhow::Ok(answered.status.expect("a status"))
        }
    };
    let sa = "system:serviceaccount:t1:default";
    let sa_groups = ["system:serviceaccounts", "system:serviceaccounts:t1"];
    let yes = ask(sar_for(
        Some(sa),
        &sa_groups,
        "list",
        "",
        "secrets",
        "",
        "t1",
    ))
    .await?;
    assert!(yes.allowed);
    assert_eq!(
        yes.reason.as_deref(),
        Some(
            r#"RBAC: allowed by RoleBinding "read/t1" of Role "secret-reader" to ServiceAccount "default/t1""#
        )
    );
    assert!(
        !ask(sar_for(
            Some(sa),
            &sa_groups,
            "watch",
            "",
            "secrets",
            "",
            "t1"
        ))
        .await?
        .allowed
    );
    assert!(
        !ask(sar_for(
            Some(sa),
            &sa_groups,
            "list",
            "",
            "secrets",
            "",
            "t2"
        ))
        .await?
        .allowed
    );
    // A group: dev may view Deployments (and their status) everywhere, not Secrets.
    let dev = ask(sar_for(
        None,
        &["dev"],
        "list",
        "apps",
        "deployments",
        "",
        "t2",
    ))
    .await?;
    assert!(dev.allowed);
    assert_eq!(
        dev.reason.as_deref(),
        Some(
            r#"RBAC: allowed by ClusterRoleBinding "devs-view" of ClusterRole "view" to Group "dev""#
        )
    );
    assert!(
        ask(sar_for(
            None,
            &["dev"],
            "get",
            "apps",
            "deployments",
            "status",
            "t2"
        ))
        .await?
        .allowed
    );
    assert!(
        !ask(sar_for(None, &["dev"], "get", "", "secrets", "", "t2"))
            .await?
            .allowed
    );
    // A user: in dev by its groups, alone it is nobody.
    assert!(
        ask(sar_for(
            Some("alice"),
            &["dev"],
            "watch",
            "",
            "pods",
            "",
            "t1"
        ))
        .await?
        .allowed
    );
    assert!(
        !ask(sar_for(Some("alice"), &[], "watch", "", "pods", "", "t1"))
            .await?
            .allowed
    );
    assert!(
        ask(sar_for(
            Some("root"),
            &["system:masters"],
            "delete",
            "",
            "nodes",
            "",
            ""
        ))
        .await?
        .allowed
    );
    // A caller without `create` on subjectaccessreviews is refused.
    let tenant = sim.client_with_token(&sim.service_account_token("t1", "default"))?;
    let err = Api::<SubjectAccessReview>::all(tenant)
        .create(
            &PostParams::default(),
            &sar_for(Some(sa), &[], "list", "", "secrets", "", "t1"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"subjectaccessreviews.authorization.k8s.io is forbidden: User "system:serviceaccount:t1:default" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope"#
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sims_own_endpoints_are_for_system_masters_only() -> anyhow::Result<()> {
    let sim = rbac_sim().await?;
    let tenant = sim.client_with_token(&sim.service_account_token("t1", "default"))?;
    let get = |client: kube::Client| async move {
        let request = axum::http::Request::get("/sim/requests").body(Vec::new())?;
        anyhow::Ok(client.request_text(request).await)
    };
    let err = get(tenant).await?.unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    assert_eq!(
        message(&err),
        r#"forbidden: User "system:serviceaccount:t1:default" cannot get path "/sim/requests""#
    );
    let mut config = sim.kube_config()?;
    config.auth_info.token = None;
    let err = get(kube::Client::try_from(config)?).await?.unwrap_err();
    assert_eq!(code(&err), 403, "{err}");
    get(sim.client()?).await??;
    Ok(())
}

/// What `kubectl auth can-i` and `kubectl auth can-i --list` ask (kubectl itself cannot send
/// a token to the sim over plain HTTP): any authenticated user may ask about itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_reviews_answer_for_the_caller() -> anyhow::Result<()> {
    use k8s_openapi::api::authorization::v1::{
        SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SelfSubjectRulesReview,
        SelfSubjectRulesReviewSpec,
    };
    let sim = rbac_sim().await?;
    sim.apply_yaml(&bind(
        "read",
        "t1",
        "Role",
        "secret-reader",
        json!({"kind": "ServiceAccount", "name": "default"}),
    ))?;
    let tenant = sim.client_with_token(&sim.service_account_token("t1", "default"))?;
    let can_i = |verb: &str, namespace: &str| {
        let api: Api<SelfSubjectAccessReview> = Api::all(tenant.clone());
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    resource: Some("secrets".into()),
                    namespace: Some(namespace.into()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        async move {
            let answered = api.create(&PostParams::default(), &review).await?;
            anyhow::Ok(answered.status.expect("a status").allowed)
        }
    };
    assert!(can_i("list", "t1").await?);
    assert!(!can_i("watch", "t1").await?);
    assert!(!can_i("list", "t2").await?);
    let rules = Api::<SelfSubjectRulesReview>::all(tenant)
        .create(
            &PostParams::default(),
            &SelfSubjectRulesReview {
                spec: SelfSubjectRulesReviewSpec {
                    namespace: Some("t1".into()),
                },
                ..SelfSubjectRulesReview::default()
            },
        )
        .await?
        .status
        .expect("a status");
    assert!(
        rules.resource_rules.iter().any(|r| r.resources.as_deref()
            == Some(&["secrets".to_string()][..])
            && r.verbs == ["get", "list"]),
        "{rules:?}"
    );
    assert!(
        rules.non_resource_rules.iter().any(|r| r
            .non_resource_urls
            .as_deref()
            .is_some_and(|u| u.contains(&"/apis/*".to_string()))),
        "discovery for every authenticated user: {rules:?}"
    );
    Ok(())
}
