//! The registry of kinds the sim serves: the built-in ones we use, plus custom kinds
//! registered at start-up (directly or from `CustomResourceDefinition` YAML).

use super::errors::ApiError;
use serde_json::Value;
use std::sync::Arc;

/// One served resource (a group/version/plural), with what the server needs to know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKind {
    /// API group, empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `deployments`.
    pub plural: String,
    /// Singular name (lower-case kind by default).
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource (spec and status writes separated).
    pub status_subresource: bool,
    /// Whether `/scale` is served (Deployments).
    pub scale_subresource: bool,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// Built-in kinds know strategic-merge list keys; custom kinds do not (like the real server).
    pub builtin: bool,
    /// Short names for kubectl (`deploy`).
    pub short_names: Vec<String>,
    /// Where its objects are stored.
    pub storage: Storage,
    /// The columns of `kubectl get` beyond NAME (a CRD's `additionalPrinterColumns`; empty
    /// for built-in kinds, whose columns the table module knows).
    pub printer_columns: Vec<PrinterColumn>,
    /// The CRD version's `openAPIV3Schema`: objects are pruned, defaulted and validated
    /// against it (the schema module); `None` stores them as sent.
    pub schema: Option<Arc<Value>>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The header, e.g. `Ready`.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint (`name`, `date-time`, ...), usually empty.
    pub format: String,
    /// Shown by `kubectl explain`-like tools.
    pub description: String,
    /// 0: always shown; higher: only with `-o wide`.
    pub priority: i64,
    /// The JSONPath evaluated against each object, e.g. `.status.mode`.
    pub json_path: String,
}

impl PrinterColumn {
    /// The `Age` column a CRD gets when it declares none.
    pub fn age() -> Self {
        Self {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }
    }
}

/// Where a kind's objects are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Storage {
    /// In its own store, under its resource name.
    #[default]
    Own,
    /// In the core `events` store, converted on the way in and out (`events.k8s.io/v1`
    /// Events, which a real API server keeps with the core ones).
    CoreEvents,
}

impl ResourceKind {
    /// A custom kind with defaults: singular from the kind, generation on, no subresources.
    pub fn custom(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            status_subresource: false,
            scale_subresource: false,
            generation: true,
            builtin: false,
            short_names: Vec::new(),
            storage: Storage::Own,
            printer_columns: Vec::new(),
            schema: None,
        }
    }

    /// Enables or disables the status subresource.
    pub fn with_status(mut self, status: bool) -> Self {
        self.status_subresource = status;
        self
    }

    /// `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps` or `pods`: the name used in error messages and as the storage key.
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The key of the store that holds its objects: its resource name, or the resource name of
    /// the kind it is a converted form of.
    pub fn storage_name(&self) -> String {
        match self.storage {
            Storage::Own => self.resource_name(),
            Storage::CoreEvents => "events".into(),
        }
    }

    /// A body in this kind's form, as stored.
    pub fn to_stored(&self, object: Value) -> Value {
        match self.storage {
            Storage::Own => object,
            Storage::CoreEvents => super::events::to_core(&object),
        }
    }

    /// A stored object in this kind's form (`None`: it is stored as it is served).
    pub fn from_stored(&self, object: &Value) -> Option<Value> {
        match self.storage {
            Storage::Own => None,
            Storage::CoreEvents => Some(super::events::from_core(object)),
        }
    }

    /// The list kind, e.g. `DeploymentList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// A built-in kind: strategic-merge list keys known, generation off unless set.
    fn builtin_kind(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
    ) -> Self {
        Self {
            builtin: true,
            generation: false,
            ..Self::custom(group, version, kind, plural, namespaced)
        }
    }
}

/// The set of served kinds.
#[derive(Debug, Clone)]
pub struct Registry {
    kinds: Vec<Arc<ResourceKind>>,
}

