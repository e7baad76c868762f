//! What a policy grants, compiled for checking: namespaces, kinds to read, and per kind the
//! verbs and field paths.

use super::document::{GrantsSpec, NamespacesSpec, Verb};
use super::paths::FieldPattern;
use crate::contract::KindRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

/// Namespaces a plugin may see and touch.
#[derive(Debug, Clone)]
pub enum Namespaces {
    /// Every namespace; cluster-scoped objects may be read and queued (as before the
    /// cluster-scope grant existed), but writing them takes [`Grants::cluster_scoped`].
    All,
    /// Only these namespaces, and those the selector matches; cluster-scoped objects only
    /// with `cluster` (the cluster-scope grant).
    Only {
        /// Namespaces granted by name.
        names: BTreeSet<String>,
        /// Namespaces granted by label.
        selector: Option<Arc<NamespaceSelector>>,
        /// Whether cluster-scoped objects may be read, queued and (per the rules) written.
        cluster: bool,
    },
}

/// Where a namespace's labels are looked up: the host's `v1 Namespace` cache, seen through
/// this trait so that policies need not know the caches.
pub trait NamespaceLabels: Send + Sync {
    /// Whether `namespace` exists and carries every label of `match_labels`.
    fn has_labels(&self, namespace: &str, match_labels: &BTreeMap<String, String>) -> bool;
}

/// Namespaces whose labels match, looked up in the host's Namespace cache. A policy read
/// from a file has no cache yet (and matches nothing by labels: `kubeplug eval` has no
/// cluster); the controller binds a copy to its Namespace cache when it builds the plugin's
/// version ([`Policy::bind_namespaces`](super::Policy::bind_namespaces)), so a policy in use
/// is complete and never changes after it is built.
pub struct NamespaceSelector {
    match_labels: BTreeMap<String, String>,
    namespaces: Option<Arc<dyn NamespaceLabels>>,
}

impl fmt::Debug for NamespaceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceSelector")
            .field("match_labels", &self.match_labels)
            .field("bound", &self.namespaces.is_some())
            .finish()
    }
}

impl NamespaceSelector {
    /// A selector on `match_labels`, bound to no cache yet.
    pub fn new(match_labels: BTreeMap<String, String>) -> Self {
        NamespaceSelector {
            match_labels,
            namespaces: None,
        }
    }

    /// The same selector looking labels up in `namespaces` (the cache of `v1 Namespace`).
    pub fn bound(&self, namespaces: Arc<dyn NamespaceLabels>) -> Self {
        NamespaceSelector {
            match_labels: self.match_labels.clone(),
            namespaces: Some(namespaces),
        }
    }

    fn matches(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_some_and(|labels| labels.has_labels(namespace, &self.match_labels))
    }
}

impl Namespaces {
    /// Whether an object in `namespace` (`None`: cluster-scoped) may be read and queued.
    /// Writes are checked by [`Grants::check`], where only the cluster-scope grant allows
    /// cluster-scoped objects.
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        match (self, namespace) {
            (Namespaces::All, _) => true,
            (
                Namespaces::Only {
                    names, selector, ..
                },
                Some(ns),
            ) => names.contains(ns) || selector.as_ref().is_some_and(|s| s.matches(ns)),
            (Namespaces::Only { cluster, .. }, None) => *cluster,
        }
    }

    /// The label selector, if namespaces are (also) granted by labels.
    pub fn selector(&self) -> Option<&Arc<NamespaceSelector>> {
        match self {
            Namespaces::Only { selector, .. } => selector.as_ref(),
            Namespaces::All => None,
        }
    }

    /// The same grant with its label selector (if any) bound to `namespaces`.
    pub fn bound(&self, namespaces: Arc<dyn NamespaceLabels>) -> Self {
        match self {
            Namespaces::Only {
                names,
                selector,
                cluster,
            } => Namespaces::Only {
                names: names.clone(),
                selector: selector.as_ref().map(|s| Arc::new(s.bound(namespaces))),
                cluster: *cluster,
            },
            Namespaces::All => Namespaces::All,
        }
    }

    fn from_spec(spec: &NamespacesSpec) -> Self {
        if spec.all {
            return Namespaces::All;
        }
        Namespaces::Only {
            cluster: spec.cluster_scoped,
            names: spec.names.iter().cloned().collect(),
            selector: spec
                .selector
                .as_ref()
                .map(|s| Arc::new(NamespaceSelector::new(s.match_labels.clone()))),
        }
    }
}

/// What a plugin may do to one kind.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The writes granted.
    pub verbs: BTreeSet<Verb>,
    /// The field paths patches and creates may set.
    pub fields: Vec<FieldPattern>,
}

