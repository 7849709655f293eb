"""Writing and reading the ConfigMaps that keep a trial's artifacts (`render.artifacts_store`)."""

from __future__ import annotations

from typing import Any

from shipyard.kube.client import core
from shipyard.kube.errors import create_or_none
from shipyard.kube.objects import get_configmap


def save(configmaps: list[dict[str, Any]]) -> None:
    """Create each part, replacing one a restarted operator wrote before."""
    for cm in configmaps:
        ns, name = cm["metadata"]["namespace"], cm["metadata"]["name"]
        if create_or_none(core().create_namespaced_config_map, ns, cm) is None:
            core().replace_namespaced_config_map(name, ns, cm)


def load(namespace: str, names: list[str]) -> list[dict[str, Any]] | None:
    """The parts by name; None when one is missing."""
    found = []
    for name in names:
        cm = get_configmap(namespace, name)
        if cm is None:
            return None
        found.append(cm)
    return found
