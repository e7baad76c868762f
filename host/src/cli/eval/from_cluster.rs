//! `kubeplug eval --from-cluster KIND/NAMESPACE/NAME`: the object a plugin reconciles and the
//! objects its get/list imports would see, read from a live cluster (the current kubeconfig,
//! as kubectl finds it), so a real case can be replayed offline and saved as a fixture.
//!
//! What is read is bounded: the kinds the plugin may read (the kind it reconciles and the
//! kinds it declares it owns, or with `--policy` exactly what that policy lets it read), in
//! the object's namespace (cluster-scoped kinds: everywhere), at most `max_objects` objects
//! and `max_bytes` of responses in all; each response is read through a counting reader
//! that stops at what is left of the budget, so an API server sending more never makes the
//! command hold more. Going over is an error naming the bound, never a silent truncation
//! (a fixture missing objects would replay a different case).

use crate::cluster::{ClusterArgs, KindRegistry, ResolvedKind};
use crate::contract::text::shown;
use crate::contract::{KindRef, names};
use anyhow::{Context, bail};
use futures::AsyncReadExt;
use kube::api::{DynamicObject, ListParams};
use kube::core::Resource;
use serde_json::Value;
use std::path::Path;

/// Objects per list request.
const PAGE: usize = 250;

/// How much `--from-cluster` may read.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Objects in all, the reconciled one included.
    pub max_objects: usize,
    /// Bytes of API responses in all.
    pub max_bytes: usize,
}

/// `KIND/NAMESPACE/NAME` (or `KIND/NAME` for a cluster-scoped kind), as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The kind as typed: `Deployment`, `deployment`, `deployments` or `deployment.apps`.
    pub kind: String,
    /// The namespace; `None` for `KIND/NAME`.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl Spec {
    /// Parses the flag's value; names are checked before they reach a URL.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let (kind, namespace, name) = match parts[..] {
            [kind, name] => (kind, None, name),
            [kind, namespace, name] => (kind, Some(namespace), name),
            _ => bail!(
                "--from-cluster {:?} is not KIND/NAMESPACE/NAME (or KIND/NAME for a cluster-scoped kind)",
                shown(text)
            ),
        };
        if kind.is_empty()
            || kind.len() > 253
            || !kind
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            bail!("--from-cluster: {:?} is not a kind name", shown(kind));
        }
        if let Some(ns) = namespace {
            names::dns_label("--from-cluster: the namespace", ns).map_err(anyhow::Error::msg)?;
        }
        names::dns_subdomain("--from-cluster: the name", name).map_err(anyhow::Error::msg)?;
        Ok(Spec {
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        })
    }

    /// Whether the kind typed names `kind` (served as `plural`): its name or plural in any
    /// case, optionally followed by `.GROUP`.
    fn names(&self, kind: &KindRef, plural: &str) -> bool {
        let (typed, group) = match self.kind.split_once('.') {
            Some((k, g)) => (k, Some(g)),
            None => (self.kind.as_str(), None),
        };
        (typed.eq_ignore_ascii_case(&kind.kind) || typed.eq_ignore_ascii_case(plural))
            && group.is_none_or(|g| g == kind.group())
    }
}

/// What was read: the object, and every object of the readable kinds (the object too).
#[derive(Debug)]
pub struct Captured {
    /// The object to reconcile, managedFields stripped.
    pub object: Value,
    /// The objects the plugin's get/list imports see, managedFields stripped.
    pub cache: Vec<Value>,
}

/// Counts what has been read against [`Bounds`].
struct Budget {
    bounds: Bounds,
    objects: usize,
    bytes: usize,
}

impl Budget {
    fn take_object(&mut self, what: &str) -> anyhow::Result<()> {
        self.objects += 1;
        if self.objects > self.bounds.max_objects {
            bail!(
                "--from-cluster: more than {} objects to read (at {what}); raise --capture-max-objects, or narrow what the plugin reads with --policy",
                self.bounds.max_objects
            );
        }
        Ok(())
    }
}

