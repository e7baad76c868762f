/**
 * kubeplug-sdk for TypeScript: write kubeplug reconcile plugins in TypeScript (or JavaScript).
 *
 * A plugin implements {@link Reconciler} and exports it as `reconciler`:
 *
 * ```ts
 * import { Reconciler, Request, actions, exportReconciler, metadata } from "../../plugin-sdk/js/src/index.ts";
 *
 * class MinReplicas implements Reconciler {
 *   metadata() { return metadata("min-replicas", "0.1.0"); }
 *   reconcile(req: Request) {
 *     const config = req.config({ replicas: 2 });
 *     const deploy = req.object<{ spec?: { replicas?: number } }>();
 *     if (!deploy || (deploy.spec?.replicas ?? 1) >= config.replicas) return [];
 *     return [actions.mergePatch(req.target, { spec: { replicas: config.replicas } })];
 *   }
 * }
 *
 * export const reconciler = exportReconciler(new MinReplicas());
 * ```
 *
 * It is built with `jco componentize plugin.ts --wit wit/v0.1.0 --world-name plugin`. The
 * shape mirrors the Rust SDK (`plugin-sdk/src`).
 */
import { Request } from "./request.ts";
import type { Action, PluginMetadata, WitRequest } from "./types.ts";

export * as actions from "./actions.ts";
export * as host from "./host.ts";
export { PermanentError, TransientError } from "./errors.ts";
export { kind, metadata } from "./metadata.ts";
export type { MetadataOptions } from "./metadata.ts";
export { Request, keyOf } from "./request.ts";
export type { Json } from "./request.ts";
export type * from "./types.ts";
export {
  CustomKind,
  controllerOf,
  customKind,
  deepEqual,
  filterOwned,
  isControlledBy,
  isDeleting,
  objectRef,
  ownedChildren,
  ownerReference,
  statusPatch,
} from "./resource.ts";
export type { CustomResource, KubeObject, ObjectMeta, OwnerReference } from "./resource.ts";
export * as children from "./children.ts";
export * as conditions from "./conditions.ts";
export { ChildrenPlan, poolPlan } from "./children.ts";
import { poolPlan } from "./children.ts";
import { addFinalizer, hasFinalizer, removeFinalizer } from "./conditions.ts";
/** Pools of interchangeable children (the Rust SDK's `pool::plan`). */
export const pool = { plan: poolPlan };
/** Finalizers (the Rust SDK's `finalizers` module). */
export const finalizers = { hasFinalizer, addFinalizer, removeFinalizer };
export type { PoolPlan } from "./children.ts";
export type { Condition } from "./conditions.ts";

/** The contract version this SDK builds plugins for. */
export const CONTRACT_VERSION = "0.1.0";

/** A reconcile plugin: describe yourself, then turn one request into actions. */
export interface Reconciler {
  /** Name, version and the kinds this plugin reconciles and owns. */
  metadata(): PluginMetadata;
  /** Reconciles one key. Return no actions when nothing needs to change, so that the plugin
   * never loops on its own writes. Throw `TransientError` or `PermanentError` to fail. */
  reconcile(request: Request): Action[];
}

/** The `reconciler` export of the world: `export const reconciler = exportReconciler(new MyPlugin())`. */
export function exportReconciler(plugin: Reconciler): {
  metadata(): PluginMetadata;
  reconcile(request: WitRequest): Action[];
} {
  return {
    metadata: () => plugin.metadata(),
    reconcile: (request) => plugin.reconcile(new Request(request)),
  };
}
