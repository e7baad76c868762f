"""What a plugin tells the host about itself."""

from wit_world.imports.types import KindRef, PluginMetadata


def kind(api_version, kind_name):
    """A kind of object, for example ``kind("apps/v1", "Deployment")``."""
    return KindRef(api_version=api_version, kind=kind_name)


def Metadata(name, version, reconciles=None, owns=(), wants_previous=False):
    """Name, version and the kinds a plugin reconciles (default ``apps/v1`` Deployment) and
    owns (a change to an owned object enqueues its controller owner's key); with
    ``wants_previous`` requests carry the last successfully reconciled version."""
    return PluginMetadata(
        name=name,
        version=version,
        reconciles=reconciles or kind("apps/v1", "Deployment"),
        owns=list(owns),
        wants_previous=wants_previous,
    )
