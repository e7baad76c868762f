/** What a plugin tells the host about itself. */
import type { KindRef, PluginMetadata } from "./types.ts";

/** A kind of object, for example `kind("apps/v1", "Deployment")`. */
export function kind(apiVersion: string, kindName: string): KindRef {
  return { apiVersion, kind: kindName };
}

/** Options of {@link metadata}. */
export interface MetadataOptions {
  /** The kind whose keys the plugin reconciles; `apps/v1` Deployment by default. */
  reconciles?: KindRef;
  /** Kinds the plugin creates and owns: a change to one enqueues its controller owner. */
  owns?: KindRef[];
  /** Whether requests carry the last successfully reconciled version. */
  wantsPrevious?: boolean;
}

/** Name, version and the kinds a plugin reconciles and owns. */
export function metadata(name: string, version: string, options: MetadataOptions = {}): PluginMetadata {
  return {
    name,
    version,
    reconciles: options.reconciles ?? kind("apps/v1", "Deployment"),
    owns: options.owns ?? [],
    wantsPrevious: options.wantsPrevious ?? false,
  };
}
