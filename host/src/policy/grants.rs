//! What a policy grants, compiled for checking: namespaces, kinds to read, and per kind the
//! verbs and field paths.

use super::document::{NamespacesSpec, PolicySpec, Verb};
use super::paths::FieldPattern;
use crate::contract::KindRef;
use std::collections::{BTreeSet, HashMap};

/// Namespaces a plugin may see and touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace, and cluster-scoped objects.
    All,
    /// Only these namespaces; no cluster-scoped objects.
    Only(BTreeSet<String>),
}

impl Namespaces {
    /// Whether an object in `namespace` (`None`: cluster-scoped) is granted.
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        match (self, namespace) {
            (Namespaces::All, _) => true,
            (Namespaces::Only(names), Some(ns)) => names.contains(ns),
            (Namespaces::Only(_), None) => false,
        }
    }

    fn from_spec(spec: &NamespacesSpec) -> Self {
        if spec.all {
            Namespaces::All
        } else {
            Namespaces::Only(spec.names.iter().cloned().collect())
        }
    }
}

/// What a plugin may do to one kind.
#[derive(Debug, Clone)]
pub struct Rule {
    pub verbs: BTreeSet<Verb>,
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
    pub namespaces: Namespaces,
    /// Kinds readable through the cache imports beyond the reconciled and owned ones.
    pub reads: BTreeSet<KindRef>,
    pub rules: Rules,
}

impl Grants {
    /// The grants of a plugin without a policy document (which runs in dry-run): it sees
    /// every namespace of the host's scope, reads only what it reconciles and owns, and
    /// every action it returns is checked as allowed, recorded and not sent.
    pub fn unconfigured() -> Self {
        Grants {
            namespaces: Namespaces::All,
            reads: BTreeSet::new(),
            rules: Rules::Any,
        }
    }

    /// Compiles a validated spec (field patterns were checked when parsing).
    pub fn from_spec(spec: &PolicySpec) -> Result<Self, super::paths::PathError> {
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
    fn namespace_grants() {
        let only = Namespaces::Only(["a".to_string()].into());
        assert!(only.allows(Some("a")));
        assert!(!only.allows(Some("b")));
        assert!(!only.allows(None));
        assert!(Namespaces::All.allows(Some("b")) && Namespaces::All.allows(None));
        let none = Namespaces::from_spec(&NamespacesSpec::default());
        assert!(!none.allows(Some("default")));
    }

    #[test]
    fn rules_for_one_kind_merge() {
        let spec: PolicySpec = serde_json::from_value(serde_json::json!({
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
}
