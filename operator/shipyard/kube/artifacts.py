"""Writing and reading the ConfigMaps that keep a trial's artifacts (`render.artifacts_store`)."""

from __future__ import annotations

from typing import Any

from shipyard.kube.client import core
from shipyard.kube.objects import get_configmap
from shipyard.kube.owned import create_owned, owned_by


def save(configmaps: list[dict[str, Any]]) -> None:
    """Create each part, replacing one a restarted operator wrote before (and one a deleted
    trial of the same name left: `owned.create_owned`)."""
    for cm in configmaps:
        _save(cm)


def _save(cm: dict[str, Any]) -> None:
    ns, name = cm["metadata"]["namespace"], cm["metadata"]["name"]
    if create_owned(lambda: core().create_namespaced_config_map(ns, cm),
                    lambda: get_configmap(ns, name),
                    lambda options: core().delete_namespaced_config_map(name, ns, body=options),
                    cm) is None:
        core().replace_namespaced_config_map(name, ns, cm)


def load(namespace: str, names: list[str], owner_uid: str) -> list[dict[str, Any]] | None:
    """The parts by name, of the trial of `owner_uid`; None when one is missing (or is a
    deleted trial's of the same name, not yet collected)."""
    found = []
    for name in names:
        cm = get_configmap(namespace, name)
        if cm is None or not owned_by(cm, owner_uid):
            return None
        found.append(cm)
    return found
