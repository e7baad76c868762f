/**
 * sample-controller, in TypeScript: Kubernetes' sample-controller as a plugin, with the
 * custom-resource helpers of the TypeScript SDK. The same behaviour as the Rust reference
 * plugin (plugins/sample-controller), which it must match scenario for scenario (the tests in
 * tests/it/crd_controllers.rs run against both):
 *
 * For each `Foo` (`samplecontroller.k8s.io/v1alpha1`): keep a Deployment named
 * `spec.deploymentName` with `spec.replicas` replicas of `nginx:latest`, controlled by the Foo;
 * copy the Deployment's `availableReplicas` into the Foo's status; report `Synced` when
 * something was written. A Deployment of that name the Foo does not control is left alone and
 * reported as `ErrResourceExists` (looked at again after 30 s); a Deployment the Foo controls
 * under a previous name is deleted.
 */
import {
  type Action,
  type Json,
  type KubeObject,
  type Reconciler,
  PermanentError,
  Request,
  actions,
  children,
  customKind,
  exportReconciler,
  host,
  kind,
  metadata,
} from "../../plugin-sdk/js/src/index.ts";

interface FooSpec {
  deploymentName?: string;
  replicas?: number;
}

interface FooStatus {
  availableReplicas: number;
}

const Foo = customKind<FooSpec, FooStatus>({
  group: "samplecontroller.k8s.io",
  version: "v1alpha1",
  kind: "Foo",
  plural: "foos",
});
const DEPLOYMENT = kind("apps/v1", "Deployment");
/** How long until a Foo whose Deployment name is taken is looked at again. */
const RECHECK_TAKEN_MS = 30_000;

interface DeploymentObject extends KubeObject {
  status?: { availableReplicas?: number };
}

class SampleController implements Reconciler {
  metadata() {
    return metadata("sample-controller-ts", "0.1.0", { reconciles: Foo.ref, owns: [DEPLOYMENT] });
  }

  reconcile(req: Request): Action[] {
    const raw = req.object();
    if (raw === undefined) return []; // its Deployment goes by garbage collection
    const parent = Foo.of(raw);
    const name = parent.spec.deploymentName ?? "";
    if (name === "") throw new PermanentError(`${req.key()}: deployment name must be specified`);
    const namespace = parent.metadata.namespace;
    const fooName = parent.metadata.name ?? "";
    // Deployments this Foo may control (by label), and whatever holds the wanted name.
    const existing = host.list<DeploymentObject>(DEPLOYMENT.apiVersion, DEPLOYMENT.kind, namespace, `controller=${fooName}`);
    const named = host.get<DeploymentObject>(DEPLOYMENT.apiVersion, DEPLOYMENT.kind, namespace, name);
    if (named !== undefined && !existing.some((e) => e.metadata?.name === name)) existing.push(named);
    const plan = children.plan(parent, DEPLOYMENT, [newDeployment(parent.spec, name, fooName)], existing);
    if (plan.conflicts.length > 0) {
      return [
        actions.event(req.target, "ErrResourceExists", `Resource ${name} already exists and is not managed by Foo`, {
          warning: true,
        }),
        actions.requeueAfter(RECHECK_TAKEN_MS),
      ];
    }
    const available = named?.status?.availableReplicas ?? 0;
    const out = plan.actions();
    const status = Foo.updateStatus(parent, { availableReplicas: available });
    if (status !== undefined) out.push(status);
    if (out.length > 0) out.push(actions.event(req.target, "Synced", "Foo synced successfully"));
    return out;
  }
}

/** The Deployment a Foo wants: `nginx:latest`, labelled `app: nginx, controller: <foo>`. */
function newDeployment(spec: FooSpec, name: string, fooName: string): { [key: string]: Json } {
  const labels = { app: "nginx", controller: fooName };
  const deploymentSpec: { [key: string]: Json } = {
    selector: { matchLabels: labels },
    template: { metadata: { labels }, spec: { containers: [{ name: "nginx", image: "nginx:latest" }] } },
  };
  if (spec.replicas !== undefined && spec.replicas !== null) deploymentSpec.replicas = spec.replicas;
  return { metadata: { name, labels }, spec: deploymentSpec };
}

export const reconciler = exportReconciler(new SampleController());