impl Registry {
    /// The built-in kinds: Deployments, Pods, Namespaces, ConfigMaps, Secrets, Events (both
    /// groups), Leases, CRDs, ServiceAccounts, and RBAC's Roles, ClusterRoles, RoleBindings
    /// and ClusterRoleBindings.
    pub fn builtin() -> Self {
        let deployments = ResourceKind {
            status_subresource: true,
            scale_subresource: true,
            generation: true,
            short_names: vec!["deploy".into()],
            ..ResourceKind::builtin_kind("apps", "v1", "Deployment", "deployments", true)
        };
        let pods = ResourceKind {
            status_subresource: true,
            generation: true,
            short_names: vec!["po".into()],
            ..ResourceKind::builtin_kind("", "v1", "Pod", "pods", true)
        };
        let namespaces = ResourceKind {
            status_subresource: true,
            short_names: vec!["ns".into()],
            ..ResourceKind::builtin_kind("", "v1", "Namespace", "namespaces", false)
        };
        let config_maps = ResourceKind {
            short_names: vec!["cm".into()],
            ..ResourceKind::builtin_kind("", "v1", "ConfigMap", "configmaps", true)
        };
        let secrets = ResourceKind::builtin_kind("", "v1", "Secret", "secrets", true);
        let events = ResourceKind {
            short_names: vec!["ev".into()],
            ..ResourceKind::builtin_kind("", "v1", "Event", "events", true)
        };
        let events_k8s = ResourceKind {
            short_names: vec!["ev".into()],
            storage: Storage::CoreEvents,
            ..ResourceKind::builtin_kind("events.k8s.io", "v1", "Event", "events", true)
        };
        let leases =
            ResourceKind::builtin_kind("coordination.k8s.io", "v1", "Lease", "leases", true);
        let crds = ResourceKind {
            status_subresource: true,
            generation: true,
            short_names: vec!["crd".into(), "crds".into()],
            ..ResourceKind::builtin_kind(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
            )
        };
        let service_accounts = ResourceKind {
            short_names: vec!["sa".into()],
            ..ResourceKind::builtin_kind("", "v1", "ServiceAccount", "serviceaccounts", true)
        };
        let rbac = |kind: &str, plural: &str, namespaced: bool| {
            ResourceKind::builtin_kind("rbac.authorization.k8s.io", "v1", kind, plural, namespaced)
        };
        Self {
            kinds: [
                deployments,
                pods,
                namespaces,
                config_maps,
                secrets,
                events,
                events_k8s,
                leases,
                crds,
                service_accounts,
                rbac("Role", "roles", true),
                rbac("ClusterRole", "clusterroles", false),
                rbac("RoleBinding", "rolebindings", true),
                rbac("ClusterRoleBinding", "clusterrolebindings", false),
            ]
            .into_iter()
            .map(Arc::new)
            .collect(),
        }
    }

    /// Registers a kind; a kind with the same group/version/plural is replaced.
    pub fn register(&mut self, kind: ResourceKind) {
        self.kinds.retain(|k| {
            !(k.group == kind.group && k.version == kind.version && k.plural == kind.plural)
        });
        self.kinds.push(Arc::new(kind));
    }

    /// All kinds, in registration order.
    pub fn all(&self) -> &[Arc<ResourceKind>] {
        &self.kinds
    }

    /// Looks up by group, version and plural (the path form).
    pub fn by_path(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .cloned()
    }

    /// Looks up by `apiVersion` and `kind` (the object form).
    pub fn by_type(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceKind>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.kind == kind)
            .cloned()
    }

    /// Looks up by `plural`, `plural.group`, kind or short name (case-insensitive), for the
    /// library's store accessors.
    pub fn by_name(&self, name: &str) -> Option<Arc<ResourceKind>> {
        let lower = name.to_lowercase();
        let (base, group) = match lower.split_once('.') {
            Some((b, g)) => (b.to_string(), Some(g.to_string())),
            None => (lower.clone(), None),
        };
        self.kinds
            .iter()
            .find(|k| {
                let name_match = k.plural == base
                    || k.singular == base
                    || k.kind.to_lowercase() == base
                    || k.short_names.contains(&base);
                name_match && group.as_deref().is_none_or(|g| g == k.group)
            })
            .cloned()
    }

    /// Looks up by storage key (`deployments.apps`, `pods`); the first registered version.
    pub fn by_resource(&self, resource: &str) -> Option<Arc<ResourceKind>> {
        self.kinds
            .iter()
            .find(|k| k.resource_name() == resource)
            .cloned()
    }

    /// Groups with their versions, in order of first registration (for `/apis`).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for k in &self.kinds {
            if k.group.is_empty() {
                continue;
            }
            match groups.iter_mut().find(|(g, _)| *g == k.group) {
                Some((_, versions)) if !versions.contains(&k.version) => {
                    versions.push(k.version.clone())
                }
                Some(_) => {}
                None => groups.push((k.group.clone(), vec![k.version.clone()])),
            }
        }
        groups
    }
}

