"""image-pinner, in Python: keeps Deployment container images at a configured target.

The same behaviour and configuration as the Rust reference plugin (plugins/image-pinner):
when a matching container's image differs from the target (default ``nginx:1.13``), return
one strategic merge patch that sets it; when nothing differs, return nothing, so the plugin
never loops on its own write.

Configuration (all optional): ``{"image": "nginx:1.13", "containers": ["web"],
"imagePrefixes": ["alpine", "busybox"]}`` -- a container matches when its name is listed (or
the list is empty) and its image starts with a listed prefix (or that list is empty).
"""

import kubeplug
from kubeplug import actions

DEFAULTS = {"image": "nginx:1.13", "containers": [], "imagePrefixes": []}


def matches(config, name, image):
    """Whether the configuration manages this container."""
    return (not config["containers"] or name in config["containers"]) and (
        not config["imagePrefixes"] or any(image.startswith(p) for p in config["imagePrefixes"])
    )


class ImagePinner(kubeplug.Reconciler):
    def metadata(self):
        return kubeplug.Metadata("image-pinner-py", "0.1.0")

    def reconcile(self, req):
        config = req.config(DEFAULTS)
        deploy = req.object()
        if deploy is None:
            return []
        spec = ((deploy.get("spec") or {}).get("template") or {}).get("spec") or {}
        changes, fixes = [], []
        for c in spec.get("containers") or []:
            image = c.get("image") or ""
            if image != config["image"] and matches(config, c["name"], image):
                changes.append(f"{c['name']}: {image} -> {config['image']}")
                fixes.append({"name": c["name"], "image": config["image"]})
        if not fixes:
            return []
        body = {"spec": {"template": {"spec": {"containers": fixes}}}}
        return [
            actions.strategic_patch(req.target, body),
            actions.info(f"pinning images of {req.key()}: {', '.join(changes)}"),
        ]


Reconciler = kubeplug.export(ImagePinner)
