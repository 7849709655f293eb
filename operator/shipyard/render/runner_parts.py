"""The static Go runner delivered in ConfigMaps (`plan.settings` `runner_files`): a trial pod
mounts them as its read-only `runner` volume instead of running an init container that copies
the runner from an image (one container start less per pod: bench/README.md, "Runner
delivery"). A ConfigMap holds at most 1 MiB and the runner is larger, so it is split into
parts (`runner.0`, `runner.1`, …); `/shipyard/bin/runner` is its loader (runner/loader), which
joins the parts into a sealed memfd and executes it. The ConfigMaps are immutable and named by
content: every pod of a namespace shares them, and a new runner gets new ones."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from shipyard.api.conventions import (
    LABEL_COMPONENT,
    MANAGED_BY,
    RUNNER_PATH,
    Component,
    runner_part_name,
)

PART_BYTES = 900 * 1024
"""A part's size: under the API server's 1 MiB per ConfigMap, with room for the loader."""
LOADER_KEY = RUNNER_PATH.rsplit("/", 1)[1]


@dataclass(frozen=True)
class RunnerConfigMaps:
    """The runner's ConfigMaps, by name, in the order of their parts (the loader is in the
    first)."""

    names: tuple[str, ...]


def _digest(runner: bytes, loader: bytes) -> str:
    return hashlib.sha256(hashlib.sha256(runner).digest() + loader).hexdigest()


def runner_configmaps(namespace: str, runner: bytes, loader: bytes) -> list[dict[str, Any]]:
    """The ConfigMaps carrying `runner` (split into parts) and its `loader`, in `namespace`."""
    digest = _digest(runner, loader)
    parts = [runner[i:i + PART_BYTES] for i in range(0, len(runner), PART_BYTES)] or [b""]
    out = []
    for index, part in enumerate(parts):
        data = {f"{LOADER_KEY}.{index}": base64.b64encode(part).decode()}
        if index == 0:
            data[LOADER_KEY] = base64.b64encode(loader).decode()
        out.append({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": runner_part_name(digest, index), "namespace": namespace,
                         "labels": {**MANAGED_BY, LABEL_COMPONENT: Component.RUNNER.value}},
            "immutable": True,
            "binaryData": data,
        })
    return out


def runner_configmap_names(runner: bytes, loader: bytes) -> RunnerConfigMaps:
    digest = _digest(runner, loader)
    count = max(1, -(-len(runner) // PART_BYTES))
    return RunnerConfigMaps(tuple(runner_part_name(digest, i) for i in range(count)))


def runner_parts_volume(runner: RunnerConfigMaps) -> dict[str, Any]:
    """The pod's `runner` volume: the parts and the loader, read-only and executable."""
    return {"name": "runner",
            "projected": {"defaultMode": 0o555,
                          "sources": [{"configMap": {"name": n}} for n in runner.names]}}
