/** Builders for the actions a plugin returns (the contract's `action` variant). */
import type { Action, LogLevel, ObjectRef, PatchType } from "./types.ts";
import type { Json } from "./request.ts";

function text(body: Json | string): string {
  return typeof body === "string" ? body : JSON.stringify(body);
}

/** A patch of `patchType` on `target`; `body` is a JSON value or JSON text. */
export function patch(target: ObjectRef, patchType: PatchType, body: Json | string, subresource?: string): Action {
  return { tag: "patch", val: { target, patchType, body: text(body), subresource } };
}

/** A JSON merge patch (RFC 7386). */
export function mergePatch(target: ObjectRef, body: Json): Action {
  return patch(target, "merge", body);
}

/** A JSON patch (RFC 6902): `operations` is the array of operations. */
export function jsonPatch(target: ObjectRef, operations: Json[]): Action {
  return patch(target, "json", operations);
}

/** A strategic merge patch: list items merge by their keys (containers by name, ...). */
export function strategicPatch(target: ObjectRef, body: Json): Action {
  return patch(target, "strategic", body);
}

/** A server-side apply of `body` (a partial manifest with apiVersion and kind). */
export function apply(target: ObjectRef, body: Json): Action {
  return patch(target, "apply", body);
}

/** A JSON merge patch of the `status` subresource. */
export function statusPatch(target: ObjectRef, body: Json): Action {
  return patch(target, "merge", body, "status");
}

/** Creates the object described by `manifest` (apiVersion, kind and metadata.name set). */
export function create(manifest: Json): Action {
  return { tag: "create", val: text(manifest) };
}

/** Deletes `target`. */
export function remove(target: ObjectRef): Action {
  return { tag: "delete", val: target };
}

/** A Kubernetes Event about `regarding`; `reason` is CamelCase (`ImagePinned`). */
export function event(
  regarding: ObjectRef,
  reason: string,
  message: string,
  options: { warning?: boolean; action?: string } = {},
): Action {
  return {
    tag: "event",
    val: {
      regarding,
      eventType: options.warning ? "warning" : "normal",
      reason,
      message,
      action: options.action ?? "",
    },
  };
}

/** A log line at `level`. */
export function log(level: LogLevel, message: string): Action {
  return { tag: "log", val: { level, message } };
}

/** A log line at info level. */
export function info(message: string): Action {
  return log("info", message);
}

/** A log line at warn level. */
export function warn(message: string): Action {
  return log("warn", message);
}

/** Reconcile this key again after `millis` milliseconds. */
export function requeueAfter(millis: number): Action {
  return { tag: "requeue-after", val: BigInt(Math.max(0, Math.floor(millis))) };
}
