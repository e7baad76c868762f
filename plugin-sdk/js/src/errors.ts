/**
 * The errors a reconcile throws, and how they tell the host whether to retry. componentize-js
 * turns a thrown value with a `payload` into the `err` case of the export's result.
 */
import type { ReconcileError } from "./types.ts";

/** Worth retrying with backoff, for example a dependency that is not there yet. */
export class TransientError extends Error {
  readonly payload: ReconcileError;
  constructor(message: string) {
    super(message);
    this.name = "TransientError";
    this.payload = { tag: "transient", val: message };
  }
}

/** Retrying will not help until the object or the configuration changes. */
export class PermanentError extends Error {
  readonly payload: ReconcileError;
  constructor(message: string) {
    super(message);
    this.name = "PermanentError";
    this.payload = { tag: "permanent", val: message };
  }
}
