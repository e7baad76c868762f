"""kubeplug-sdk for Python: write kubeplug reconcile plugins in Python.

A plugin is a subclass of :class:`Reconciler` exported with :func:`export`, built with
componentize-py against ``wit/v0.1.0`` into one ``.wasm`` component::

    import kubeplug
    from kubeplug import actions

    class MinReplicas(kubeplug.Reconciler):
        def metadata(self):
            return kubeplug.Metadata("min-replicas", "0.1.0")

        def reconcile(self, req):
            config = req.config({"replicas": 2})
            deploy = req.object()
            if deploy is None:
                return []
            if deploy.get("spec", {}).get("replicas", 1) >= config["replicas"]:
                return []
            return [actions.merge_patch(req.target, {"spec": {"replicas": config["replicas"]}})]

    Reconciler = kubeplug.export(MinReplicas)

The shape mirrors the Rust SDK (``plugin-sdk/src``): objects arrive as JSON text and are
parsed into plain dicts; actions are built by the functions in :mod:`kubeplug.actions`;
:class:`TransientError` and :class:`PermanentError` tell the host whether to retry.
"""

from .errors import PermanentError, TransientError
from .metadata import Metadata, kind
from .reconciler import Reconciler, export
from .request import Request
from . import actions, host
from . import children, conditions, finalizers, pool
from .resource import (
    CustomKind,
    controller_of,
    custom_kind,
    filter_owned,
    is_controlled_by,
    is_deleting,
    object_ref,
    owned_children,
    owner_reference,
    status_patch,
)

#: The contract version this SDK builds plugins for.
CONTRACT_VERSION = "0.1.0"

__all__ = [
    "CONTRACT_VERSION",
    "CustomKind",
    "children",
    "conditions",
    "controller_of",
    "custom_kind",
    "filter_owned",
    "finalizers",
    "is_controlled_by",
    "is_deleting",
    "object_ref",
    "owned_children",
    "owner_reference",
    "pool",
    "status_patch",
    "Metadata",
    "PermanentError",
    "Reconciler",
    "Request",
    "TransientError",
    "actions",
    "export",
    "host",
    "kind",
]
