//! The TypeScript scaffold: a plugin on kubeplug-sdk componentized with jco.

use super::project::Project;

/// The TypeScript project's own files: the plugin, its bundler options, package.json and
/// a Makefile building it with jco (the checkout's and its SDK sources with `--sdk`, npm's
/// without); `owns` are the owned kinds as a kind constructor's arguments.
pub(super) fn files(project: &Project, owns: &[String]) -> Vec<(String, String)> {
    let owns_list = owns
        .iter()
        .map(|k| format!("kind({k})"))
        .collect::<Vec<_>>()
        .join(", ");
    let (makefile, alias) = match &project.sdk {
        Some(_) => (
            MAKEFILE_SDK,
            "\n  resolve: { alias: { \"kubeplug-sdk\": \"{{sdk}}/plugin-sdk/js/src/index.ts\" } },",
        ),
        None => (MAKEFILE_PACKAGE, ""),
    };
    vec![
        (
            "plugin.ts".into(),
            project.fill(PLUGIN_TS).replace("{{owns}}", &owns_list),
        ),
        ("Makefile".into(), project.fill(makefile)),
        (
            "bundle.config.js".into(),
            project.fill(&BUNDLE_CONFIG.replace("{{alias}}", alias)),
        ),
        ("package.json".into(), project.fill(PACKAGE_JSON)),
        (".gitignore".into(), "/node_modules\n/*.wasm\n".into()),
    ]
}

/// plugin.ts: the sample reconcile.
const PLUGIN_TS: &str = r#"/**
 * {{name}}: a kubeplug plugin that reconciles {{api_version}} {{kind}} objects.
 *
 * The sample logic labels each object with `{{label}}: {{name}}` and leaves an object that
 * carries the label alone (so it never loops on its own write). Replace it with your
 * controller's, then tests/ and policy.yaml with what it does.
 */
import { type Action, type Reconciler, Request, actions, exportReconciler, kind, metadata } from "kubeplug-sdk";

const LABEL = "{{label}}";
const NAME = "{{name}}";

interface Labelled {
  metadata?: { labels?: { [key: string]: string } };
}

class Plugin implements Reconciler {
  metadata() {
    return metadata(NAME, "0.1.0", { reconciles: kind("{{api_version}}", "{{kind}}"), owns: [{{owns}}] });
  }

  reconcile(req: Request): Action[] {
    const object = req.object<Labelled>();
    if (object === undefined) return []; // deleted: nothing to undo
    if (object.metadata?.labels?.[LABEL] === NAME) return [];
    return [
      actions.mergePatch(req.target, { metadata: { labels: { [LABEL]: NAME } } }),
      actions.info(`labelled ${req.key()}`),
    ];
  }
}

export const reconciler = exportReconciler(new Plugin());
"#;

/// bundle.config.js (`{{alias}}`: where kubeplug-sdk resolves, with `--sdk`).
const BUNDLE_CONFIG: &str = r#"// Options for the bundler `jco componentize` runs: the contract's imports come from the host.
export default {
  external: [/^kubeplug:plugin\//],{{alias}}
};
"#;

/// package.json: the SDK and the toolchain from npm.
const PACKAGE_JSON: &str = r#"{
  "name": "{{name}}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "dependencies": {
    "kubeplug-sdk": "^{{sdk_version}}"
  },
  "devDependencies": {
    "@bytecodealliance/componentize-js": "0.22.0",
    "@bytecodealliance/jco": "1.35.0"
  },
  "overrides": {
    "@bytecodealliance/preview2-shim": "0.25.0"
  }
}
"#;

/// With `--sdk`: the checkout's jco (its `make polyglot-toolchains` installs it) and WIT.
const MAKEFILE_SDK: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
# The SDK, WIT files and jco come from the kubeplug checkout at SDK.
KUBEPLUG ?= kubeplug
SDK := {{sdk}}
JCO := $(SDK)/plugin-sdk/js/node_modules/.bin/jco
WIT := $(SDK)/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

$(JCO):
	$(MAKE) -C $(SDK) polyglot-toolchains

{{name}}.wasm: plugin.ts bundle.config.js $(JCO)
	$(JCO) componentize plugin.ts -w $(WIT) -n plugin -d http fetch-event --bundle-config bundle.config.js -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;

/// Without `--sdk`: the SDK and jco from npm; the WIT files ship in the SDK's package.
const MAKEFILE_PACKAGE: &str = r#"# make build: {{name}}.wasm; make test: build, then its golden tests (kubeplug test).
KUBEPLUG ?= kubeplug
JCO := node_modules/.bin/jco
WIT := node_modules/kubeplug-sdk/wit/v{{contract}}

.PHONY: build test
build: {{name}}.wasm

node_modules/.installed: package.json
	npm install --no-audit --no-fund
	touch $@

{{name}}.wasm: plugin.ts bundle.config.js node_modules/.installed
	$(JCO) componentize plugin.ts -w $(WIT) -n plugin -d http fetch-event --bundle-config bundle.config.js -o $@

test: build
	$(KUBEPLUG) test tests --plugin {{name}}.wasm --faults
"#;
