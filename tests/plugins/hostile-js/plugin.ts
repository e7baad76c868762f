/**
 * hostile-js: a JavaScript plugin that misbehaves on request, for the sandbox tests.
 *
 * Configuration `{"mode": ...}`: `behave` logs `reconciled <key>`; `loop` never returns;
 * `alloc` allocates without bound.
 */
import { type Action, type Reconciler, Request, actions, exportReconciler, metadata } from "../../../plugin-sdk/js/src/index.ts";

class Hostile implements Reconciler {
  metadata() {
    return metadata("hostile-js", "0.1.0");
  }

  reconcile(req: Request): Action[] {
    const { mode } = req.config({ mode: "behave" });
    if (mode === "loop") {
      let n = 0;
      for (;;) n++;
    }
    if (mode === "alloc") {
      const hoard: Uint8Array[] = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
    return [actions.info(`reconciled ${req.key()}`)];
  }
}

export const reconciler = exportReconciler(new Hostile());
