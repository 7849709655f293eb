"""Pushing a task directory as a Task (shared by `shipyard task push` and `shipyard run DIR`)
and waiting, with a progress display, for the operator to validate it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from shipyard.api.conventions import condition, object_conditions
from shipyard.cli.common import err, fail
from shipyard.cli.serving import (
    OPERATOR_SELECTOR,
    InstalledOperator,
    no_operator_message,
    operators_from_deployments,
    task_state,
)
from shipyard.taskformat import LoadedTask, TaskFormatError, load_task_dir
from shipyard.taskformat.compose import compose_refusals

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Leaves room for "-bundle-<10 hex>" in the bundle's ConfigMap name.
MAX_TASK_NAME = 40


def task_resource_name(loaded: LoadedTask, directory: Path) -> str:
    """A DNS label from `[task].name` (without its `org/`), else the directory name."""
    base = loaded.short_name if loaded.config.task else directory.resolve().name
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_TASK_NAME].strip("-")
    return name or "task"


def check_name(name: str) -> str:
    if not DNS_LABEL.match(name) or len(name) > MAX_TASK_NAME:
        fail(f"--name {name!r}: a Task name must be lowercase letters, digits and '-', "
             f"at most {MAX_TASK_NAME} characters")
    return name


def load_directory(directory: Path) -> LoadedTask:
    """The task directory, validated like `shipyard task lint`; errors are CLI errors."""
    try:
        loaded = load_task_dir(directory)
        refusals = compose_refusals(loaded)
        if refusals:
            raise TaskFormatError.combine(refusals)
        return loaded
    except TaskFormatError as exc:
        lines = []
        for error in exc.errors:
            where = ": ".join(p for p in (error.file, error.field) if p)
            lines.append(f"{directory}: {where}: {error.reason}" if where
                         else f"{directory}: {error.reason}")
        fail("; ".join(lines) or f"{directory}: not a valid task")


def push_directory(directory: Path, namespace: str, name: str | None) -> tuple[str, Any]:
    """Push the task; returns (task name, PushResult)."""
    from shipyard.kube.bundles import BundleTooLarge, push_task

    loaded = load_directory(directory)
    task_name = check_name(name) if name else task_resource_name(loaded, directory)
    try:
        result = push_task(namespace, task_name, loaded.files)
    except BundleTooLarge as exc:
        fail(f"{directory}: {exc}")
    return task_name, result


def wait_validated(namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
    """Follow the Task until an operator has validated its current generation (Ready True
    or False); None when none did within `timeout` seconds."""
    from shipyard.kube.watch import follow

    began = time.monotonic()
    with err().status(f"waiting for the operator to validate task {name}...") as status:
        try:
            for task in follow("tasks", namespace, name, timeout=timeout):
                if task_state(task) != "unvalidated":
                    return task
                status.update(f"waiting for the operator to validate task {name}... "
                              f"{time.monotonic() - began:.0f}s")
        except TimeoutError:
            return None
    return None  # pragma: no cover - follow never ends by itself


def installed_operators() -> list[InstalledOperator]:
    """The chart-installed operators this user can see (none when it may not list
    Deployments): only for hints, so a failure here never hides the real message."""
    from shipyard.kube.trials import operator_deployments

    try:
        return operators_from_deployments(operator_deployments(OPERATOR_SELECTOR) or [])
    except Exception:  # a hint must not replace the error it explains
        return []


def wait_ready(namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The Task once validated; a CLI error naming the fix when no operator validates it."""
    task = wait_validated(namespace, name, timeout)
    if task is None:
        fail(no_operator_message(
            namespace, f"task {name} is still not validated (no Ready condition)", timeout,
            installed_operators()))
    return task


def ready_condition(task: dict[str, Any]) -> dict[str, Any] | None:
    return condition(object_conditions(task), "Ready", status=None)