/// Reads the object `spec` names, which must be of the kind the plugin reconciles, and the
/// objects of `reads` (the reconciled kind first) in its namespace.
pub async fn capture(
    cluster: &ClusterArgs,
    spec: &Spec,
    reads: &[KindRef],
    bounds: Bounds,
) -> anyhow::Result<Captured> {
    let client = crate::cluster::connect(cluster).await?;
    let kinds = KindRegistry::new(client.clone());
    let reconciled = reads.first().context("no kind to read")?;
    let target = kinds
        .resolve(reconciled)
        .await
        .with_context(|| format!("--from-cluster: cannot resolve {reconciled}"))?;
    if !spec.names(reconciled, &target.resource.plural) {
        bail!(
            "--from-cluster: {:?} is not the kind the plugin reconciles ({reconciled})",
            shown(&spec.kind)
        );
    }
    let namespace = match (target.namespaced, &spec.namespace) {
        (true, Some(ns)) => Some(ns.clone()),
        (true, None) => {
            bail!("--from-cluster: {reconciled} is namespaced: give KIND/NAMESPACE/NAME")
        }
        (false, Some(_)) => bail!("--from-cluster: {reconciled} is cluster-scoped: give KIND/NAME"),
        (false, None) => None,
    };
    names::object_name(reconciled.group(), &reconciled.kind, &spec.name)
        .map_err(|why| anyhow::anyhow!("--from-cluster: {why}"))?;
    let mut budget = Budget {
        bounds,
        objects: 0,
        bytes: 0,
    };
    budget.take_object(&spec.name)?;
    let url = DynamicObject::url_path(&target.resource, namespace.as_deref());
    let request = kube::core::Request::new(url)
        .get(&spec.name, &Default::default())
        .context("--from-cluster: building the request")?;
    let mut object = match read_json(&client, request, &mut budget).await {
        Ok(object) => object,
        Err(ReadError::Api(e)) if e.code == 404 => bail!(
            "--from-cluster: {reconciled} {}{} not found",
            namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            spec.name
        ),
        Err(e) => return Err(e.into()),
    };
    crate::cluster::strip_managed_fields(&mut object);

    let mut cache = Vec::new();
    for kind in reads {
        let resolved = if kind == reconciled {
            target.clone()
        } else {
            kinds.resolve(kind).await.with_context(|| {
                format!("--from-cluster: cannot resolve {kind}, which the plugin reads")
            })?
        };
        let ns = if resolved.namespaced {
            namespace.as_deref()
        } else {
            None
        };
        list(&client, &resolved, ns, &mut budget, &mut cache).await?;
    }
    Ok(Captured { object, cache })
}

