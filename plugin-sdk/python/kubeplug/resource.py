"""Custom resources and the objects a controller reads: typed kinds, owner references,
children from the host's cache, status patches (the Rust SDK's ``resource``, ``owner`` and
``status`` modules, with the same names). Objects are the dicts the host's JSON parses into.
"""

from wit_world.imports import types as t

from . import actions
from . import host
from .errors import PermanentError
from .metadata import kind as _kind


def object_ref(obj, kind=None):
    """A reference to ``obj`` (the Rust SDK's ``ObjectRef::to``); ``kind`` (a KindRef) when
    the object's own ``apiVersion``/``kind`` are absent."""
    meta = obj.get("metadata") or {}
    return t.ObjectRef(
        api_version=obj.get("apiVersion") or (kind.api_version if kind else ""),
        kind=obj.get("kind") or (kind.kind if kind else ""),
        namespace=meta.get("namespace"),
        name=meta.get("name") or "",
    )


def status_patch(target, status):
    """A merge patch of the ``status`` subresource of ``target`` setting ``status``."""
    return actions.status_patch(target, {"status": status})


class CustomKind:
    """A custom kind: group, version, kind and plural (the Rust SDK's ``custom_kind!``)."""

    def __init__(self, group, version, kind, plural):
        self.group, self.version, self.kind, self.plural = group, version, kind, plural
        self.api_version = f"{group}/{version}"
        #: The kind as the contract names it (for ``Metadata(reconciles=...)``).
        self.ref = _kind(self.api_version, kind)

    def of(self, obj):
        """An object of this kind from its parsed JSON (metadata and spec default to empty)."""
        if not isinstance(obj, dict):
            raise PermanentError(f"a {self.kind} is not a JSON object")
        out = dict(obj)
        out["metadata"] = obj.get("metadata") or {}
        out["spec"] = obj.get("spec") or {}
        return out

    def update_status(self, obj, status):
        """A status patch setting ``status``, or None when the object has that status."""
        if obj.get("status") == status:
            return None
        return status_patch(object_ref(obj, self.ref), status)


def custom_kind(group, version, kind, plural):
    """Declares a custom kind."""
    return CustomKind(group, version, kind, plural)


def owner_reference(owner):
    """The controller owner reference naming ``owner`` (which must have a name and uid)."""
    meta = owner.get("metadata") or {}
    if not meta.get("name") or not meta.get("uid") or not owner.get("apiVersion") or not owner.get("kind"):
        raise PermanentError(f"a {owner.get('kind') or 'object'} without a name and uid cannot own objects")
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(meta):
    """The owner reference with ``controller: true``, if any."""
    for ref in (meta or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return ref
    return None


def is_controlled_by(child_meta, owner_meta):
    """Whether the child is controlled by the owner (its controller reference has its uid)."""
    ref = controller_of(child_meta)
    uid = (owner_meta or {}).get("uid")
    return ref is not None and uid is not None and ref.get("uid") == uid


def is_deleting(meta):
    """Whether the object is being deleted (it has a deletionTimestamp)."""
    return (meta or {}).get("deletionTimestamp") is not None


def filter_owned(owner, objects):
    """The objects controlled by ``owner``."""
    owner_meta = owner.get("metadata")
    return [o for o in objects if is_controlled_by(o.get("metadata"), owner_meta)]


def owned_children(owner, kind, label_selector=None):
    """The children of ``kind`` (a KindRef) that ``owner`` controls, from the host's cache."""
    namespace = (owner.get("metadata") or {}).get("namespace")
    return filter_owned(owner, host.list(kind.api_version, kind.kind, namespace, label_selector))
