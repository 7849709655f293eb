"""Loading the Harbor task held by a Task resource.

Trials of one Task share what it takes to load it: the Task's latest body comes from kopf's
watch of Tasks (`remember`), and the loaded task is kept per resourceVersion, so N trials of a
Task cost no GET and parse it once (a Task not seen yet is read with one GET, as before).
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from shipyard.api.reasons import Reason
from shipyard.api.task_source import (
    BUNDLE_KEY,
    TaskSourceError,
    files_from_bundle,
    files_from_inline,
    part_names,
)
from shipyard.kube import objects
from shipyard.taskformat import LoadedTask, TaskFormatError, load_task_files
from shipyard.taskformat.compose import compose_refusals

# Split bundles (several MiB, read by every trial and refresh) are kept decoded, a few at a time.
CACHE_ENTRIES = 4
CACHE_MIN_BYTES = 512 * 1024
_bundles: dict[tuple[str, str, int | None], dict[str, bytes]] = {}


class TaskUnavailable(Exception):
    """The Task cannot be used; `reason` is TaskNotFound or TaskInvalid (or Cancelled while
    the trial waited for its Task)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def task_files(task: dict[str, Any]) -> dict[str, bytes]:
    meta, source = task["metadata"], task.get("spec", {}).get("source", {})
    if source.get("inline") is not None:
        return files_from_inline(source["inline"].get("files") or {})
    if source.get("configMap") is not None:
        cm_name, parts = source["configMap"]["name"], source["configMap"].get("parts")
        key = (meta["namespace"], cm_name, parts)
        if key in _bundles:  # content-addressed names: a bundle never changes
            return _bundles[key]
        bundle = b"".join(_bundle_part(meta["namespace"], name)
                          for name in part_names(cm_name, parts))
        try:
            files = files_from_bundle(bundle)
        except TaskSourceError as e:
            raise TaskUnavailable(Reason.TASK_INVALID, f"spec.source.configMap: {e}") from e
        if len(bundle) > CACHE_MIN_BYTES:  # only big bundles are worth keeping
            while len(_bundles) >= CACHE_ENTRIES:
                _bundles.pop(next(iter(_bundles)))
            _bundles[key] = files
        return files
    raise TaskUnavailable(Reason.TASK_INVALID, "spec.source: set inline.files or configMap.name")


def _bundle_part(namespace: str, name: str) -> bytes:
    cm = objects.get_configmap(namespace, name)
    if cm is None:  # not created yet, maybe: Trials and the Task wait for it
        raise TaskUnavailable(
            Reason.TASK_NOT_FOUND,
            f"spec.source.configMap: ConfigMap {name} (the task bundle) not found")
    binary = (cm.get("binaryData") or {}).get(BUNDLE_KEY)
    if binary is None:
        raise TaskUnavailable(
            Reason.TASK_INVALID,
            f"spec.source.configMap: ConfigMap {name} has no binaryData key {BUNDLE_KEY}")
    return base64.b64decode(binary)


def load_task(task: dict[str, Any]) -> LoadedTask:
    files = task_files(task)
    try:
        loaded = load_task_files(files, name=task["metadata"]["name"])
    except TaskFormatError as e:
        raise TaskUnavailable(Reason.TASK_INVALID, str(e)) from e
    refusals = compose_refusals(loaded)
    if refusals:  # valid for Harbor, but not runnable here: never run it without them
        raise TaskUnavailable(Reason.TASK_INVALID, str(TaskFormatError.combine(refusals)))
    return loaded


_lock = threading.Lock()
_bodies: dict[tuple[str, str], dict[str, Any]] = {}
_loaded: dict[tuple[str, str], tuple[str, LoadedTask]] = {}  # → (resourceVersion, task)


def remember(task: dict[str, Any] | None, namespace: str, name: str) -> None:
    """The latest body of a Task from the watch (None: deleted)."""
    with _lock:
        if task is None:
            _bodies.pop((namespace, name), None)
            _loaded.pop((namespace, name), None)
        else:
            _bodies[(namespace, name)] = task


def task_body(namespace: str, name: str) -> dict[str, Any] | None:
    """The Task's latest body: the watch's, else one GET (None: it does not exist)."""
    with _lock:
        task = _bodies.get((namespace, name))
    return task if task is not None else objects.get_custom("tasks", namespace, name)


def load_task_by_name(namespace: str, name: str) -> LoadedTask:
    key = (namespace, name)
    task = task_body(namespace, name)
    if task is None:
        raise TaskUnavailable(Reason.TASK_NOT_FOUND, f"Task {namespace}/{name} not found")
    version = task["metadata"].get("resourceVersion") or ""
    with _lock:
        hit = _loaded.get(key)
    if hit is not None and hit[0] == version:
        return hit[1]
    loaded = load_task(task)
    with _lock:
        _loaded[key] = (version, loaded)
    return loaded
