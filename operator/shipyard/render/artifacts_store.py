"""The agent environment's artifacts kept in ConfigMaps of the trial's (pure): before the last
step's separate verifier the environment pod is deleted (as Harbor stops the environment before
the verifier's), so what the collect phase packed there is read first and kept here, in parts
that each fit a ConfigMap, for the verifier's setup — and a restarted operator reads it again.
"""

from __future__ import annotations

import base64
from typing import Any

from shipyard.api.conventions import Component, artifacts_configmap_name
from shipyard.api.task_source import split_bundle
from shipyard.render.pod import owner_reference, trial_labels

DATA_KEY = "artifacts.tar"
PARTS_ANNOTATION = "shipyard.dev/parts"


def artifacts_configmaps(trial: dict[str, Any], tar: bytes) -> list[dict[str, Any]]:
    parts = split_bundle(tar)
    return [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": artifacts_configmap_name(trial["metadata"]["name"], i),
            "namespace": trial["metadata"]["namespace"],
            "labels": trial_labels(trial, Component.ARTIFACTS),
            "annotations": {PARTS_ANNOTATION: str(len(parts))},
            "ownerReferences": [owner_reference(trial)],
        },
        "binaryData": {DATA_KEY: base64.b64encode(part).decode()},
    } for i, part in enumerate(parts)]


def parts_of(first: dict[str, Any]) -> int:
    return int(((first.get("metadata") or {}).get("annotations") or {}).get(PARTS_ANNOTATION)
               or 1)


def part_bytes(configmap: dict[str, Any]) -> bytes:
    return base64.b64decode((configmap.get("binaryData") or {}).get(DATA_KEY) or "")
