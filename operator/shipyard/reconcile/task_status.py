"""A Task's status, pure: (its previous status, what loading it gave, now) → the new status
and the Event that announces it. The handler (`handlers.tasks`) loads the task and adds the
images (`handlers.image_builds`); the conditions follow `api.conditions`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shipyard.api.conditions import carried
from shipyard.api.models import Condition, TaskStatus
from shipyard.api.reasons import Reason
from shipyard.plan.task_summary import summarize
from shipyard.taskformat import LoadedTask

READY = "Ready"
Event = tuple[str, str, str]  # (type, reason, message)


def invalid(previous: Iterable[Any] | None, generation: int | None, reason: str, message: str,
            now: str) -> tuple[TaskStatus, Event]:
    """The Task cannot be loaded: Ready=False with the reason (a bundle ConfigMap that does
    not exist yet is BundleNotFound, re-checked), and a Warning."""
    if reason == Reason.TASK_NOT_FOUND:
        reason = Reason.BUNDLE_NOT_FOUND
    ready = carried(previous, Condition(type=READY, status="False", reason=reason,
                                        message=message, observed_generation=generation), now)
    return (TaskStatus(observed_generation=generation, conditions=[ready]),
            ("Warning", reason, message))


def valid(previous: Iterable[Any] | None, generation: int | None, task: LoadedTask,
          now: str, notes: Iterable[str] = ()) -> tuple[TaskStatus, Event]:
    """The Task is valid: Ready=True (with `notes` on how it will run: `taskformat.runnable`),
    its digest and summary, and a Normal Event."""
    summary = summarize(task)
    said = "".join(f"; note: {n}" for n in notes)
    ready = carried(previous, Condition(type=READY, status="True", reason=Reason.VALID,
                                        message=f"task {task.name} is valid{said}",
                                        observed_generation=generation), now)
    status = TaskStatus(observed_generation=generation, digest=task.digest, summary=summary,
                        conditions=[ready])
    return status, ("Normal", Reason.VALID, f"{summary.steps} step(s), verifier "
                                            f"{summary.verifier_mode}, image {summary.image}")
