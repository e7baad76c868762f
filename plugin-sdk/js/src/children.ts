/**
 * Desired children: the children a parent wants become creates, server-side applies and
 * deletes of only the children it controls (the Rust SDK's `children::plan`); and pools of
 * interchangeable children with generated names (`pool::plan`).
 */
import * as actions from "./actions.ts";
import { PermanentError } from "./errors.ts";
import type { Json } from "./request.ts";
import { type KubeObject, controllerOf, isDeleting, ownerReference } from "./resource.ts";
import type { Action, KindRef, ObjectRef } from "./types.ts";

/** What to do so that the children are the desired ones. */
export class ChildrenPlan {
  /** Manifests of missing children. */
  create: { [key: string]: Json }[] = [];
  /** Controlled children whose fields differ, with their desired manifest (server-side apply). */
  apply: [ObjectRef, { [key: string]: Json }][] = [];
  /** Controlled children no longer desired. */
  delete: ObjectRef[] = [];
  /** Desired names taken by objects this parent does not control: left alone. */
  conflicts: ObjectRef[] = [];

  /** Whether nothing needs doing. */
  isConverged(): boolean {
    return this.create.length === 0 && this.apply.length === 0 && this.delete.length === 0;
  }

  /** The actions: creates, then applies, then deletes. */
  actions(): Action[] {
    return [
      ...this.create.map((m) => actions.create(m)),
      ...this.apply.map(([r, m]) => actions.apply(r, m)),
      ...this.delete.map((r) => actions.remove(r)),
    ];
  }
}

/**
 * Plans the children of `kind` that `owner` wants: each desired manifest (with
 * `metadata.name`) gets apiVersion, kind, the owner's namespace and a controller owner
 * reference; `existing` are the children found (by label, by name). Missing ones are created,
 * controlled ones that differ are applied, controlled ones not desired are deleted, and a
 * name held by an object the owner does not control is a conflict.
 */
export function plan(
  owner: KubeObject,
  kind: KindRef,
  desired: { [key: string]: Json }[],
  existing: KubeObject[],
): ChildrenPlan {
  const ownerRef = ownerReference(owner) as unknown as Json;
  const ownerUid = owner.metadata?.uid ?? "";
  const namespace = owner.metadata?.namespace;
  const childRef = (name: string): ObjectRef => ({ apiVersion: kind.apiVersion, kind: kind.kind, namespace, name });
  const ours = (o: KubeObject) => controllerOf(o.metadata)?.uid === ownerUid;
  const out = new ChildrenPlan();
  const wanted = new Set<string>();
  for (const given of desired) {
    const metadata = { ...((given.metadata ?? {}) as { [key: string]: Json }) };
    const name = metadata.name;
    if (typeof name !== "string") throw new PermanentError(`a desired ${kind.kind} has no metadata.name`);
    if (wanted.has(name)) throw new PermanentError(`${kind.kind} ${name} is desired twice`);
    wanted.add(name);
    if (namespace !== undefined) metadata.namespace = namespace;
    metadata.ownerReferences = [ownerRef];
    const manifest = { ...given, apiVersion: kind.apiVersion, kind: kind.kind, metadata };
    const current = existing.find((e) => e.metadata?.name === name);
    if (current === undefined) out.create.push(manifest);
    else if (!ours(current)) out.conflicts.push(childRef(name));
    else if (isDeleting(current.metadata)) continue;
    else if (!holds(current as unknown as Json, manifest)) out.apply.push([childRef(name), manifest]);
  }
  for (const e of existing) {
    const name = e.metadata?.name ?? "";
    if (ours(e) && !isDeleting(e.metadata) && !wanted.has(name)) out.delete.push(childRef(name));
  }
  return out;
}

function holds(current: Json, manifest: { [key: string]: Json }): boolean {
  const c = current as { [key: string]: Json };
  return Object.entries(manifest)
    .filter(([k]) => k !== "apiVersion" && k !== "kind")
    .every(([k, v]) => c[k] !== undefined && contains(c[k], v));
}

/** Whether `current` holds every field of `desired` (lists: same length, item by item). */
export function contains(current: Json, desired: Json): boolean {
  if (Array.isArray(desired)) {
    return Array.isArray(current) && current.length === desired.length && desired.every((d, i) => contains(current[i], d));
  }
  if (desired !== null && typeof desired === "object") {
    if (current === null || typeof current !== "object" || Array.isArray(current)) return false;
    const c = current as { [key: string]: Json };
    return Object.entries(desired).every(([k, v]) => c[k] !== undefined && contains(c[k], v));
  }
  return current === desired;
}

/** A pool's plan: which children to keep, which to delete, how many to create. */
export interface PoolPlan<C> {
  keep: C[];
  delete: C[];
  create: number;
}

/**
 * Plans a pool of `count` interchangeable children (generated names): of the `owned` ones not
 * being deleted, those that `fits` are kept, oldest first (then by name), up to `count`; the
 * rest are deleted; the shortfall is created.
 */
export function poolPlan<C extends KubeObject>(owned: C[], count: number, fits: (c: C) => boolean): PoolPlan<C> {
  const live = owned.filter((c) => !isDeleting(c.metadata));
  const fitting = live.filter(fits);
  const del = live.filter((c) => !fits(c));
  const key = (c: C) => `${c.metadata?.creationTimestamp ?? ""}\u0000${c.metadata?.name ?? ""}`;
  fitting.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  const keep = fitting.slice(0, count);
  del.push(...fitting.slice(count));
  return { keep, delete: del, create: count - keep.length };
}
