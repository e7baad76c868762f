/**
 * Custom resources and the objects a controller reads: typed objects, owner references,
 * children from the host's cache, status patches (the Rust SDK's `resource`, `owner` and
 * `status` modules, with the same names in camelCase).
 */
import * as actions from "./actions.ts";
import { PermanentError } from "./errors.ts";
import * as host from "./host.ts";
import type { Json } from "./request.ts";
import type { Action, KindRef, ObjectRef } from "./types.ts";

/** An owner reference, as in `metadata.ownerReferences`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** The part of `metadata` the helpers read. */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: { [key: string]: string };
  annotations?: { [key: string]: string };
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
}

/** Any Kubernetes object, as the host sends it. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

/** A custom resource: metadata, a typed spec and an optional typed status. */
export interface CustomResource<Spec, Status> extends KubeObject {
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
}

/** A custom kind: its group, version, kind and plural (the Rust SDK's `custom_kind!`). */
export class CustomKind<Spec, Status> {
  constructor(
    readonly group: string,
    readonly version: string,
    readonly kind: string,
    readonly plural: string,
  ) {}

  /** `group/version`. */
  get apiVersion(): string {
    return `${this.group}/${this.version}`;
  }

  /** The kind as the contract names it (for `metadata({ reconciles })`). */
  get ref(): KindRef {
    return { apiVersion: this.apiVersion, kind: this.kind };
  }

  /** An object of this kind from its JSON (metadata and spec default to empty). */
  of(object: unknown): CustomResource<Spec, Status> {
    if (object === null || typeof object !== "object" || Array.isArray(object)) {
      throw new PermanentError(`a ${this.kind} is not a JSON object`);
    }
    const o = object as Partial<CustomResource<Spec, Status>>;
    return { ...o, metadata: o.metadata ?? {}, spec: o.spec ?? ({} as Spec) };
  }

  /** A status patch setting `status`, or undefined when the object has that status already. */
  updateStatus(object: CustomResource<Spec, Status>, status: Status): Action | undefined {
    if (object.status !== undefined && deepEqual(object.status as Json, status as Json)) return undefined;
    return statusPatch(objectRef(object, this.ref), status as Json);
  }
}

/** Declares a custom kind: `customKind<FooSpec, FooStatus>({ group, version, kind, plural })`. */
export function customKind<Spec, Status>(k: {
  group: string;
  version: string;
  kind: string;
  plural: string;
}): CustomKind<Spec, Status> {
  return new CustomKind<Spec, Status>(k.group, k.version, k.kind, k.plural);
}

/** A reference to `object` (the Rust SDK's `ObjectRef::to`); `kind` when the object's own
 * `apiVersion`/`kind` are absent. */
export function objectRef(object: KubeObject, kind?: KindRef): ObjectRef {
  return {
    apiVersion: object.apiVersion ?? kind?.apiVersion ?? "",
    kind: object.kind ?? kind?.kind ?? "",
    namespace: object.metadata?.namespace,
    name: object.metadata?.name ?? "",
  };
}

/** A merge patch of the `status` subresource of `target` setting `status`. */
export function statusPatch(target: ObjectRef, status: Json): Action {
  return actions.statusPatch(target, { status });
}

/** The controller owner reference naming `owner` (which must have a name and uid). */
export function ownerReference(owner: KubeObject): OwnerReference {
  const m = owner.metadata ?? {};
  if (!m.name || !m.uid || !owner.apiVersion || !owner.kind) {
    throw new PermanentError(`a ${owner.kind ?? "object"} without a name and uid cannot own objects`);
  }
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: m.name,
    uid: m.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** The owner reference with `controller: true`, if any. */
export function controllerOf(meta: ObjectMeta | undefined): OwnerReference | undefined {
  return (meta?.ownerReferences ?? []).find((r) => r.controller === true);
}

/** Whether `child` is controlled by `owner` (its controller reference carries owner's uid). */
export function isControlledBy(child: ObjectMeta | undefined, owner: ObjectMeta | undefined): boolean {
  const r = controllerOf(child);
  return r !== undefined && owner?.uid !== undefined && r.uid === owner.uid;
}

/** Whether the object is being deleted (it has a deletionTimestamp). */
export function isDeleting(meta: ObjectMeta | undefined): boolean {
  return meta?.deletionTimestamp !== undefined && meta.deletionTimestamp !== null;
}

/** The objects controlled by `owner`. */
export function filterOwned<C extends KubeObject>(owner: KubeObject, objects: C[]): C[] {
  return objects.filter((c) => isControlledBy(c.metadata, owner.metadata));
}

/** The children of `kind` that `owner` controls, from the host's cache (in its namespace). */
export function ownedChildren<C extends KubeObject>(owner: KubeObject, kind: KindRef, labelSelector?: string): C[] {
  const all = host.list<C>(kind.apiVersion, kind.kind, owner.metadata?.namespace, labelSelector);
  return filterOwned(owner, all);
}

/** Structural equality of JSON values. */
export function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  }
  const ao = a as { [k: string]: Json };
  const bo = b as { [k: string]: Json };
  const keys = Object.keys(ao).filter((k) => ao[k] !== undefined);
  const bkeys = Object.keys(bo).filter((k) => bo[k] !== undefined);
  return keys.length === bkeys.length && keys.every((k) => deepEqual(ao[k], bo[k]));
}
