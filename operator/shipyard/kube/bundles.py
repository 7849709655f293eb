"""`shipyard task push`: a Task whose files are a bundle in a ConfigMap.

The ConfigMap is named by the bundle's content (`<task>-bundle-<digest>`), so a changed task gives
the Task a new `spec.source.configMap.name`: a spec change, which the operator validates again.
Order: ConfigMap first, then the Task (the operator reads the ConfigMap when it sees the Task),
then the ConfigMap is made owned by the Task (deleted with it) and earlier bundles are removed.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from shipyard.api.conventions import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Component,
    bundle_configmap_name,
    selector_string,
    task_selector,
)
from shipyard.api.models import API_VERSION, GROUP, VERSION
from shipyard.api.task_source import (
    BUNDLE_KEY,
    PART_BYTES,
    build_bundle,
    part_names,
    split_bundle,
)
from shipyard.kube.client import core, custom
from shipyard.kube.errors import create_or_none

# Bundles larger than one ConfigMap are split (api.task_source.split_bundle), up to MAX_PARTS:
# 48 MiB compressed. Bigger tasks belong in their image.
MAX_PARTS = 64
BUNDLE_LIMIT_BYTES = PART_BYTES * MAX_PARTS
MERGE_PATCH = "application/merge-patch+json"


class BundleTooLarge(Exception):
    def __init__(self, size: int, files: dict[str, bytes]) -> None:
        largest = sorted(files.items(), key=lambda kv: -len(kv[1]))[:3]
        names = ", ".join(f"{path} ({len(data):,} bytes)" for path, data in largest)
        super().__init__(
            f"the task bundle is {size:,} bytes compressed, more than Shipyard stores "
            f"({BUNDLE_LIMIT_BYTES:,} bytes in {MAX_PARTS} ConfigMaps); largest files: "
            f"{names}. Leave out what the "
            "trial does not need (.harborignore in tests/ and solution/), or bake large files "
            "into the task's image"
        )
        self.size = size


@dataclass(frozen=True)
class PushResult:
    task: dict[str, Any]
    configmap: str
    bundle_bytes: int
    created: bool  # the Task was created (else updated or unchanged)
    changed: bool  # the Task's spec changed


def _selector(task: str) -> dict[str, str]:
    return {LABEL_COMPONENT: Component.TASK_BUNDLE.value, **task_selector(task)}


def _labels(task: str) -> dict[str, str]:
    return {**MANAGED_BY, **_selector(task)}


def push_task(namespace: str, name: str, files: dict[str, bytes]) -> PushResult:
    bundle = build_bundle(files)
    if len(bundle) > BUNDLE_LIMIT_BYTES:
        raise BundleTooLarge(len(bundle), files)
    cm_name = bundle_configmap_name(name, bundle)
    pieces = split_bundle(bundle)
    parts = len(pieces) if len(pieces) > 1 else None
    for part_name, piece in zip(part_names(cm_name, parts), pieces, strict=True):
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": part_name, "namespace": namespace, "labels": _labels(name)},
            "binaryData": {BUNDLE_KEY: base64.b64encode(piece).decode()},
        }
        # A 409: the same content was pushed before, it is there already.
        create_or_none(core().create_namespaced_config_map, namespace, configmap)
    source = {"configMap": {"name": cm_name, **({"parts": parts} if parts else {})}}
    api = custom()
    created = changed = False
    try:
        task = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", name)
    except ApiException as e:
        if e.status != 404:
            raise
        body = {
            "apiVersion": API_VERSION,
            "kind": "Task",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: "shipyard"}},
            "spec": {"source": source},
        }
        task = api.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", body)
        created = changed = True
    else:
        if task.get("spec", {}).get("source") != source:
            patch = {"spec": {"source": {"inline": None, "configMap": {
                "parts": None, **source["configMap"]}}}}
            task = api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "tasks", name, patch, _content_type=MERGE_PATCH
            )
            changed = True
    _own_and_prune(namespace, name, part_names(cm_name, parts), task)
    return PushResult(task, cm_name, len(bundle), created, changed)


def _own_and_prune(namespace: str, task: str, current: list[str],
                   task_obj: dict[str, Any]) -> None:
    """The Task owns its bundles (they go when it is deleted); earlier bundles are deleted."""
    owner = {
        "apiVersion": API_VERSION,
        "kind": "Task",
        "name": task,
        "uid": task_obj["metadata"]["uid"],
    }
    for name in current:
        core().patch_namespaced_config_map(
            name, namespace, {"metadata": {"ownerReferences": [owner]}},
            _content_type=MERGE_PATCH)
    selector = selector_string(_selector(task))
    for cm in core().list_namespaced_config_map(namespace, label_selector=selector).items:
        if cm.metadata.name not in current:
            try:
                core().delete_namespaced_config_map(cm.metadata.name, namespace)
            except ApiException as e:
                if e.status != 404:
                    raise
