/**
 * The contract's types, as `jco types` generates them from `wit/v0.1.0` (into `../generated`,
 * by `make plugins`).
 */
export type {
  Action,
  EventType,
  KindRef,
  LogLevel,
  ObjectRef,
  PatchType,
  PluginMetadata,
  Reason,
  ReconcileError,
  Request as WitRequest,
} from "../generated/interfaces/kubeplug-plugin-types.js";
