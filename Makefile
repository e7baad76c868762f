# The two commands a newcomer needs: `make demo` and `make test`.
CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
WASM_TARGET := wasm32-wasip2
WASM_OUT := $(TARGET_DIR)/$(WASM_TARGET)/plugin
REFERENCE_PLUGINS := image-pinner change-logger sample-controller customcluster
TEST_PLUGINS := hostile hostile-meta future-contract pinner-v1 pinner-v2 pinner-v3 greedy-reader
export KUBEPLUG_PLUGIN_DIR := $(TARGET_DIR)/plugins
export KUBEPLUG_TEST_PLUGIN_DIR := $(TARGET_DIR)/test-plugins
# Where `make demo` serves the dashboard, /metrics and /plugins.
KUBEPLUG_DEMO_LISTEN ?= 127.0.0.1:8080

.PHONY: setup plugins test test-deps demo lint bench

## setup: install the wasm target the plugins build for
setup:
	rustup target add $(WASM_TARGET)

## plugins: build every plugin to a .wasm component (reference ones into target/plugins)
plugins: setup
	$(CARGO) build --profile plugin --target $(WASM_TARGET) $(addprefix -p ,$(REFERENCE_PLUGINS) $(TEST_PLUGINS))
	mkdir -p $(KUBEPLUG_PLUGIN_DIR) $(KUBEPLUG_TEST_PLUGIN_DIR)
	for p in $(REFERENCE_PLUGINS); do cp $(WASM_OUT)/$$(echo $$p | tr - _).wasm $(KUBEPLUG_PLUGIN_DIR)/$$p.wasm; done
	for p in $(TEST_PLUGINS); do cp $(WASM_OUT)/$$(echo $$p | tr - _).wasm $(KUBEPLUG_TEST_PLUGIN_DIR)/$$p.wasm; done

# Installs Debian packages without starting their services (a policy-rc.d refusal while
# apt-get runs, as in Docker images; kept if one is already there): nothing is left running.
APT_INSTALL_QUIET = apt-get update -qq && if [ -e /usr/sbin/policy-rc.d ]; then \
	apt-get install -y -qq --no-install-recommends $(1) >/dev/null; else \
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT; printf '\043!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && \
	chmod +x /usr/sbin/policy-rc.d && apt-get install -y -qq --no-install-recommends $(1) >/dev/null; fi

## test-deps: what the tests need besides Rust, when missing: Chromium for the dashboard test,
## docker-registry (CNCF distribution) for the OCI tests and Prometheus (with promtool) for
## the alert rules' tests (Debian's packages; where one cannot be installed, its tests skip
## and say why, except under CI=true, where a missing dependency fails)
test-deps:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		{ echo "chromium could not be installed: the dashboard test will skip (and fail under CI=true)"; [ "$$CI" != true ]; }
	@command -v docker-registry >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq docker-registry >/dev/null) || \
		{ echo "docker-registry could not be installed: the OCI tests will skip (and fail under CI=true)"; [ "$$CI" != true ]; }
	@(command -v prometheus && command -v promtool) >/dev/null 2>&1 || ($(call APT_INSTALL_QUIET,prometheus)) || \
		{ echo "prometheus could not be installed: the alert rules' tests will skip (and fail under CI=true)"; [ "$$CI" != true ]; }

