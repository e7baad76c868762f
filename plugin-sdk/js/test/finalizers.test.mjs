// The finalizer helpers, as the Rust SDK's `finalizers` module behaves: JSON patches guarded
// by the resourceVersion, nothing when there is nothing to do.
import assert from "node:assert/strict";
import { test } from "node:test";
import { finalizers } from "../dist/index.js";

const F = "example.com/cleanup";

function widget(list, deleting = false) {
  const metadata = { name: "w", namespace: "ns", resourceVersion: "42", finalizers: list };
  if (deleting) metadata.deletionTimestamp = "2026-01-01T00:00:00Z";
  return { apiVersion: "example.com/v1", kind: "Widget", metadata };
}

function operations(action) {
  assert.equal(action.tag, "patch");
  assert.equal(action.val.patchType, "json");
  assert.deepEqual(action.val.target, { apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w" });
  return JSON.parse(action.val.body);
}

test("hasFinalizer", () => {
  assert.equal(finalizers.hasFinalizer(widget(["a", F]), F), true);
  assert.equal(finalizers.hasFinalizer(widget(["a"]), F), false);
  assert.equal(finalizers.hasFinalizer({ metadata: {} }, F), false);
});

test("addFinalizer appends to the list, guarded by the resourceVersion", () => {
  assert.deepEqual(operations(finalizers.addFinalizer(widget(["other"]), F)), [
    { op: "test", path: "/metadata/resourceVersion", value: "42" },
    { op: "add", path: "/metadata/finalizers", value: ["other", F] },
  ]);
  assert.deepEqual(operations(finalizers.addFinalizer(widget(undefined), F))[1].value, [F]);
});

test("addFinalizer does nothing when present or when the object is being deleted", () => {
  assert.equal(finalizers.addFinalizer(widget([F]), F), undefined);
  assert.equal(finalizers.addFinalizer(widget([], true), F), undefined);
});

test("removeFinalizer keeps the others, and does nothing when absent", () => {
  assert.deepEqual(operations(finalizers.removeFinalizer(widget(["a", F, "b"], true), F)), [
    { op: "test", path: "/metadata/resourceVersion", value: "42" },
    { op: "add", path: "/metadata/finalizers", value: ["a", "b"] },
  ]);
  assert.equal(finalizers.removeFinalizer(widget(["a"]), F), undefined);
});
