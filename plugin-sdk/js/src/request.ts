/** Typed access to a reconcile request. */
import { PermanentError } from "./errors.ts";
import type { ObjectRef, Reason, WitRequest } from "./types.ts";

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** `namespace/name`, or `name` for cluster-scoped objects. */
export function keyOf(ref: ObjectRef): string {
  return ref.namespace !== undefined ? `${ref.namespace}/${ref.name}` : ref.name;
}

function parse<T>(text: string | undefined, what: string): T | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch (e) {
    // JSON that does not parse will not parse better on a retry.
    throw new PermanentError(`invalid JSON in the ${what}: ${(e as Error).message}`);
  }
}

function jsonType(value: unknown): string {
  if (value === null) return "null";
  return Array.isArray(value) ? "array" : typeof value;
}

/** One reconcile request: the target, the cached object (JSON text), why, and the configuration. */
export class Request {
  /** The object this request is about. */
  readonly target: ObjectRef;
  /** Why the host runs this reconcile (advisory only). */
  readonly reason: Reason;
  /** 1 on the first attempt; counts up while the key is retried after errors. */
  readonly attempt: number;
  readonly #raw: WitRequest;

  constructor(raw: WitRequest) {
    this.#raw = raw;
    this.target = raw.target;
    this.reason = raw.reason;
    this.attempt = raw.attempt;
  }

  /** The cached object, parsed; undefined once it has been deleted. */
  object<T = { [key: string]: Json }>(): T | undefined {
    return parse<T>(this.#raw.object, "object");
  }

  /** The cached object as raw JSON text; undefined once it has been deleted. */
  objectJson(): string | undefined {
    return this.#raw.object;
  }

  /** The version last reconciled successfully (needs `wantsPrevious`), or undefined. */
  previous<T = { [key: string]: Json }>(): T | undefined {
    return parse<T>(this.#raw.previous, "previous object");
  }

  /**
   * The operator's configuration over `defaults`: a key `defaults` does not have, or a value of
   * another JSON type than its default, is a {@link PermanentError} (as the Rust SDK's serde
   * configuration with `deny_unknown_fields`).
   */
  config<T extends { [key: string]: Json }>(defaults: T): T {
    const text = this.#raw.config;
    const merged: { [key: string]: Json } = { ...defaults };
    if (text === undefined || text.trim() === "") return merged as T;
    const given = parse<Json>(text, "plugin configuration");
    if (given === null || typeof given !== "object" || Array.isArray(given)) {
      throw new PermanentError("invalid plugin configuration: expected a JSON object");
    }
    for (const [name, value] of Object.entries(given)) {
      if (!Object.hasOwn(defaults, name)) {
        const known = Object.keys(defaults).map((k) => `\`${k}\``).join(", ");
        throw new PermanentError(
          `invalid plugin configuration: unknown field \`${name}\`, expected one of ${known}`,
        );
      }
      const expected = jsonType(defaults[name]);
      if (expected !== "null" && jsonType(value) !== expected) {
        throw new PermanentError(
          `invalid plugin configuration: \`${name}\` should be ${expected}, got ${jsonType(value)}`,
        );
      }
      merged[name] = value;
    }
    return merged as T;
  }

  /** Whether the object is gone. */
  isDeleted(): boolean {
    return this.#raw.object === undefined;
  }

  /** Whether this is the first time the plugin sees the object. */
  isAdded(): boolean {
    return this.reason === "added";
  }

  /** `namespace/name`, or `name` for cluster-scoped objects. */
  key(): string {
    return keyOf(this.target);
  }
}