## prometheus-rules: check host/deploy/prometheus/rules.yaml and run its unit tests
## (promtool test rules host/deploy/prometheus/tests/*.yaml)
.PHONY: prometheus-rules
prometheus-rules: test-deps
	@if command -v promtool >/dev/null 2>&1; then \
		promtool check rules host/deploy/prometheus/rules.yaml && \
		promtool test rules host/deploy/prometheus/tests/*.yaml; \
	else echo "no promtool: the alert rules' unit tests are skipped (they fail under CI=true)"; [ "$$CI" != true ]; fi

## test: build the plugins, then run the alert rules' unit tests and every test of the workspace
## (CARGO_TEST_FLAGS adds cargo flags, e.g. --timings to see where a cold build's time goes)
CARGO_TEST_FLAGS ?=
test: plugins test-deps prometheus-rules
	$(CARGO) test --workspace $(CARGO_TEST_FLAGS)

## chaos: 50 fault schedules of seed 1 against the host as `make test` built it (issue 36):
## every one must end where the fault-free run ends (CI runs it after `make test`)
CHAOS_ARGS ?= --schedules 50 --seed 1 --jobs 4
.PHONY: chaos
chaos: plugins
	@test -x $(TARGET_DIR)/debug/kubeplug || $(CARGO) test --workspace --no-run
	$(TARGET_DIR)/debug/kubeplug chaos --plugins $(KUBEPLUG_PLUGIN_DIR) --compile-cache $(TARGET_DIR)/test-compile-cache $(CHAOS_ARGS)

## demo: the reference plugins reconciling sample Deployments on the embedded API server
demo: plugins
	$(CARGO) run -p kubeplug -- run --embedded --plugins $(KUBEPLUG_PLUGIN_DIR) --policies host/samples/policies --listen $(KUBEPLUG_DEMO_LISTEN)

## lint: what CI checks besides the tests
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: plugin call cost against native, hot reload latency and memory, pull + verify +
## compile from an OCI registry, and the whole system against a kube-rs controller
## (KUBEPLUG_E2E_OBJECTS Deployments, default 10,000)
bench: plugins
	$(CARGO) bench -p kubeplug --bench reconcile
	$(CARGO) bench -p kubeplug --bench reload
	$(CARGO) bench -p kubeplug --bench oci
	$(CARGO) bench -p kubeplug --bench e2e

# ---------------------------------------------------------------------------------------------
# Plugins in Python and TypeScript (issue 16). Pinned toolchains install into ignored folders
# of the project (.tools/py-venv, plugin-sdk/js/node_modules); every step is a file rule, so
# with everything up to date `make plugins` runs none of them.
PY_VENV := $(CURDIR)/.tools/py-venv
COMPONENTIZE_PY_VERSION := 0.25.1
COMPONENTIZE_PY_STAMP := $(PY_VENV)/.componentize-py-$(COMPONENTIZE_PY_VERSION)
JS_SDK := plugin-sdk/js
JS_STAMP := $(JS_SDK)/node_modules/.installed
JCO := $(JS_SDK)/node_modules/.bin/jco
WIT_FILES := $(wildcard wit/v0.1.0/*.wit)
PY_SDK_FILES := $(wildcard plugin-sdk/python/kubeplug/*.py)
JS_SDK_FILES := $(wildcard $(JS_SDK)/src/*.ts) $(JS_SDK)/bundle.config.js
JS_TYPES := $(JS_SDK)/generated/plugin.d.ts
JS_TYPECHECK := $(JS_SDK)/generated/.typechecked
POLYGLOT_PLUGINS := $(KUBEPLUG_PLUGIN_DIR)/image-pinner-py.wasm $(KUBEPLUG_PLUGIN_DIR)/image-pinner-js.wasm
POLYGLOT_TEST_PLUGINS := $(KUBEPLUG_TEST_PLUGIN_DIR)/hostile-py.wasm $(KUBEPLUG_TEST_PLUGIN_DIR)/hostile-js.wasm
COMPONENTIZE_PY_BUILD = $(PY_VENV)/bin/componentize-py -d wit/v0.1.0 -w plugin componentize \
	-p $(<D) -p plugin-sdk/python app -o $@
JCO_BUILD = $(JCO) componentize $< -w wit/v0.1.0 -n plugin -d http fetch-event \
	--bundle-config $(JS_SDK)/bundle.config.js -o $@

.PHONY: polyglot-plugins polyglot-toolchains
plugins: polyglot-plugins
polyglot-plugins: $(POLYGLOT_PLUGINS) $(POLYGLOT_TEST_PLUGINS)
polyglot-toolchains: $(COMPONENTIZE_PY_STAMP) $(JS_STAMP)

$(COMPONENTIZE_PY_STAMP):
	rm -rf $(PY_VENV)
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install --quiet --disable-pip-version-check componentize-py==$(COMPONENTIZE_PY_VERSION)
	touch $@

$(JS_STAMP): $(JS_SDK)/package.json $(JS_SDK)/package-lock.json
	cd $(JS_SDK) && npm ci --no-audit --no-fund
	touch $@

$(JS_TYPES): $(WIT_FILES) $(JS_STAMP)
	$(JCO) types wit/v0.1.0 -n plugin -q -o $(JS_SDK)/generated
	touch $@

# Every TypeScript source (SDK, reference and test plugins) checked with tsc before any build.
$(JS_TYPECHECK): $(JS_TYPES) $(JS_SDK_FILES) $(JS_SDK)/tsconfig.check.json \
		$(wildcard plugins/*-js/*.ts tests/plugins/*-js/*.ts)
	$(JS_SDK)/node_modules/.bin/tsc -p $(JS_SDK)/tsconfig.check.json
	touch $@

.SECONDEXPANSION:
$(KUBEPLUG_PLUGIN_DIR)/%-py.wasm: plugins/%-py/app.py $$(wildcard plugins/%-py/*.py) $(PY_SDK_FILES) $(WIT_FILES) $(COMPONENTIZE_PY_STAMP)
	@mkdir -p $(@D)
	$(COMPONENTIZE_PY_BUILD)

$(KUBEPLUG_TEST_PLUGIN_DIR)/%-py.wasm: tests/plugins/%-py/app.py $$(wildcard tests/plugins/%-py/*.py) $(PY_SDK_FILES) $(WIT_FILES) $(COMPONENTIZE_PY_STAMP)
	@mkdir -p $(@D)
	$(COMPONENTIZE_PY_BUILD)

$(KUBEPLUG_PLUGIN_DIR)/%-js.wasm: plugins/%-js/plugin.ts $$(wildcard plugins/%-js/*.ts) $(JS_TYPECHECK)
	@mkdir -p $(@D)
	$(JCO_BUILD)

$(KUBEPLUG_TEST_PLUGIN_DIR)/%-js.wasm: tests/plugins/%-js/plugin.ts $$(wildcard tests/plugins/%-js/*.ts) $(JS_TYPECHECK)
	@mkdir -p $(@D)
	$(JCO_BUILD)

## bench-polyglot: the same reconcile by the TypeScript and Python ports against Rust and native
.PHONY: bench-polyglot
bench: bench-polyglot
bench-polyglot: plugins
	$(CARGO) bench -p kubeplug --bench polyglot

# ---------------------------------------------------------------------------------------------
# SDK parity (issue 29): the custom-resource controllers in TypeScript and Python, built into
# target/plugins beside the Rust ones and run through the same end-to-end scenarios
# (tests/it/crd_controllers.rs). TypeScript plugins in plugins/NAME-ts/plugin.ts build as the
# -js ones do.
PARITY_PLUGINS := $(KUBEPLUG_PLUGIN_DIR)/sample-controller-ts.wasm $(KUBEPLUG_PLUGIN_DIR)/customcluster-py.wasm
polyglot-plugins: $(PARITY_PLUGINS)
$(JS_TYPECHECK): $(wildcard plugins/*-ts/*.ts)

$(KUBEPLUG_PLUGIN_DIR)/%-ts.wasm: plugins/%-ts/plugin.ts $$(wildcard plugins/%-ts/*.ts) $(JS_TYPECHECK)
	@mkdir -p $(@D)
	$(JCO_BUILD)