/// Lists every object of `kind` (in `namespace`) into `out`, page by page, within `budget`.
async fn list(
    client: &kube::Client,
    kind: &ResolvedKind,
    namespace: Option<&str>,
    budget: &mut Budget,
    out: &mut Vec<Value>,
) -> anyhow::Result<()> {
    let url = DynamicObject::url_path(&kind.resource, namespace);
    let mut continue_token: Option<String> = None;
    loop {
        let left = budget.bounds.max_objects.saturating_sub(budget.objects);
        let mut params = ListParams::default().limit(PAGE.min(left + 1).max(1) as u32);
        if let Some(token) = &continue_token {
            params = params.continue_token(token);
        }
        let request = kube::core::Request::new(&url)
            .list(&params)
            .context("--from-cluster: building the request")?;
        let mut page = read_json(client, request, budget)
            .await
            .with_context(|| format!("--from-cluster: listing {}", kind.kind))?;
        let items = match page.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => bail!(
                "--from-cluster: the list of {} has no items array",
                kind.kind
            ),
        };
        for mut item in items {
            budget.take_object(&kind.kind.to_string())?;
            // Lists leave out each item's apiVersion and kind.
            if let Some(map) = item.as_object_mut() {
                map.insert("apiVersion".into(), kind.kind.api_version.clone().into());
                map.insert("kind".into(), kind.kind.kind.clone().into());
            }
            crate::cluster::strip_managed_fields(&mut item);
            out.push(item);
        }
        continue_token = page
            .pointer("/metadata/continue")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if continue_token.is_none() {
            return Ok(());
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// The API server answered with an error status.
    #[error("the API server answered {}: {}", .0.code, shown(&.0.message))]
    Api(Box<kube::core::Status>),
    /// Anything else: connection, size bound, not JSON.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Sends `request` and parses the JSON answer, reading at most what is left of the byte
/// budget (one byte more tells a response that would go over it).
async fn read_json(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    budget: &mut Budget,
) -> Result<Value, ReadError> {
    let left = budget.bounds.max_bytes.saturating_sub(budget.bytes);
    let reader = match client.request_stream(request).await {
        Ok(reader) => reader,
        Err(kube::Error::Api(e)) => return Err(ReadError::Api(e)),
        Err(e) => return Err(anyhow::Error::new(e).into()),
    };
    let mut body = Vec::new();
    reader
        .take(left as u64 + 1)
        .read_to_end(&mut body)
        .await
        .context("reading the API server's answer")?;
    budget.bytes += body.len();
    if body.len() > left {
        return Err(anyhow::anyhow!(
            "--from-cluster: more than {} MiB of answers to read; raise --capture-max-mib, or narrow what the plugin reads with --policy",
            budget.bounds.max_bytes >> 20
        )
        .into());
    }
    Ok(serde_json::from_slice(&body).context("the API server's answer is not JSON")?)
}

/// Writes a captured case into `dir` as `kubeplug test` reads it: `NAME.object.yaml`,
/// `NAME.expect.yaml` (what the plugin did with it, the `--format yaml` document) and each
/// readable object as `cache/KIND-NAMESPACE-NAME.yaml`. Refuses to overwrite a case.
pub fn save_case(
    dir: &Path,
    captured: &Captured,
    expectation: &str,
) -> anyhow::Result<Vec<String>> {
    let name = file_part(&captured.object, "/metadata/name")?;
    let object_file = dir.join(format!("{name}.object.yaml"));
    let expect_file = dir.join(format!("{name}.expect.yaml"));
    for file in [&object_file, &expect_file] {
        if file.exists() {
            bail!(
                "--save-case: {} exists; remove it to capture this case again",
                file.display()
            );
        }
    }
    // Every file name is checked before anything is written.
    let cache_dir = dir.join("cache");
    let mut files = vec![
        (object_file, super::super::golden::yaml(&captured.object)),
        (expect_file, expectation.to_string()),
    ];
    let mut secrets = 0;
    for object in &captured.cache {
        let kind = file_part(object, "/kind")?.to_ascii_lowercase();
        secrets += usize::from(kind == "secret");
        let file = match object.pointer("/metadata/namespace") {
            Some(_) => format!(
                "{kind}-{}-{}.yaml",
                file_part(object, "/metadata/namespace")?,
                file_part(object, "/metadata/name")?
            ),
            None => format!("{kind}-{}.yaml", file_part(object, "/metadata/name")?),
        };
        files.push((cache_dir.join(file), super::super::golden::yaml(object)));
    }
    std::fs::create_dir_all(&cache_dir)
        .with_context(|| format!("cannot create {}", cache_dir.display()))?;
    let mut written = Vec::new();
    for (path, text) in files {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path.display().to_string());
    }
    if secrets > 0 {
        tracing::warn!(secrets, dir = %cache_dir.display(), "the saved case holds Secrets: their data is in the files");
    }
    Ok(written)
}

/// A part of a file name taken from an object: a DNS-1123 subdomain or a kind name, so no
/// `/`, `..` or control character reaches a path.
fn file_part<'a>(object: &'a Value, pointer: &str) -> anyhow::Result<&'a str> {
    let value = object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("");
    let ok = if pointer == "/kind" {
        names::kind(value).is_ok()
    } else {
        names::dns_subdomain("name", value).is_ok()
    };
    if !ok || value.starts_with('.') {
        bail!(
            "--save-case: {pointer} {:?} cannot name a file",
            shown(value)
        );
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_flag_parses_namespaced_and_cluster_scoped_forms() {
        let s = Spec::parse("deployment/team-a/web").unwrap();
        assert_eq!(
            (s.kind.as_str(), s.namespace.as_deref(), s.name.as_str()),
            ("deployment", Some("team-a"), "web")
        );
        let s = Spec::parse("Namespace/team-a").unwrap();
        assert_eq!((s.namespace, s.name.as_str()), (None, "team-a"));
        for (bad, why) in [
            ("web", "is not KIND/NAMESPACE/NAME"),
            ("a/b/c/d", "is not KIND/NAMESPACE/NAME"),
            ("deploy/../web", "namespace"),
            ("deploy/ns/a?b", "the name"),
            ("deploy/ns/UPPER", "the name"),
            ("de ploy/ns/web", "is not a kind name"),
            ("deploy/ns/\u{1b}[2J", "\\u{1b}"),
        ] {
            let err = Spec::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains('\u{1b}'), "{err}");
        }
    }

    #[test]
    fn the_kind_is_matched_by_name_plural_and_group() {
        let deploy = KindRef::new("apps/v1", "Deployment");
        for typed in ["Deployment", "deployment", "deployments", "deployment.apps"] {
            let spec = Spec::parse(&format!("{typed}/ns/web")).unwrap();
            assert!(spec.names(&deploy, "deployments"), "{typed}");
        }
        for typed in ["deploy", "pod", "deployment.batch"] {
            let spec = Spec::parse(&format!("{typed}/ns/web")).unwrap();
            assert!(!spec.names(&deploy, "deployments"), "{typed}");
        }
        let cm = KindRef::new("v1", "ConfigMap");
        assert!(
            Spec::parse("configmap/ns/x")
                .unwrap()
                .names(&cm, "configmaps")
        );
    }

    #[test]
    fn the_object_budget_is_an_error_past_its_bound() {
        let mut budget = Budget {
            bounds: Bounds {
                max_objects: 2,
                max_bytes: 1,
            },
            objects: 0,
            bytes: 0,
        };
        budget.take_object("a").unwrap();
        budget.take_object("b").unwrap();
        let err = budget.take_object("c").unwrap_err().to_string();
        assert!(err.contains("more than 2 objects"), "{err}");
    }

    #[test]
    fn a_saved_case_uses_only_safe_file_names_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let captured = Captured {
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web", "namespace": "ns"}}),
            cache: vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "web", "namespace": "ns"}}),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
            ],
        };
        let written = save_case(dir.path(), &captured, "actions: []\n").unwrap();
        assert_eq!(written.len(), 4, "{written:?}");
        assert!(dir.path().join("web.object.yaml").is_file());
        assert!(dir.path().join("cache/configmap-ns-web.yaml").is_file());
        assert!(dir.path().join("cache/namespace-ns.yaml").is_file());
        let again = save_case(dir.path(), &captured, "actions: []\n").unwrap_err();
        assert!(again.to_string().contains("exists"), "{again}");

        let other = tempfile::tempdir().unwrap();
        for name in ["../escape", "a/b", "..", ""] {
            let bad = Captured {
                object: json!({"kind": "ConfigMap", "metadata": {"name": name}}),
                cache: vec![],
            };
            assert!(save_case(other.path(), &bad, "").is_err(), "{name:?}");
        }
        let bad_kind = Captured {
            object: json!({"kind": "ConfigMap", "metadata": {"name": "ok"}}),
            cache: vec![json!({"kind": "../x", "metadata": {"name": "ok"}})],
        };
        assert!(save_case(other.path(), &bad_kind, "").is_err());
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
    }
}
