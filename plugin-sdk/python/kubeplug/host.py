"""Read-only calls into the host: logging and the host's object cache.

What a plugin may read is decided by the operator's policy; a read outside it raises a
:class:`PermanentError` rather than returning nothing.
"""

import json

from componentize_py_types import Err
from wit_world.imports import host as imports

from .errors import PermanentError
from .metadata import kind as _kind


def log(level, message):
    """Logs a line right away (use :func:`kubeplug.actions.log` to log as part of the result)."""
    imports.log(level, message)


def get(api_version, kind, namespace, name):
    """One object from the host's cache as a dict, or None when it does not exist."""
    try:
        text = imports.get_object(_kind(api_version, kind), namespace, name)
    except Err as e:
        raise PermanentError(e.value) from None
    return None if text is None else json.loads(text)


def list(api_version, kind, namespace=None, label_selector=None):
    """Objects of a kind from the host's cache as dicts, optionally in one namespace and
    filtered by a label selector (``app=web,tier!=db``)."""
    try:
        items = imports.list_objects(_kind(api_version, kind), namespace, label_selector)
    except Err as e:
        raise PermanentError(e.value) from None
    return [json.loads(i) for i in items]
