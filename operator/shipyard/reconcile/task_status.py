"""A Task's status, pure: (its previous status, what loading it gave, now) → the new status
and the Event that announces it. The handler (`handlers.tasks`) loads the task and adds the
images (`handlers.image_builds`); the conditions follow `api.conditions`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from shipyard.api.conditions import carried
from shipyard.api.models import Condition, TaskStatus
from shipyard.api.reasons import Reason
from shipyard.plan.task_summary import summarize
from shipyard.taskformat import LoadedTask

READY = "Ready"
Event = tuple[str, str, str]  # (type, reason, message)


def validation_key(spec: Any, operator_version: str, settings: str) -> str:
    """What a verdict depends on: the spec (inline files, or a bundle ConfigMap whose name is
    its content's hash), the operator's version and the settings validation reads."""
    text = json.dumps({"spec": spec, "operator": operator_version, "settings": settings},
                      sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def already_validated(status: Any, generation: int | None, key: str) -> bool:
    """An operator that starts need not load the task again: its status holds a final verdict
    (valid, or invalid for its content) reached on the same key for this generation."""
    status = status or {}
    if status.get("validated") != key or status.get("observedGeneration") != generation:
        return False
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == READY), None)
    return ready is not None and (ready.get("status") == "True"
                                  or ready.get("reason") == Reason.TASK_INVALID)


def invalid(previous: Iterable[Any] | None, generation: int | None, reason: str, message: str,
            now: str, key: str | None = None) -> tuple[TaskStatus, Event]:
    """The Task cannot be loaded: Ready=False with the reason (a bundle ConfigMap that does
    not exist yet is BundleNotFound, re-checked), and a Warning."""
    if reason == Reason.TASK_NOT_FOUND:
        reason = Reason.BUNDLE_NOT_FOUND
    ready = carried(previous, Condition(type=READY, status="False", reason=reason,
                                        message=message, observed_generation=generation), now)
    final = reason == Reason.TASK_INVALID  # the content's fault: the same content, same verdict
    return (TaskStatus(observed_generation=generation, conditions=[ready],
                       validated=key if final else None),
            ("Warning", reason, message))


def valid(previous: Iterable[Any] | None, generation: int | None, task: LoadedTask,
          now: str, notes: Iterable[str] = (), key: str | None = None
          ) -> tuple[TaskStatus, Event]:
    """The Task is valid: Ready=True (with `notes` on how it will run: `taskformat.runnable`),
    its digest and summary, and a Normal Event."""
    summary = summarize(task)
    said = "".join(f"; note: {n}" for n in notes)
    ready = carried(previous, Condition(type=READY, status="True", reason=Reason.VALID,
                                        message=f"task {task.name} is valid{said}",
                                        observed_generation=generation), now)
    status = TaskStatus(observed_generation=generation, digest=task.digest, summary=summary,
                        conditions=[ready], validated=key)
    return status, ("Normal", Reason.VALID, f"{summary.steps} step(s), verifier "
                                            f"{summary.verifier_mode}, image {summary.image}")
