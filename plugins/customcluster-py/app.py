"""customcluster, in Python: keeps ``spec.count`` Pods running ``spec.message`` per
Customcluster, with the custom-resource helpers of the Python SDK.

The same behaviour as the Rust reference plugin (plugins/customcluster), which it must match
scenario for scenario (the tests in tests/it/crd_controllers.rs run against both): Pods
labelled ``controller=<name>`` that the Customcluster does not own are deleted; of its own
Pods, those running another message are replaced, extra ones deleted (newest first) and
missing ones created (at most 100 per call, named ``<name>-<i>`` for the lowest indexes no
Pod has, so a repeated call creates no Pod twice); the status counts the
Running Pods and their message; while fewer than ``count`` run, the key is looked at again
after 2 s.
"""

import kubeplug
from kubeplug import actions, host, pool

Customcluster = kubeplug.custom_kind("samplecontroller.k8s.io", "v1alpha1", "Customcluster", "customclusters")
POD = kubeplug.kind("v1", "Pod")
#: How long until a Customcluster whose Pods are still starting is looked at again.
RECHECK_STARTING_SECONDS = 2
#: Creates per call.
CREATE_BURST = 100


def message_of(pod):
    """The MESSAGE of the Pod's first container, or None."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return None
    for env in containers[0].get("env") or []:
        if env.get("name") == "MESSAGE":
            return env.get("value") or ""
    return None


def is_running(pod):
    return (pod.get("status") or {}).get("phase") == "Running"


def free_names(name, taken, n):
    """``n`` names for new Pods: ``<name>-<i>`` for the lowest indexes no name in ``taken`` has.

    The same object and Pods give the same names, so a call repeated (the same event twice, a
    cache not showing the last creates yet, a rerun after a crash) makes no Pod twice: the API
    server answers AlreadyExists, which the host takes as done. ``-`` and up to 5 digits after
    a 57-character prefix keep a name within 63 characters (a Pod's hostname).
    """
    names = []
    i = 0
    while len(names) < n:
        candidate = f"{name[:57]}-{i}"
        if candidate not in taken:
            names.append(candidate)
        i += 1
    return names


def new_pod(cc, name, pod_name):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": cc["metadata"].get("namespace"),
            "labels": {"controller": name},
            "ownerReferences": [kubeplug.owner_reference(cc)],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:latest",
                    "command": ["sh", "-c", 'echo "$MESSAGE"; sleep infinity'],
                    "env": [{"name": "MESSAGE", "value": cc["spec"].get("message") or ""}],
                }
            ]
        },
    }


class CustomclusterController(kubeplug.Reconciler):
    def metadata(self):
        return kubeplug.Metadata("customcluster-py", "0.1.0", reconciles=Customcluster.ref, owns=[POD])

    def reconcile(self, req):
        raw = req.object()
        if raw is None:
            return []  # its Pods go by garbage collection
        cc = Customcluster.of(raw)
        if kubeplug.is_deleting(cc["metadata"]):
            return []
        count = cc["spec"].get("count") or 0
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise kubeplug.PermanentError(f"{req.key()}: spec.count must be >= 0")
        name = cc["metadata"].get("name") or ""
        selector = f"controller={name}"
        labelled = host.list(POD.api_version, POD.kind, cc["metadata"].get("namespace"), selector)
        owned = [p for p in labelled if kubeplug.is_controlled_by(p.get("metadata"), cc["metadata"])]
        foreign = [p for p in labelled if not kubeplug.is_controlled_by(p.get("metadata"), cc["metadata"])]
        out = []
        for pod in foreign:
            if kubeplug.is_deleting(pod.get("metadata")):
                continue
            ref = kubeplug.object_ref(pod, POD)
            out.append(actions.info(f"deleting Pod {ref.name}: labelled {selector} but not owned"))
            out.append(actions.delete(ref))
        # Every labelled Pod's name, its own (being deleted too) and foreign ones.
        taken = {(p.get("metadata") or {}).get("name") for p in labelled}
        message = cc["spec"].get("message") or ""
        plan = pool.plan(owned, count, lambda p: message_of(p) == message)
        out.extend(actions.delete(kubeplug.object_ref(p, POD)) for p in plan.delete)
        for pod_name in free_names(name, taken, min(plan.create, CREATE_BURST)):
            out.append(actions.create(new_pod(cc, name, pod_name)))
        running = sum(1 for p in plan.keep if is_running(p))
        status = {"count": running, "message": message if running > 0 else ""}
        patch = Customcluster.update_status(cc, status)
        if patch is not None:
            out.append(patch)
        if running < count:
            out.append(actions.requeue_after(RECHECK_STARTING_SECONDS))
        return out


Reconciler = kubeplug.export(CustomclusterController)
