//! The files every project has, whatever its language: the policy granting exactly what the
//! sample reconcile does, the sample fixtures and their expectations, the README; and the
//! placeholders each template is filled with.

use super::{COMPONENTIZE_PY_VERSION, CONTRACT, Gvk, LABEL, Lang, SDK_VERSION};
use std::path::PathBuf;

/// Everything a template is filled with.
pub(super) struct Project {
    /// The plugin's name.
    pub name: String,
    /// Its language.
    pub lang: Lang,
    /// The kind it reconciles.
    pub reconciles: Gvk,
    /// The kinds it owns.
    pub owns: Vec<Gvk>,
    /// The checkout (absolute), with `--sdk`.
    pub sdk: Option<PathBuf>,
}

impl Project {
    /// The checkout `--sdk` named, as text.
    pub(super) fn sdk_str(&self) -> Option<String> {
        self.sdk.as_ref().map(|p| p.display().to_string())
    }

    /// `template` with every placeholder (`{{name}}`, `{{kind}}`, ...) filled in, but the
    /// language files' own (`{{owns}}`, `{{sdk_dependency}}`, `{{alias}}`).
    pub(super) fn fill(&self, template: &str) -> String {
        let sample_namespace = if self.reconciles.cluster_scoped() {
            String::new()
        } else {
            "\n  namespace: default".to_string()
        };
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.name.replace('-', "_"))
            .replace("{{api_version}}", &self.reconciles.api_version)
            .replace("{{kind}}", &self.reconciles.kind)
            .replace("{{contract}}", CONTRACT)
            .replace("{{sdk_version}}", SDK_VERSION)
            .replace("{{componentize_py}}", COMPONENTIZE_PY_VERSION)
            .replace("{{label}}", LABEL)
            .replace("{{label_path}}", &LABEL.replace('/', "~1"))
            .replace("{{sample_namespace}}", &sample_namespace)
            .replace(
                "{{target_namespace}}",
                &sample_namespace.replace("\n  ", "\n    "),
            )
            .replace(
                "{{sample_key}}",
                if self.reconciles.cluster_scoped() {
                    "sample"
                } else {
                    "default/sample"
                },
            )
            .replace("{{sdk}}", &self.sdk_str().unwrap_or_default())
    }

    /// The files of the project, by path relative to its folder.
    pub(super) fn files(&self) -> Vec<(String, String)> {
        let mut files = vec![
            ("policy.yaml".into(), self.fill(&self.policy())),
            (
                "tests/sample.object.yaml".into(),
                self.fill(&self.sample(false)),
            ),
            ("tests/sample.expect.yaml".into(), self.fill(EXPECT_PATCH)),
            (
                "tests/labelled.object.yaml".into(),
                self.fill(&self.sample(true)),
            ),
            (
                "tests/labelled.expect.yaml".into(),
                "# Already labelled: the plugin leaves it alone.\nactions: []\n".into(),
            ),
            ("README.md".into(), self.fill(&self.readme())),
        ];
        // Each owned kind as the arguments of a kind constructor: `"apps/v1", "Deployment"`.
        let owns: Vec<String> = self
            .owns
            .iter()
            .map(|g| format!("\"{}\", \"{}\"", g.api_version, g.kind))
            .collect();
        files.extend(match self.lang {
            Lang::Rust => super::rust::files(self, &owns),
            Lang::Ts => super::ts::files(self, &owns),
            Lang::Py => super::py::files(self, &owns),
        });
        files
    }

    /// The sample object's fixture, `labelled` already or not (a template).
    fn sample(&self, labelled: bool) -> String {
        let labels = if labelled {
            "\n  labels:\n    {{label}}: {{name}}"
        } else {
            ""
        };
        let spec = if self.reconciles.api_version == "apps/v1"
            && self.reconciles.kind == "Deployment"
        {
            "\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: sample}\n  template:\n    metadata:\n      labels: {app: sample}\n    spec:\n      containers:\n        - name: app\n          image: nginx:1.25\n"
        } else {
            "\n"
        };
        format!(
            "# A {{{{kind}}}} for `kubeplug test tests`; its expectation is in the .expect.yaml of the same name.\napiVersion: {{{{api_version}}}}\nkind: {{{{kind}}}}\nmetadata:\n  name: sample{{{{sample_namespace}}}}{labels}{spec}"
        )
    }

    /// The policy granting exactly the sample's patch (a template).
    fn policy(&self) -> String {
        let namespaces = if self.reconciles.cluster_scoped() {
            "  namespaces:\n    clusterScoped: true\n"
        } else {
            "  namespaces:\n    names: [default]\n"
        };
        let owns_note = if self.owns.is_empty() {
            String::new()
        } else {
            let kinds: Vec<String> = self
                .owns
                .iter()
                .map(|g| format!("{} {}", g.api_version, g.kind))
                .collect();
            format!(
                "# It declares that it owns {} (their changes enqueue their owner), but the sample\n# writes none of them yet: grant those writes (a rule each) when the reconcile makes them.\n",
                kinds.join(", ")
            )
        };
        format!(
            "# The policy the operator gives {{{{name}}}}: exactly what the sample reconcile does, one\n# label on {{{{kind}}}} objects. Widen it as the plugin grows; kubeplug denies (and audits) the rest.\n{owns_note}apiVersion: kubeplug.dev/v1alpha1\nkind: PluginPolicy\nmetadata:\n  name: {{{{name}}}}\nspec:\n  mode: enforce\n{namespaces}  rules:\n    - apiVersion: {{{{api_version}}}}\n      kind: {{{{kind}}}}\n      verbs: [patch]\n      fields:\n        - /metadata/labels/{{{{label_path}}}}\n  limits:\n    writesPerSecond: 5\n    writeBurst: 10\n"
        )
    }

    /// The project's README (a template).
    fn readme(&self) -> String {
        let (lang, source, sdk) = match self.lang {
            Lang::Rust => ("Rust", "src/lib.rs", "kubeplug-sdk (crates.io)"),
            Lang::Ts => ("TypeScript", "plugin.ts", "kubeplug-sdk (npm)"),
            Lang::Py => ("Python", "app.py", "kubeplug-sdk (PyPI)"),
        };
        let sdk = match &self.sdk {
            Some(_) => "the SDK of the kubeplug checkout at {{sdk}}".to_string(),
            None => sdk.to_string(),
        };
        format!(
            "# {{{{name}}}}\n\nA kubeplug plugin in {lang} (contract {{{{contract}}}}, {sdk}). It reconciles\n`{{{{api_version}}}}` `{{{{kind}}}}` objects ({source}).\n\n- `make build` writes `{{{{name}}}}.wasm`.\n- `make test` builds it and runs `kubeplug test tests --plugin {{{{name}}}}.wasm --faults`: each\n  `tests/NAME.object.yaml` is reconciled and its actions compared with `NAME.expect.yaml`,\n  then run to a fixed point under faults (stale reads, a child not yet visible, the same\n  event twice, a crash between two writes).\n  Record a new expectation with\n  `kubeplug eval --plugin {{{{name}}}}.wasm --object tests/NAME.object.yaml --format yaml > tests/NAME.expect.yaml`.\n- Run it: copy `{{{{name}}}}.wasm` into the host's plugins folder and `policy.yaml` to\n  `{{{{name}}}}.policy.yaml` in its policies folder (`kubeplug run --plugins DIR --policies DIR`).\n"
        )
    }
}

