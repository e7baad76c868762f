/**
 * Read-only calls into the host: logging and the host's object cache. What a plugin may read
 * is decided by the operator's policy; a read outside it throws a {@link PermanentError}.
 */
import * as imports from "kubeplug:plugin/host@0.1.0";
import { PermanentError } from "./errors.ts";
import type { LogLevel } from "./types.ts";
import type { Json } from "./request.ts";

function refused(e: unknown): never {
  const payload = (e as { payload?: unknown }).payload;
  throw new PermanentError(typeof payload === "string" ? payload : String(e));
}

/** Logs a line right away (use `actions.log` to log as part of the result). */
export function log(level: LogLevel, message: string): void {
  imports.log(level, message);
}

/** One object from the host's cache, parsed; undefined when it does not exist. */
export function get<T = { [key: string]: Json }>(
  apiVersion: string,
  kind: string,
  namespace: string | undefined,
  name: string,
): T | undefined {
  let text: string | undefined;
  try {
    text = imports.getObject({ apiVersion, kind }, namespace, name);
  } catch (e) {
    refused(e);
  }
  return text === undefined ? undefined : (JSON.parse(text) as T);
}

/** Objects of a kind from the host's cache, optionally in one namespace and filtered by a
 * label selector (`app=web,tier!=db`). */
export function list<T = { [key: string]: Json }>(
  apiVersion: string,
  kind: string,
  namespace?: string,
  labelSelector?: string,
): T[] {
  let items: string[] = [];
  try {
    items = imports.listObjects({ apiVersion, kind }, namespace, labelSelector);
  } catch (e) {
    refused(e);
  }
  return items.map((i) => JSON.parse(i) as T);
}
