// The conditions helpers, as the Rust SDK's `conditions` module behaves.
import assert from "node:assert/strict";
import { test } from "node:test";
import { conditions } from "../dist/index.js";

const T0 = "2026-01-01T00:00:00Z";
const T1 = "2026-01-01T00:05:00Z";

test("condition() builds a metav1.Condition", () => {
  assert.deepEqual(conditions.condition("Ready", true, "Running", "all up", 3, T0), {
    type: "Ready",
    status: "True",
    reason: "Running",
    message: "all up",
    observedGeneration: 3,
    lastTransitionTime: T0,
  });
  assert.equal(conditions.condition("Ready", false, "Down", "", undefined, T0).status, "False");
});

test("setCondition adds a new type and reports the change", () => {
  const list = [];
  assert.equal(conditions.setCondition(list, conditions.condition("Ready", false, "Starting", "", 1, T0)), true);
  assert.equal(list.length, 1);
  assert.equal(list[0].type, "Ready");
});

test("setCondition changes nothing when nothing differs", () => {
  const list = [conditions.condition("Ready", true, "Running", "up", 1, T0)];
  assert.equal(conditions.setCondition(list, conditions.condition("Ready", true, "Running", "up", 1, T1)), false);
  assert.deepEqual(list, [conditions.condition("Ready", true, "Running", "up", 1, T0)]);
});

test("the transition time moves only when the status changes", () => {
  const list = [conditions.condition("Ready", true, "Running", "up", 1, T0)];
  assert.equal(conditions.setCondition(list, conditions.condition("Ready", true, "Scaling", "3 of 4", 2, T1)), true);
  assert.deepEqual(list[0], conditions.condition("Ready", true, "Scaling", "3 of 4", 2, T0));
  assert.equal(conditions.setCondition(list, conditions.condition("Ready", false, "Failed", "no", 2, T1)), true);
  assert.equal(list[0].status, "False");
  assert.equal(list[0].lastTransitionTime, T1);
  assert.equal(list.length, 1);
});

test("remove, find and isConditionTrue look at the type asked for", () => {
  const list = [
    conditions.condition("Ready", true, "Running", "", 1, T0),
    conditions.condition("Degraded", false, "Fine", "", 1, T0),
  ];
  assert.equal(conditions.isConditionTrue(list, "Ready"), true);
  assert.equal(conditions.isConditionTrue(list, "Degraded"), false);
  assert.equal(conditions.isConditionTrue(list, "Missing"), false);
  assert.equal(conditions.findCondition(list, "Degraded")?.reason, "Fine");
  assert.equal(conditions.findCondition(list, "Missing"), undefined);
  assert.equal(conditions.removeCondition(list, "Ready"), true);
  assert.equal(conditions.removeCondition(list, "Ready"), false);
  assert.deepEqual(list.map((c) => c.type), ["Degraded"]);
});
