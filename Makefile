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

## test-deps: what the tests need besides Rust, when missing: Chromium for the dashboard test
## (Debian's package; where it cannot be installed, that test skips and says why)
test-deps:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium could not be installed: the dashboard test will skip"

## test: build the plugins, then run every test of the workspace
test: plugins test-deps
	$(CARGO) test --workspace

## demo: the reference plugins reconciling sample Deployments on the embedded API server
demo: plugins
	$(CARGO) run -p kubeplug -- run --embedded --plugins $(KUBEPLUG_PLUGIN_DIR) --policies host/samples/policies --listen $(KUBEPLUG_DEMO_LISTEN)

## lint: what CI checks besides the tests
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: plugin call cost against native, and hot reload latency and memory
bench: plugins
	$(CARGO) bench -p kubeplug --bench reconcile
	$(CARGO) bench -p kubeplug --bench reload
