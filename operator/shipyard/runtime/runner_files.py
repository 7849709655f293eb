"""Which runner the operator's trial pods get (`render.pod.Runner`): the static Go runner in
ConfigMaps when the operator has its files (`settings.runner_files`: a folder with `runner`
and `loader`), else the runner's image (copied by an init container), else runner.sh. The
files are read once; their ConfigMaps are made once per namespace, before its first pod."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from shipyard.kube import objects
from shipyard.plan.settings import OperatorSettings
from shipyard.render.pod import Runner
from shipyard.render.runner_parts import RunnerConfigMaps, runner_configmap_names, runner_configmaps

log = logging.getLogger("shipyard.runner")


@functools.cache
def _files(folder: str) -> tuple[bytes, bytes] | None:
    try:
        return (Path(folder, "runner").read_bytes(), Path(folder, "loader").read_bytes())
    except OSError as e:
        log.error(f"the runner's files in {folder} cannot be read ({e}): trial pods get the "
                  "runner from its image instead")
        return None


@functools.cache
def _names(folder: str) -> RunnerConfigMaps | None:
    """The ConfigMaps' names (a digest of the files: hashed once, not per trial)."""
    files = _files(folder)
    return runner_configmap_names(*files) if files else None


_ready: set[tuple[str, str]] = set()
"""(namespace, first ConfigMap) whose runner ConfigMaps this process made or found equal: no
trial of theirs renders the 2.7 MB runner into ConfigMaps again."""


def forget(namespace: str) -> None:
    """A runner ConfigMap of `namespace` was deleted: the next trial there makes them again."""
    for key in [k for k in list(_ready) if k[0] == namespace]:
        _ready.discard(key)


def runner_of(settings: OperatorSettings) -> Runner:
    """The runner of the pods made under `settings` (for a pod's spec: no API call)."""
    if settings.runner_files is not None and (names := _names(settings.runner_files)):
        return names
    return settings.runner_image


def go_runner_name(settings: OperatorSettings) -> str:
    """Which Go runner `runner_of` gives pods, as `PodObservation.go_runner` reads it from a
    pod (its first ConfigMap, or its image); empty with runner.sh."""
    runner = runner_of(settings)
    if isinstance(runner, RunnerConfigMaps):
        return runner.names[0]
    return runner or ""


def ensure_runner(settings: OperatorSettings, namespace: str) -> Runner:
    """(In a thread) `runner_of`, its ConfigMaps made in `namespace` first (once a process)."""
    runner = runner_of(settings)
    if isinstance(runner, RunnerConfigMaps) and (namespace, runner.names[0]) not in _ready:
        files = _files(settings.runner_files or "")
        assert files is not None
        for configmap in runner_configmaps(namespace, *files):
            objects.ensure_configmap_once(configmap)
        _ready.add((namespace, runner.names[0]))
    return runner
