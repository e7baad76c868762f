"""The conditions helpers, as the Rust SDK's ``conditions`` module behaves.

Run outside any wasm runtime, against componentize-py's generated bindings (not packaged)::

    componentize-py -d wit/v0.1.0 -w plugin bindings BINDINGS
    PYTHONPATH=BINDINGS:plugin-sdk/python python -m unittest discover -s plugin-sdk/python/tests

(tests/it/sdk_packages.rs runs them so.)
"""

import unittest

from kubeplug import conditions

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def ready(status, reason="Running", message="", generation=1, now=T0):
    return conditions.condition("Ready", status, reason, message, generation, now)


class Conditions(unittest.TestCase):
    def test_condition_is_a_metav1_condition(self):
        self.assertEqual(
            conditions.condition("Ready", True, "Running", "all up", 3, T0),
            {
                "type": "Ready",
                "status": "True",
                "reason": "Running",
                "message": "all up",
                "observedGeneration": 3,
                "lastTransitionTime": T0,
            },
        )
        self.assertEqual(conditions.condition("Ready", False, "Down", "", None, T0)["status"], "False")
        self.assertNotIn("observedGeneration", conditions.condition("Ready", False, "Down", "", None, T0))

    def test_set_adds_a_new_type(self):
        items = []
        self.assertTrue(conditions.set_condition(items, ready(False, "Starting")))
        self.assertEqual([c["type"] for c in items], ["Ready"])

    def test_set_changes_nothing_when_nothing_differs(self):
        items = [ready(True, message="up")]
        self.assertFalse(conditions.set_condition(items, ready(True, message="up", now=T1)))
        self.assertEqual(items, [ready(True, message="up")])

    def test_the_transition_time_moves_only_when_the_status_changes(self):
        items = [ready(True)]
        self.assertTrue(conditions.set_condition(items, ready(True, "Scaling", "3 of 4", 2, T1)))
        self.assertEqual(items, [ready(True, "Scaling", "3 of 4", 2, T0)])
        self.assertTrue(conditions.set_condition(items, ready(False, "Failed", "no", 2, T1)))
        self.assertEqual(items, [ready(False, "Failed", "no", 2, T1)])

    def test_remove_find_and_is_true_look_at_the_type_asked_for(self):
        items = [ready(True), conditions.condition("Degraded", False, "Fine", "", 1, T0)]
        self.assertTrue(conditions.is_condition_true(items, "Ready"))
        self.assertFalse(conditions.is_condition_true(items, "Degraded"))
        self.assertFalse(conditions.is_condition_true(items, "Missing"))
        self.assertEqual(conditions.find_condition(items, "Degraded")["reason"], "Fine")
        self.assertIsNone(conditions.find_condition(items, "Missing"))
        self.assertTrue(conditions.remove_condition(items, "Ready"))
        self.assertFalse(conditions.remove_condition(items, "Ready"))
        self.assertEqual([c["type"] for c in items], ["Degraded"])


if __name__ == "__main__":
    unittest.main()
