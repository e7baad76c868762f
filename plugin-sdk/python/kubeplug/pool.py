"""Pools of interchangeable children with generated names (the Rust SDK's ``pool::plan``)."""

from .resource import is_deleting


class PoolPlan:
    """Which children to keep, which to delete, how many to create."""

    def __init__(self, keep, delete, create):
        self.keep, self.delete, self.create = keep, delete, create


def plan(owned, count, fits):
    """Of the ``owned`` children not being deleted, those that ``fits`` are kept, oldest first
    (then by name), up to ``count``; the rest are deleted; the shortfall is created."""
    live = [c for c in owned if not is_deleting(c.get("metadata"))]
    fitting = [c for c in live if fits(c)]
    delete = [c for c in live if not fits(c)]

    def key(c):
        meta = c.get("metadata") or {}
        return (meta.get("creationTimestamp") or "", meta.get("name") or "")

    fitting.sort(key=key)
    delete.extend(fitting[count:])
    keep = fitting[:count]
    return PoolPlan(keep, delete, count - len(keep))
