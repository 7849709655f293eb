"""The agent environment's artifacts kept in ConfigMaps of the trial's (pure): before the last
step's separate verifier the environment pod is deleted (as Harbor stops the environment before
the verifier's), so what the collect phase packed there is read first and kept here, in parts
that each fit a ConfigMap, for the verifier's setup — and a restarted operator reads it again.
Every trial's are kept so (a shared verifier's when the trial ends), with the step's collection
set, for the export's `artifacts/` and `artifacts/manifest.json` (`cli.harbor_artifacts`); a
multi-step trial's for each step (an earlier step's under names of its own), as Harbor keeps
each step's under `steps/<step>/artifacts/`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from shipyard.api.conventions import Component, artifacts_configmap_name
from shipyard.api.task_source import split_bundle
from shipyard.render.pod import owner_reference, trial_labels
from shipyard.taskformat import ArtifactConfig

DATA_KEY = "artifacts.tar"
PARTS_ANNOTATION = "shipyard.dev/parts"
STEP_ANNOTATION = "shipyard.dev/step"
ENTRIES_ANNOTATION = "shipyard.dev/artifacts"
"""The step's collection set (JSON), as the export's manifest lists it."""
REFUSED_ANNOTATION = "shipyard.dev/artifacts-refused"
"""Why none were kept (over the size limit, not a tar): the export says so."""


def artifacts_configmaps(trial: dict[str, Any], tar: bytes, step: str | None = None,
                         entries: Sequence[ArtifactConfig] = (), refused: str | None = None,
                         step_index: int | None = None) -> list[dict[str, Any]]:
    """The parts (`step_index`: an earlier step's of a multi-step trial, under names of their
    own; `conventions.artifacts_configmap_name`)."""
    parts = split_bundle(tar)
    annotations = {PARTS_ANNOTATION: str(len(parts)),
                   ENTRIES_ANNOTATION: json.dumps([e.model_dump() for e in entries])}
    if step is not None:
        annotations[STEP_ANNOTATION] = step
    if refused:
        annotations[REFUSED_ANNOTATION] = refused[:1000]
    return [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": artifacts_configmap_name(trial["metadata"]["name"], i, step_index),
            "namespace": trial["metadata"]["namespace"],
            "labels": trial_labels(trial, Component.ARTIFACTS),
            "annotations": annotations if i == 0 else {PARTS_ANNOTATION: str(len(parts))},
            "ownerReferences": [owner_reference(trial)],
        },
        "binaryData": {DATA_KEY: base64.b64encode(part).decode()},
    } for i, part in enumerate(parts)]


def parts_of(first: dict[str, Any]) -> int:
    return int(_annotations(first).get(PARTS_ANNOTATION) or 1)


def part_bytes(configmap: dict[str, Any]) -> bytes:
    return base64.b64decode((configmap.get("binaryData") or {}).get(DATA_KEY) or "")


def kept_step(first: dict[str, Any]) -> str | None:
    return _annotations(first).get(STEP_ANNOTATION)


def kept_entries(first: dict[str, Any]) -> list[ArtifactConfig] | None:
    """The collection set the artifacts were packed for (None: kept by an older operator)."""
    text = _annotations(first).get(ENTRIES_ANNOTATION)
    if not text:
        return None
    return [ArtifactConfig.model_validate(e) for e in json.loads(text)]


def kept_refusal(first: dict[str, Any]) -> str | None:
    return _annotations(first).get(REFUSED_ANNOTATION)


def _annotations(configmap: dict[str, Any]) -> dict[str, str]:
    return (configmap.get("metadata") or {}).get("annotations") or {}
