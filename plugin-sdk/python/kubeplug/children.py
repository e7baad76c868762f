"""Desired children: what a parent wants becomes creates, server-side applies and deletes of
only the children it controls (the Rust SDK's ``children::plan``)."""

import copy

from wit_world.imports import types as t

from . import actions
from .errors import PermanentError
from .resource import controller_of, is_deleting, owner_reference


class ChildrenPlan:
    """What to do so that the children are the desired ones."""

    def __init__(self):
        #: Manifests of missing children.
        self.create = []
        #: (ObjectRef, manifest) of controlled children whose fields differ.
        self.apply = []
        #: ObjectRefs of controlled children no longer desired.
        self.delete = []
        #: ObjectRefs of desired names held by objects the parent does not control.
        self.conflicts = []

    def is_converged(self):
        """Whether nothing needs doing."""
        return not (self.create or self.apply or self.delete)

    def actions(self):
        """The actions: creates, then applies, then deletes."""
        return (
            [actions.create(m) for m in self.create]
            + [actions.apply(r, m) for r, m in self.apply]
            + [actions.delete(r) for r in self.delete]
        )


def plan(owner, kind, desired, existing):
    """Plans the children of ``kind`` (a KindRef) that ``owner`` wants: each desired manifest
    (with ``metadata.name``) gets apiVersion, kind, the owner's namespace and a controller owner
    reference; ``existing`` are the children found. Missing ones are created, controlled ones
    that differ applied, controlled ones not desired deleted; a name held by an object the
    owner does not control is a conflict."""
    owner_ref = owner_reference(owner)
    owner_uid = (owner.get("metadata") or {}).get("uid") or ""
    namespace = (owner.get("metadata") or {}).get("namespace")

    def child_ref(name):
        return t.ObjectRef(api_version=kind.api_version, kind=kind.kind, namespace=namespace, name=name)

    def ours(obj):
        ref = controller_of(obj.get("metadata"))
        return ref is not None and ref.get("uid") == owner_uid

    out = ChildrenPlan()
    wanted = set()
    for given in desired:
        manifest = copy.deepcopy(given)
        meta = manifest.setdefault("metadata", {})
        name = meta.get("name")
        if not isinstance(name, str):
            raise PermanentError(f"a desired {kind.kind} has no metadata.name")
        if name in wanted:
            raise PermanentError(f"{kind.kind} {name} is desired twice")
        wanted.add(name)
        manifest["apiVersion"] = kind.api_version
        manifest["kind"] = kind.kind
        if namespace is not None:
            meta["namespace"] = namespace
        meta["ownerReferences"] = [owner_ref]
        current = next((e for e in existing if (e.get("metadata") or {}).get("name") == name), None)
        if current is None:
            out.create.append(manifest)
        elif not ours(current):
            out.conflicts.append(child_ref(name))
        elif is_deleting(current.get("metadata")):
            continue
        elif not _holds(current, manifest):
            out.apply.append((child_ref(name), manifest))
    for e in existing:
        meta = e.get("metadata") or {}
        name = meta.get("name") or ""
        if ours(e) and not is_deleting(meta) and name not in wanted:
            out.delete.append(child_ref(name))
    return out


def _holds(current, manifest):
    return all(
        k in current and contains(current[k], v) for k, v in manifest.items() if k not in ("apiVersion", "kind")
    )


def contains(current, desired):
    """Whether ``current`` holds every field of ``desired`` (lists: same length, item by item)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(k in current and contains(current[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(contains(c, d) for c, d in zip(current, desired))
        )
    if isinstance(desired, bool) or isinstance(current, bool):
        return type(current) is type(desired) and current == desired
    return current == desired
