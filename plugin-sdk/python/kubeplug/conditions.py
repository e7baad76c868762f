"""Status conditions the Kubernetes way (the Rust SDK's ``conditions`` module): conditions
are ``metav1.Condition`` dicts."""


def condition(type_, status, reason, message, generation, now):
    """A condition of ``type_``; ``now`` is an RFC 3339 time."""
    c = {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def set_condition(conditions, new):
    """Sets ``new`` in the list: the transition time moves only when the status changes.
    Returns whether anything changed."""
    old = find_condition(conditions, new["type"])
    if old is None:
        conditions.append(new)
        return True
    changed = False
    if old.get("status") != new["status"]:
        old["status"] = new["status"]
        old["lastTransitionTime"] = new["lastTransitionTime"]
        changed = True
    for field in ("reason", "message", "observedGeneration"):
        if old.get(field) != new.get(field):
            if new.get(field) is None:
                old.pop(field, None)
            else:
                old[field] = new[field]
            changed = True
    return changed


def remove_condition(conditions, type_):
    """Removes the condition of ``type_``; returns whether there was one."""
    before = len(conditions)
    conditions[:] = [c for c in conditions if c.get("type") != type_]
    return len(conditions) != before


def find_condition(conditions, type_):
    """The condition of ``type_``, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)


def is_condition_true(conditions, type_):
    """Whether the condition of ``type_`` is set with status True."""
    c = find_condition(conditions, type_)
    return c is not None and c.get("status") == "True"
