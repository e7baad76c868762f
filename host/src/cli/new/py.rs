//! The Python scaffold: a plugin on kubeplug-sdk componentized with componentize-py.

use super::project::Project;

/// The Python project's own files: the plugin and a Makefile building it with
/// componentize-py (the checkout's and its SDK sources with `--sdk`, PyPI's without);
/// `owns` are the owned kinds as a kind constructor's arguments.
pub(super) fn files(project: &Project, owns: &[String]) -> Vec<(String, String)> {
    let owns_list = owns
        .iter()
        .map(|k| format!("kubeplug.kind({k})"))
        .collect::<Vec<_>>()
        .join(", ");
    let makefile = if project.sdk.is_some() {
        MAKEFILE_SDK
    } else {
        MAKEFILE_PACKAGE
    };
    vec![
        (
            "app.py".into(),
            project.fill(APP_PY).replace("{{owns}}", &owns_list),
        ),
        ("Makefile".into(), project.fill(makefile)),
        (
            ".gitignore".into(),
            "/.venv\n/*.wasm\n__pycache__/\n".into(),
        ),
    ]
}

/// app.py: the sample reconcile.
const APP_PY: &str = r#""""{{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.

The sample logic labels each object with ``{{label}}: {{name}}`` and leaves an object that
carries the label alone (so it never loops on its own write). Replace it with your
controller's, then tests/ and policy.yaml with what it does.
"""

import kubeplug
from kubeplug import actions

LABEL = "{{label}}"
NAME = "{{name}}"


class Plugin(kubeplug.Reconciler):
    def metadata(self):
        return kubeplug.Metadata(
            NAME, "0.1.0", reconciles=kubeplug.kind("{{api_version}}", "{{kind}}"), owns=[{{owns}}]
        )

    def reconcile(self, req):
        obj = req.object()
        if obj is None:
            return []  # deleted: nothing to undo
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL) == NAME:
            return []
        return [
            actions.merge_patch(req.target, {"metadata": {"labels": {LABEL: NAME}}}),
            actions.info(f"labelled {req.key()}"),
        ]


Reconciler = kubeplug.export(Plugin)
"#;

/// With `--sdk`: the checkout's componentize-py (its `make polyglot-toolchains` installs
/// it), SDK sources and WIT.
const MAKEFILE_SDK: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
# The SDK, WIT files and componentize-py come from the kubeplug checkout at SDK.
KUBEPLUG ?= kubeplug
SDK := {{sdk}}
COMPONENTIZE_PY := $(SDK)/.tools/py-venv/bin/componentize-py
WIT := $(SDK)/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

$(COMPONENTIZE_PY):
	$(MAKE) -C $(SDK) polyglot-toolchains

{{name}}.wasm: app.py $(COMPONENTIZE_PY)
	$(COMPONENTIZE_PY) -d $(WIT) -w plugin componentize -p . -p $(SDK)/plugin-sdk/python app -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

/// Without `--sdk`: kubeplug-sdk and componentize-py from PyPI in a virtualenv; the WIT
/// files ship in the SDK's package.
const MAKEFILE_PACKAGE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
KUBEPLUG ?= kubeplug
VENV := .venv
SITE = $(shell $(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

.PHONY: build test
build: {{name}}.wasm

$(VENV)/.installed:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet kubeplug-sdk==$(or $(KUBEPLUG_SDK_VERSION),{{sdk_version}}) componentize-py=={{componentize_py}}
	touch $@

{{name}}.wasm: app.py $(VENV)/.installed
	$(VENV)/bin/componentize-py -d $(SITE)/kubeplug/wit/v{{contract}} -w plugin componentize -p . -p $(SITE) app -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;
