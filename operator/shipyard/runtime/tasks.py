"""A Task at run time: its status computed (`reconcile.task_status`, with its images from
`runtime.images`) and written with the Event that announces it (`runtime.status_writer`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from shipyard import __version__
from shipyard.api.conventions import iso, object_conditions
from shipyard.api.models import TaskStatus
from shipyard.api.reasons import Reason
from shipyard.reconcile import task_status as computed
from shipyard.runtime import config
from shipyard.runtime.images import ensure_task_images, refresh_task_images
from shipyard.runtime.status_writer import StatusWriter, named
from shipyard.runtime.task_files import TaskUnavailable, load_task
from shipyard.taskformat import runnable


def validation_key(body: Any) -> str:
    """What a verdict depends on besides the Task: its spec, this operator, its settings."""
    settings = config.current()
    return computed.validation_key(
        dict(body.get("spec") or {}), __version__,
        f"{settings.images!r}/{bool(settings.scheduling.pod_defaults.image_pull_secrets)}")


def already_validated(body: Any) -> bool:
    return computed.already_validated(body.get("status"), body["metadata"].get("generation"),
                                      validation_key(body))


async def task_status(body: Any) -> tuple[TaskStatus, tuple[str, str, str]]:
    """The Task's status and the Event that announces it (`reconcile.task_status`)."""
    generation = body["metadata"].get("generation")
    previous = object_conditions(body)
    now = iso(datetime.now(UTC))
    key = validation_key(body)
    try:
        task = await asyncio.to_thread(load_task, dict(body))
    except TaskUnavailable as e:
        return computed.invalid(previous, generation, e.reason, e.message, now, key)
    verdicts = runnable.verdicts(
        task, bool(config.current().scheduling.pod_defaults.image_pull_secrets))
    refused = runnable.refused_message(verdicts)
    if refused is not None:  # it loads, but this operator will not run it: say so now
        return computed.invalid(previous, generation, Reason.TASK_INVALID, refused, now, key)
    status, event = computed.valid(previous, generation, task, now,
                                   notes=[str(v) for v in verdicts], key=key)
    return await ensure_task_images(dict(body), task, status), event


async def write_status(body: Any, status: TaskStatus, event: tuple[str, str, str]
                       ) -> None:
    """The Event, then the status, written at once (not by kopf after the handler), then
    refreshed from the ImageBuilds: a build that finished meanwhile is never missed."""
    meta = body["metadata"]
    type_, reason, message = event
    announced = named(body, type_, reason, message,
                      key=f"{meta.get('generation')}/{reason}/{message}")
    await asyncio.to_thread(StatusWriter(body, "tasks").write,
                            status.model_dump(by_alias=True, mode="json"), [announced])
    if any(c.type == "ImagesReady" for c in status.conditions):
        await asyncio.to_thread(refresh_task_images, meta["namespace"], meta["name"])
