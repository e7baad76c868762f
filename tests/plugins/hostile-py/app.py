"""hostile-py: a Python plugin that misbehaves on request, for the sandbox tests.

Configuration ``{"mode": ...}``: ``behave`` logs ``reconciled <key>``; ``loop`` never returns;
``alloc`` allocates without bound.
"""

import kubeplug
from kubeplug import actions


class Hostile(kubeplug.Reconciler):
    def metadata(self):
        return kubeplug.Metadata("hostile-py", "0.1.0")

    def reconcile(self, req):
        mode = req.config({"mode": "behave"})["mode"]
        if mode == "loop":
            n = 0
            while True:
                n += 1
        if mode == "alloc":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        return [actions.info(f"reconciled {req.key()}")]


Reconciler = kubeplug.export(Hostile)