/// Writes granted per kind.
#[derive(Debug, Clone)]
pub enum Rules {
    /// Every verb on every kind, every field: only for plugins without a policy, which run
    /// in dry-run, so their audit shows everything they would do.
    Any,
    /// Exactly these.
    Only(HashMap<KindRef, Rule>),
}

/// The grants of one plugin.
#[derive(Debug, Clone)]
pub struct Grants {
    /// Where the plugin may read and write.
    pub namespaces: Namespaces,
    /// Whether writes to cluster-scoped objects are granted (`namespaces.clusterScoped`).
    pub cluster_scoped: bool,
    /// Kinds readable through the cache imports beyond the reconciled one (see
    /// [`Grants::readable`]).
    pub reads: BTreeSet<KindRef>,
    /// The writes granted per kind.
    pub rules: Rules,
}

impl Grants {
    /// The grants of a plugin without a policy document (which runs in dry-run): it sees
    /// every namespace of the host's scope, reads only the kind it reconciles, and
    /// every action it returns is checked as allowed, recorded and not sent.
    pub fn unconfigured() -> Self {
        Grants {
            namespaces: Namespaces::All,
            cluster_scoped: true,
            reads: BTreeSet::new(),
            rules: Rules::Any,
        }
    }
    /// Whether these grants let a plugin reconcile `kind`: a written policy must name it (in
    /// `reads` or a rule), since its objects are handed to every call; without a policy
    /// (`Rules::Any`) the plugin previews in dry-run whatever kind it declares.
    pub fn allows_reconciling(&self, kind: &KindRef) -> bool {
        match &self.rules {
            Rules::Any => true,
            Rules::Only(rules) => rules.contains_key(kind) || self.reads.contains(kind),
        }
    }

    /// The kinds a plugin reconciling `reconciled` and declaring it owns `owns` may read
    /// through the cache imports, `reconciled` first: the kinds in `reads`, and each owned
    /// kind a rule grants a write on (`patch`, `patch-status`, `create` or `delete`: the
    /// operator let it manage those children, which needs their current state; they are
    /// watched anyway, to route a child's change to its owner). An owned kind without such
    /// a rule, or with only `event`, is not readable, and neither is a kind only a rule
    /// names (list it in `reads`). Without a policy: only `reconciled`.
    pub fn readable(&self, reconciled: &KindRef, owns: &[KindRef]) -> Vec<KindRef> {
        let mut kinds = vec![reconciled.clone()];
        let written = |kind: &KindRef| match &self.rules {
            Rules::Only(rules) => rules
                .get(kind)
                .is_some_and(|r| r.verbs.iter().any(|v| *v != Verb::Event)),
            Rules::Any => false,
        };
        let granted = self.reads.iter().chain(owns.iter().filter(|k| written(k)));
        for kind in granted {
            if !kinds.contains(kind) {
                kinds.push(kind.clone());
            }
        }
        kinds
    }

