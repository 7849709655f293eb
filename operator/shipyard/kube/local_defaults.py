"""The settings a local test cluster publishes for an operator run by hand
(`hack/localcluster/operator_defaults.py`): its image builder, registry and probe image."""

from __future__ import annotations

from shipyard.kube.client import core

NAMESPACE, NAME = "kube-public", "shipyard-localcluster"


def published() -> dict[str, str]:
    """The ConfigMap's data; {} when there is none (any other cluster) or it cannot be read."""
    try:
        cm = core().read_namespaced_config_map(NAME, NAMESPACE)
    except Exception:
        return {}
    return dict(cm.data or {})
