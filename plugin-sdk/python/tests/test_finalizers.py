"""The finalizer helpers, as the Rust SDK's ``finalizers`` module behaves: JSON patches
guarded by the resourceVersion, None when there is nothing to do (how to run: see
test_conditions.py)."""

import json
import unittest

from kubeplug import finalizers
from kubeplug.actions import PatchType

F = "example.com/cleanup"


def widget(items, deleting=False):
    meta = {"name": "w", "namespace": "ns", "resourceVersion": "42"}
    if items is not None:
        meta["finalizers"] = items
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


class Finalizers(unittest.TestCase):
    def operations(self, action):
        patch = action.value
        self.assertEqual(patch.patch_type, PatchType.JSON)
        target = patch.target
        self.assertEqual(
            (target.api_version, target.kind, target.namespace, target.name),
            ("example.com/v1", "Widget", "ns", "w"),
        )
        return json.loads(patch.body)

    def test_has_finalizer(self):
        self.assertTrue(finalizers.has_finalizer(widget(["a", F]), F))
        self.assertFalse(finalizers.has_finalizer(widget(["a"]), F))
        self.assertFalse(finalizers.has_finalizer({"metadata": {}}, F))

    def test_add_appends_guarded_by_the_resource_version(self):
        self.assertEqual(
            self.operations(finalizers.add_finalizer(widget(["other"]), F)),
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/finalizers", "value": ["other", F]},
            ],
        )
        self.assertEqual(self.operations(finalizers.add_finalizer(widget(None), F))[1]["value"], [F])

    def test_add_does_nothing_when_present_or_being_deleted(self):
        self.assertIsNone(finalizers.add_finalizer(widget([F]), F))
        self.assertIsNone(finalizers.add_finalizer(widget([], deleting=True), F))

    def test_remove_keeps_the_others_and_does_nothing_when_absent(self):
        self.assertEqual(
            self.operations(finalizers.remove_finalizer(widget(["a", F, "b"], deleting=True), F)),
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/finalizers", "value": ["a", "b"]},
            ],
        )
        self.assertIsNone(finalizers.remove_finalizer(widget(["a"]), F))


if __name__ == "__main__":
    unittest.main()
