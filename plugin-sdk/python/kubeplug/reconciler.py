"""The reconciler base class, and the export componentize-py looks for."""

from componentize_py_types import Err
from wit_world import exports

from .errors import PermanentError, TransientError
from .request import Request


class Reconciler:
    """A reconcile plugin: describe yourself, then turn one request into actions."""

    def metadata(self):
        """Name, version and the kinds this plugin reconciles and owns (a :func:`Metadata`)."""
        raise NotImplementedError

    def reconcile(self, req):
        """Reconciles one key (a :class:`Request`) and returns a list of actions. Return none
        when nothing needs to change, so that the plugin never loops on its own writes."""
        raise NotImplementedError


def export(cls):
    """The class componentize-py exports for ``cls``: in the app module write
    ``Reconciler = kubeplug.export(MyReconciler)``."""

    class Export(exports.Reconciler):
        def metadata(self):
            return cls().metadata()

        def reconcile(self, request):
            try:
                return list(cls().reconcile(Request(request)))
            except (TransientError, PermanentError) as e:
                raise Err(e.to_wit()) from None

    Export.__name__ = "Reconciler"
    return Export
