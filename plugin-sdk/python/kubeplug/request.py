"""Typed access to a reconcile request."""

import json

from wit_world.imports.types import Reason

from .errors import PermanentError


def key_of(ref):
    """``namespace/name``, or ``name`` for cluster-scoped objects."""
    return f"{ref.namespace}/{ref.name}" if ref.namespace is not None else ref.name


def _parse(text, what):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        # JSON that does not parse will not parse better on a retry.
        raise PermanentError(f"invalid JSON in the {what}: {e}") from None


def _check_like(value, default, path):
    """Checks that ``value`` has the JSON type of ``default`` (bool is not a number)."""
    if default is None:
        return
    expected = type(default)
    if expected is float and type(value) is int:
        return
    if type(value) is not expected:
        raise PermanentError(
            f"invalid plugin configuration: `{path}` should be {expected.__name__}, "
            f"got {type(value).__name__}"
        )


class Request:
    """One reconcile request: the target, the cached object (JSON text), why, and the
    operator's configuration."""

    def __init__(self, raw):
        self._raw = raw
        #: The object this request is about (``api_version``, ``kind``, ``namespace``, ``name``).
        self.target = raw.target
        #: Why the host runs this reconcile (advisory only).
        self.reason = raw.reason
        #: 1 on the first attempt; counts up while the key is retried after errors.
        self.attempt = raw.attempt

    def object(self):
        """The cached object as a dict; None once it has been deleted."""
        return _parse(self._raw.object, "object")

    def object_json(self):
        """The cached object as raw JSON text; None once it has been deleted."""
        return self._raw.object

    def previous(self):
        """The version last reconciled successfully (needs ``wants_previous``), or None."""
        return _parse(self._raw.previous, "previous object")

    def config(self, defaults=None):
        """The operator's configuration as a dict, over ``defaults``.

        With ``defaults`` given, a key it does not have, or a value of another JSON type than
        its default, is a :class:`PermanentError` (as the Rust SDK's serde config with
        ``deny_unknown_fields``); without, any JSON object is accepted.
        """
        text = self._raw.config
        merged = dict(defaults or {})
        if text is None or not text.strip():
            return merged
        given = _parse(text, "plugin configuration")
        if not isinstance(given, dict):
            raise PermanentError("invalid plugin configuration: expected a JSON object")
        for name, value in given.items():
            if defaults is not None:
                if name not in defaults:
                    known = ", ".join(f"`{k}`" for k in defaults)
                    raise PermanentError(
                        f"invalid plugin configuration: unknown field `{name}`, expected one of {known}"
                    )
                _check_like(value, defaults[name], name)
            merged[name] = value
        return merged

    def is_deleted(self):
        """Whether the object is gone."""
        return self._raw.object is None

    def is_added(self):
        """Whether this is the first time the plugin sees the object."""
        return self.reason == Reason.ADDED

    def key(self):
        """``namespace/name``, or ``name`` for cluster-scoped objects."""
        return key_of(self.target)