/// The expectation of the unlabelled sample, identical in every language.
const EXPECT_PATCH: &str = "# What the plugin returns for sample.object.yaml (record it again with\n# `kubeplug eval --plugin {{name}}.wasm --object tests/sample.object.yaml --format yaml`).\nactions:\n- action: patch\n  target:\n    apiVersion: {{api_version}}\n    kind: {{kind}}{{target_namespace}}\n    name: sample\n  patchType: merge\n  body:\n    metadata:\n      labels:\n        {{label}}: {{name}}\n- action: log\n  level: info\n  message: labelled {{sample_key}}\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Action, ObjectRef, PatchType, Scope};
    use crate::policy::{Grants, PolicyDocument};
    use serde_json::{Value, json};
    use std::path::Path;

    fn project(lang: Lang, reconciles: &str, owns: &[&str]) -> Project {
        Project {
            name: "my-plugin".into(),
            lang,
            reconciles: Gvk::parse(reconciles, "--reconciles").unwrap(),
            owns: owns
                .iter()
                .map(|o| Gvk::parse(o, "--owns").unwrap())
                .collect(),
            sdk: None,
        }
    }

    fn file<'a>(files: &'a [(String, String)], name: &str) -> &'a str {
        &files.iter().find(|(p, _)| p == name).unwrap().1
    }

    /// The policy grants the sample's patch and nothing wider: not another label, not
    /// another kind, not another namespace.
    #[test]
    fn the_policy_grants_exactly_the_sample_patch() {
        for (reconciles, namespace) in [
            ("apps/v1/Deployment", Some("default")),
            ("example.com/v1/Widget", Some("default")),
            ("v1/Namespace", None),
        ] {
            let p = project(Lang::Rust, reconciles, &["v1/ConfigMap"]);
            let files = p.files();
            let doc = PolicyDocument::parse(file(&files, "policy.yaml"), Path::new("policy.yaml"))
                .unwrap();
            assert_eq!(doc.metadata.name, "my-plugin");
            let grants = Grants::from_spec(&doc.spec.grants).unwrap();
            let target = ObjectRef {
                api_version: p.reconciles.api_version.clone(),
                kind: p.reconciles.kind.clone(),
                namespace: namespace.map(str::to_string),
                name: "sample".into(),
            };
            let scope = if namespace.is_some() {
                Scope::Namespaced
            } else {
                Scope::Cluster
            };
            let patch = |target: &ObjectRef, body: Value| Action::Patch {
                target: target.clone(),
                patch_type: PatchType::Merge,
                subresource: None,
                body,
            };
            let expected = sample_label();
            grants
                .check(&patch(&target, expected.clone()), scope)
                .unwrap_or_else(|d| panic!("{reconciles}: {d:?}"));
            let other_label = json!({"metadata": {"labels": {"team": "x"}}});
            assert!(grants.check(&patch(&target, other_label), scope).is_err());
            let mut other_kind = target.clone();
            other_kind.kind = "Other".into();
            assert!(
                grants
                    .check(&patch(&other_kind, expected.clone()), scope)
                    .is_err()
            );
            if namespace.is_some() {
                let mut elsewhere = target.clone();
                elsewhere.namespace = Some("kube-system".into());
                assert!(grants.check(&patch(&elsewhere, expected), scope).is_err());
            }
            assert!(file(&files, "policy.yaml").contains("owns v1 ConfigMap"));
        }
    }

    fn sample_label() -> Value {
        json!({"metadata": {"labels": {LABEL: "my-plugin"}}})
    }

    #[test]
    fn the_expectation_and_fixtures_are_what_eval_reads() {
        for lang in [Lang::Rust, Lang::Ts, Lang::Py] {
            for reconciles in ["apps/v1/Deployment", "v1/Namespace"] {
                let files = project(lang, reconciles, &[]).files();
                let expectation = crate::cli::golden::Expectation::parse(file(
                    &files,
                    "tests/sample.expect.yaml",
                ))
                .unwrap();
                assert_eq!(expectation.action_count(), 2);
                for object in ["tests/sample.object.yaml", "tests/labelled.object.yaml"] {
                    let docs =
                        crate::manifest::parse_documents(file(&files, object), object).unwrap();
                    assert_eq!(docs.len(), 1);
                    assert_eq!(
                        docs[0]["metadata"].get("namespace").is_some(),
                        reconciles.starts_with("apps"),
                        "{object}"
                    );
                }
            }
        }
    }

    #[test]
    fn owned_kinds_reach_the_metadata_of_each_language() {
        let owns = ["v1/ConfigMap", "apps/v1/Deployment"];
        let rust = project(Lang::Rust, "example.com/v1/Widget", &owns).files();
        assert!(file(&rust, "src/lib.rs").contains(
            ".owns_kind(KindRef::new(\"v1\", \"ConfigMap\"))\n            .owns_kind(KindRef::new(\"apps/v1\", \"Deployment\"))"
        ));
        assert!(file(&rust, "src/lib.rs").contains("KindRef::new(\"example.com/v1\", \"Widget\")"));
        let ts = project(Lang::Ts, "example.com/v1/Widget", &owns).files();
        assert!(
            file(&ts, "plugin.ts")
                .contains("owns: [kind(\"v1\", \"ConfigMap\"), kind(\"apps/v1\", \"Deployment\")]")
        );
        let py = project(Lang::Py, "example.com/v1/Widget", &owns).files();
        assert!(file(&py, "app.py").contains(
            "owns=[kubeplug.kind(\"v1\", \"ConfigMap\"), kubeplug.kind(\"apps/v1\", \"Deployment\")]"
        ));
        let none = project(Lang::Ts, "example.com/v1/Widget", &[]).files();
        assert!(file(&none, "plugin.ts").contains("owns: []"));
        assert!(!file(&none, "policy.yaml").contains("owns"));
    }

    #[test]
    fn no_placeholder_is_left_unfilled() {
        for lang in [Lang::Rust, Lang::Ts, Lang::Py] {
            for sdk in [None, Some(PathBuf::from("/opt/kubeplug"))] {
                let mut p = project(lang, "apps/v1/Deployment", &["v1/Pod"]);
                p.sdk = sdk.clone();
                for (path, text) in p.files() {
                    if path == "Cargo.lock" {
                        continue;
                    }
                    assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
                    if sdk.is_some() && path == "Makefile" && lang != Lang::Rust {
                        assert!(text.contains("/opt/kubeplug"), "{path}: {text}");
                    }
                }
            }
        }
    }
}
