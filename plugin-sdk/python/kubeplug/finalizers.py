"""Finalizers (the Rust SDK's ``finalizers`` module): JSON patches guarded by the object's
resourceVersion, so a stale list never overwrites another writer's."""

from . import actions
from .resource import is_deleting, object_ref


def has_finalizer(obj, finalizer):
    """Whether the object carries ``finalizer``."""
    return finalizer in ((obj.get("metadata") or {}).get("finalizers") or [])


def add_finalizer(obj, finalizer):
    """A patch adding ``finalizer``, or None when present or the object is being deleted."""
    if has_finalizer(obj, finalizer) or is_deleting(obj.get("metadata")):
        return None
    return _write(obj, list((obj.get("metadata") or {}).get("finalizers") or []) + [finalizer])


def remove_finalizer(obj, finalizer):
    """A patch removing ``finalizer``, or None when it is not there."""
    if not has_finalizer(obj, finalizer):
        return None
    return _write(obj, [f for f in obj["metadata"]["finalizers"] if f != finalizer])


def _write(obj, finalizers):
    version = (obj.get("metadata") or {}).get("resourceVersion") or ""
    return actions.json_patch(
        object_ref(obj),
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ],
    )