    /// Compiles a validated spec (field patterns were checked when parsing).
    pub fn from_spec(spec: &GrantsSpec) -> Result<Self, super::paths::PathError> {
        let mut rules: HashMap<KindRef, Rule> = HashMap::new();
        for r in &spec.rules {
            let rule = rules
                .entry(KindRef::new(&r.api_version, &r.kind))
                .or_insert_with(|| Rule {
                    verbs: BTreeSet::new(),
                    fields: Vec::new(),
                });
            rule.verbs.extend(r.verbs.iter().copied());
            for f in &r.fields {
                rule.fields.push(FieldPattern::parse(f)?);
            }
        }
        Ok(Grants {
            namespaces: Namespaces::from_spec(&spec.namespaces),
            cluster_scoped: spec.namespaces.cluster_scoped,
            reads: spec
                .reads
                .iter()
                .map(|k| KindRef::new(&k.api_version, &k.kind))
                .collect(),
            rules: Rules::Only(rules),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_policy_must_name_the_reconciled_kind() {
        let spec =
            |v: serde_json::Value| Grants::from_spec(&serde_json::from_value(v).unwrap()).unwrap();
        let secret = KindRef::new("v1", "Secret");
        let deploy = KindRef::deployment();
        let rules = spec(serde_json::json!({"rules": [{"apiVersion": "apps/v1",
            "kind": "Deployment", "verbs": ["event"]}]}));
        assert!(rules.allows_reconciling(&deploy));
        assert!(!rules.allows_reconciling(&secret));
        let reads = spec(serde_json::json!({"reads": [{"apiVersion": "v1", "kind": "Secret"}]}));
        assert!(reads.allows_reconciling(&secret) && !reads.allows_reconciling(&deploy));
        assert!(!spec(serde_json::json!({})).allows_reconciling(&deploy));
    }

    #[test]
    fn namespace_grants() {
        let only = Namespaces::Only {
            names: ["a".to_string()].into(),
            selector: None,
            cluster: false,
        };
        assert!(only.allows(Some("a")));
        assert!(!only.allows(Some("b")));
        assert!(!only.allows(None));
        assert!(Namespaces::All.allows(Some("b")) && Namespaces::All.allows(None));
        let none = Namespaces::from_spec(&NamespacesSpec::default());
        assert!(!none.allows(Some("default")));
        // The cluster-scope grant also lets cluster-scoped objects be read and queued.
        let cluster = Namespaces::from_spec(&NamespacesSpec {
            names: vec!["a".into()],
            cluster_scoped: true,
            ..NamespacesSpec::default()
        });
        assert!(cluster.allows(None) && cluster.allows(Some("a")) && !cluster.allows(Some("b")));
    }

    #[test]
    fn label_selected_namespaces_follow_the_namespace_cache() {
        let spec: NamespacesSpec = serde_json::from_value(serde_json::json!({
            "names": ["listed"], "selector": {"matchLabels": {"tenant": "a"}}
        }))
        .unwrap();
        let grant = Namespaces::from_spec(&spec);
        assert!(
            !grant.allows(Some("team-a")),
            "bound to no cache: nothing matches by labels"
        );
        /// Namespaces and their `tenant` label, as the Namespace cache would hold them.
        struct Tenants(BTreeMap<&'static str, &'static str>);
        impl NamespaceLabels for Tenants {
            fn has_labels(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
                self.0
                    .get(namespace)
                    .is_some_and(|tenant| labels.iter().all(|(k, v)| k == "tenant" && v == tenant))
            }
        }
        let cache = Tenants(BTreeMap::from([("team-a", "a"), ("team-b", "b")]));
        let unbound = grant;
        let grant = unbound.bound(Arc::new(cache));
        assert!(!unbound.allows(Some("team-a")), "binding makes a copy");
        assert!(grant.allows(Some("team-a")));
        assert!(!grant.allows(Some("team-b")));
        assert!(grant.allows(Some("listed")));
        assert!(!grant.allows(Some("unknown")) && !grant.allows(None));
    }

    #[test]
    fn rules_for_one_kind_merge() {
        let spec: GrantsSpec = serde_json::from_value(serde_json::json!({
            "rules": [
                {"apiVersion": "v1", "kind": "Pod", "verbs": ["patch"], "fields": ["/a"]},
                {"apiVersion": "v1", "kind": "Pod", "verbs": ["delete"], "fields": ["/b"]}
            ],
            "reads": [{"apiVersion": "v1", "kind": "ConfigMap"}]
        }))
        .unwrap();
        let g = Grants::from_spec(&spec).unwrap();
        let Rules::Only(rules) = &g.rules else {
            panic!("rules")
        };
        let pod = &rules[&KindRef::new("v1", "Pod")];
        assert_eq!(pod.verbs, [Verb::Patch, Verb::Delete].into());
        assert_eq!(pod.fields.len(), 2);
        assert!(g.reads.contains(&KindRef::new("v1", "ConfigMap")));
    }

    #[test]
    fn reads_come_from_the_policy_only() {
        let kind = |k: &str| KindRef::new("v1", k);
        let owns = [
            kind("ConfigMap"),
            kind("Pod"),
            kind("Secret"),
            kind("Service"),
        ];
        let reconciled = KindRef::deployment();
        assert_eq!(
            Grants::unconfigured().readable(&reconciled, &owns),
            std::slice::from_ref(&reconciled),
            "no policy: only the reconciled kind, whatever the plugin declares"
        );
        let spec: GrantsSpec = serde_json::from_value(serde_json::json!({
            "rules": [
                {"apiVersion": "v1", "kind": "ConfigMap", "verbs": ["create", "delete"]},
                {"apiVersion": "v1", "kind": "Pod", "verbs": ["patch-status"]},
                {"apiVersion": "v1", "kind": "Secret", "verbs": ["event"]},
                {"apiVersion": "v1", "kind": "Service", "verbs": []},
                {"apiVersion": "v1", "kind": "Endpoints", "verbs": ["patch"]}
            ],
            "reads": [{"apiVersion": "v1", "kind": "Node"}]
        }))
        .unwrap();
        let readable = Grants::from_spec(&spec)
            .unwrap()
            .readable(&reconciled, &owns);
        let names: Vec<&str> = readable.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(
            names,
            ["Deployment", "Node", "ConfigMap", "Pod"],
            "{readable:?}"
        );
    }
}
