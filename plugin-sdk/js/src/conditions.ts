/**
 * Status conditions the Kubernetes way, and finalizers (the Rust SDK's `conditions` and
 * `finalizers` modules).
 */
import * as actions from "./actions.ts";
import { type KubeObject, isDeleting, objectRef } from "./resource.ts";
import type { Action } from "./types.ts";

/** A `metav1.Condition`. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}

/** A condition of `type`, `now` as an RFC 3339 time. */
export function condition(
  type: string,
  status: boolean,
  reason: string,
  message: string,
  generation: number | undefined,
  now: string,
): Condition {
  return { type, status: status ? "True" : "False", reason, message, observedGeneration: generation, lastTransitionTime: now };
}

/** Sets `next` in `conditions`: the transition time moves only when the status changes.
 * Returns whether anything changed. */
export function setCondition(conditions: Condition[], next: Condition): boolean {
  const old = conditions.find((c) => c.type === next.type);
  if (old === undefined) {
    conditions.push(next);
    return true;
  }
  let changed = false;
  if (old.status !== next.status) {
    old.status = next.status;
    old.lastTransitionTime = next.lastTransitionTime;
    changed = true;
  }
  if (old.reason !== next.reason || old.message !== next.message || old.observedGeneration !== next.observedGeneration) {
    old.reason = next.reason;
    old.message = next.message;
    old.observedGeneration = next.observedGeneration;
    changed = true;
  }
  return changed;
}

/** Removes the condition of `type`; returns whether there was one. */
export function removeCondition(conditions: Condition[], type: string): boolean {
  const i = conditions.findIndex((c) => c.type === type);
  if (i < 0) return false;
  conditions.splice(i, 1);
  return true;
}

/** The condition of `type`, if set. */
export function findCondition(conditions: Condition[], type: string): Condition | undefined {
  return conditions.find((c) => c.type === type);
}

/** Whether the condition of `type` is set with status True. */
export function isConditionTrue(conditions: Condition[], type: string): boolean {
  return findCondition(conditions, type)?.status === "True";
}

/** Whether the object carries `finalizer`. */
export function hasFinalizer(object: KubeObject, finalizer: string): boolean {
  return (object.metadata?.finalizers ?? []).includes(finalizer);
}

/** A JSON patch adding `finalizer` (guarded by the resourceVersion), or undefined when it is
 * there already or the object is being deleted. */
export function addFinalizer(object: KubeObject, finalizer: string): Action | undefined {
  if (hasFinalizer(object, finalizer) || isDeleting(object.metadata)) return undefined;
  return writeList(object, [...(object.metadata?.finalizers ?? []), finalizer]);
}

/** A JSON patch removing `finalizer`, or undefined when it is not there. */
export function removeFinalizer(object: KubeObject, finalizer: string): Action | undefined {
  if (!hasFinalizer(object, finalizer)) return undefined;
  return writeList(object, (object.metadata?.finalizers ?? []).filter((f) => f !== finalizer));
}

function writeList(object: KubeObject, list: string[]): Action {
  return actions.jsonPatch(objectRef(object), [
    { op: "test", path: "/metadata/resourceVersion", value: object.metadata?.resourceVersion ?? "" },
    { op: "add", path: "/metadata/finalizers", value: list },
  ]);
}
