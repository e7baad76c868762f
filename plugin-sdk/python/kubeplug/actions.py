"""Builders for the actions a plugin returns (the contract's ``action`` variant)."""

import json

from wit_world.imports import types as t

EventType = t.EventType
LogLevel = t.LogLevel
PatchType = t.PatchType


def _json(body):
    return body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))


def patch(target, patch_type, body, subresource=None):
    """A patch of ``patch_type`` on ``target``; ``body`` is a dict/list or JSON text."""
    return t.Action_Patch(
        t.Patch(target=target, patch_type=patch_type, body=_json(body), subresource=subresource)
    )


def merge_patch(target, body):
    """A JSON merge patch (RFC 7386)."""
    return patch(target, PatchType.MERGE, body)


def json_patch(target, operations):
    """A JSON patch (RFC 6902): ``operations`` is the list of operations."""
    return patch(target, PatchType.JSON, operations)


def strategic_patch(target, body):
    """A strategic merge patch: list items merge by their keys (containers by name, ...)."""
    return patch(target, PatchType.STRATEGIC, body)


def apply(target, body):
    """A server-side apply of ``body`` (a partial manifest with apiVersion and kind)."""
    return patch(target, PatchType.APPLY, body)


def status_patch(target, body):
    """A JSON merge patch of the ``status`` subresource."""
    return patch(target, PatchType.MERGE, body, subresource="status")


def create(manifest):
    """Creates the object described by ``manifest`` (apiVersion, kind, metadata.name set)."""
    return t.Action_Create(_json(manifest))


def delete(target):
    """Deletes ``target``."""
    return t.Action_Delete(target)


def event(regarding, reason, message, warning=False, action=""):
    """A Kubernetes Event about ``regarding``; ``reason`` is CamelCase (``ImagePinned``)."""
    return t.Action_Event(
        t.Event(
            regarding=regarding,
            event_type=EventType.WARNING if warning else EventType.NORMAL,
            reason=reason,
            message=message,
            action=action,
        )
    )


def log(level, message):
    """A log line at ``level`` (a :class:`LogLevel`)."""
    return t.Action_Log(t.LogEntry(level=level, message=message))


def info(message):
    """A log line at info level."""
    return log(LogLevel.INFO, message)


def warn(message):
    """A log line at warn level."""
    return log(LogLevel.WARN, message)


def requeue_after(seconds):
    """Reconcile this key again after ``seconds`` (rounded down to milliseconds)."""
    return t.Action_RequeueAfter(max(0, int(seconds * 1000)))
