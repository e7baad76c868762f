/**
 * image-pinner, in TypeScript: keeps Deployment container images at a configured target.
 *
 * The same behaviour and configuration as the Rust reference plugin (plugins/image-pinner):
 * when a matching container's image differs from the target (default `nginx:1.13`), return one
 * strategic merge patch that sets it; when nothing differs, return nothing, so the plugin never
 * loops on its own write.
 *
 * Configuration (all optional): `{"image": "nginx:1.13", "containers": ["web"],
 * "imagePrefixes": ["alpine", "busybox"]}` -- a container matches when its name is listed (or
 * the list is empty) and its image starts with a listed prefix (or that list is empty).
 */
import { type Action, type Reconciler, Request, actions, exportReconciler, metadata } from "../../plugin-sdk/js/src/index.ts";

const DEFAULTS = { image: "nginx:1.13", containers: [] as string[], imagePrefixes: [] as string[] };
type Config = typeof DEFAULTS;

interface Deployment {
  spec?: { template?: { spec?: { containers?: { name: string; image?: string }[] } } };
}

function matches(config: Config, name: string, image: string): boolean {
  return (
    (config.containers.length === 0 || config.containers.includes(name)) &&
    (config.imagePrefixes.length === 0 || config.imagePrefixes.some((p) => image.startsWith(p)))
  );
}

class ImagePinner implements Reconciler {
  metadata() {
    return metadata("image-pinner-js", "0.1.0");
  }

  reconcile(req: Request): Action[] {
    const config = req.config(DEFAULTS);
    const deploy = req.object<Deployment>();
    if (deploy === undefined) return [];
    const changes: string[] = [];
    const fixes: { name: string; image: string }[] = [];
    for (const c of deploy.spec?.template?.spec?.containers ?? []) {
      const image = c.image ?? "";
      if (image !== config.image && matches(config, c.name, image)) {
        changes.push(`${c.name}: ${image} -> ${config.image}`);
        fixes.push({ name: c.name, image: config.image });
      }
    }
    if (fixes.length === 0) return [];
    const body = { spec: { template: { spec: { containers: fixes } } } };
    return [
      actions.strategicPatch(req.target, body),
      actions.info(`pinning images of ${req.key()}: ${changes.join(", ")}`),
    ];
  }
}

export const reconciler = exportReconciler(new ImagePinner());
