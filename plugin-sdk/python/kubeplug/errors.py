"""The errors a reconcile raises, and how they tell the host whether to retry."""

from wit_world.imports.types import ReconcileError_Permanent, ReconcileError_Transient


class TransientError(Exception):
    """Worth retrying with backoff, for example a dependency that is not there yet."""

    def to_wit(self):
        """The contract's ``reconcile-error``."""
        return ReconcileError_Transient(str(self))


class PermanentError(Exception):
    """Retrying will not help until the object or the configuration changes."""

    def to_wit(self):
        """The contract's ``reconcile-error``."""
        return ReconcileError_Permanent(str(self))