/// Reads the kinds an `apiextensions.k8s.io/v1` `CustomResourceDefinition` defines (one per
/// served version).
pub fn kinds_from_crd(crd: &Value) -> Result<Vec<ResourceKind>, ApiError> {
    if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
        return Err(ApiError::bad_request("not a CustomResourceDefinition"));
    }
    let spec = crd
        .get("spec")
        .ok_or_else(|| ApiError::invalid("CustomResourceDefinition without spec"))?;
    let field = |v: &Value, path: &str| -> Result<String, ApiError> {
        v.pointer(path)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ApiError::invalid(format!("CustomResourceDefinition: missing {path}")))
    };
    let group = field(spec, "/group")?;
    let kind = field(spec, "/names/kind")?;
    let plural = field(spec, "/names/plural")?;
    let singular = spec
        .pointer("/names/singular")
        .and_then(Value::as_str)
        .map(str::to_string);
    let short_names: Vec<String> = spec
        .pointer("/names/shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Cluster") => false,
        Some("Namespaced") | None => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "CustomResourceDefinition: unknown scope {other}"
            )));
        }
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("CustomResourceDefinition: missing spec.versions"))?;
    let mut kinds = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version = field(v, "/name")?;
        let mut k = ResourceKind::custom(&group, &version, &kind, &plural, namespaced)
            .with_status(v.pointer("/subresources/status").is_some());
        if let Some(s) = &singular {
            k.singular = s.clone();
        }
        k.short_names = short_names.clone();
        k.printer_columns = printer_columns(v)?;
        k.schema = v
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| s.is_object())
            .map(|s| Arc::new(s.clone()));
        kinds.push(k);
    }
    if kinds.is_empty() {
        return Err(ApiError::invalid(
            "CustomResourceDefinition: no served version",
        ));
    }
    Ok(kinds)
}

/// A CRD version's `additionalPrinterColumns` (the real server's default, `Age`, when it
/// declares none).
fn printer_columns(version: &Value) -> Result<Vec<PrinterColumn>, ApiError> {
    let Some(columns) = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
    else {
        return Ok(vec![PrinterColumn::age()]);
    };
    let text = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).map(str::to_string);
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let missing = |f: &str| {
                ApiError::invalid(format!(
                    "CustomResourceDefinition: additionalPrinterColumns[{i}].{f}: Required value"
                ))
            };
            let json_path = text(c, "jsonPath").ok_or_else(|| missing("jsonPath"))?;
            if let Err(e) = super::jsonpath::JsonPath::parse(&json_path) {
                return Err(ApiError::invalid(format!(
                    "CustomResourceDefinition: additionalPrinterColumns[{i}].jsonPath: Invalid value: {json_path:?}: {e}"
                )));
            }
            Ok(PrinterColumn {
                name: text(c, "name").ok_or_else(|| missing("name"))?,
                type_: text(c, "type").ok_or_else(|| missing("type"))?,
                format: text(c, "format").unwrap_or_default(),
                description: text(c, "description").unwrap_or_default(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_yields_one_kind_per_served_version() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                    {"name": "v1beta1", "served": false, "storage": false}]}
        });
        let kinds = kinds_from_crd(&crd).unwrap();
        assert_eq!(kinds.len(), 1);
        assert_eq!(kinds[0].plural, "widgets");
        assert!(!kinds[0].namespaced);
        assert!(kinds[0].status_subresource);
        assert_eq!(kinds[0].short_names, vec!["wd".to_string()]);
    }

    #[test]
    fn lookup_by_name_forms() {
        let r = Registry::builtin();
        assert_eq!(r.by_name("deploy").unwrap().kind, "Deployment");
        assert_eq!(r.by_name("deployments.apps").unwrap().kind, "Deployment");
        assert_eq!(
            r.by_name("events.events.k8s.io").unwrap().group,
            "events.k8s.io"
        );
        assert!(r.by_name("widgets").is_none());
    }
}
