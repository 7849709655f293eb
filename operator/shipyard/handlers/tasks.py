"""kopf handlers for Tasks: validate the Harbor task and publish Ready, digest and summary."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from shipyard.api.conventions import condition, iso, object_conditions
from shipyard.api.models import GROUP, VERSION, TaskStatus
from shipyard.api.reasons import Reason
from shipyard.kube import events as kube_events
from shipyard.kube import objects
from shipyard.reconcile import task_status as computed
from shipyard.runtime import config, metrics
from shipyard.runtime.images import ensure_task_images, refresh_task_images
from shipyard.runtime.task_files import TaskUnavailable, load_task, remember
from shipyard.taskformat import runnable

RECHECK_SEC = 10.0


def _bundle_missing(status: dict[str, Any], **_: Any) -> bool:
    return condition((status or {}).get("conditions"), "Ready", status=None,
                     reason=Reason.BUNDLE_NOT_FOUND) is not None


@kopf.on.event(GROUP, VERSION, "tasks")
async def task_seen(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                    **_: Any) -> None:
    """Trials load their Task from what the watch last said (no GET per trial)."""
    remember(None if event.get("type") == "DELETED" else dict(body), namespace, name)


@kopf.on.resume(GROUP, VERSION, "tasks")
@kopf.on.create(GROUP, VERSION, "tasks")
@kopf.on.update(GROUP, VERSION, "tasks", field="spec")
async def validate_task(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    with metrics.reconciling("task"):
        status, event = await task_status(body)
        await write_status(body, status, event)


async def write_status(body: kopf.Body, status: TaskStatus, event: tuple[str, str, str]
                       ) -> None:
    """The Event, then the status, written at once (not by kopf after the handler), then
    refreshed from the ImageBuilds: a build that finished meanwhile is never missed."""
    meta = body["metadata"]
    type_, reason, message = event
    await asyncio.to_thread(kube_events.post_event, dict(body), type_, reason, message,
                            key=f"{meta.get('generation')}/{reason}/{message}")
    await asyncio.to_thread(objects.patch_status, "tasks", meta["namespace"], meta["name"],
                            status.model_dump(by_alias=True, mode="json"))
    if any(c.type == "ImagesReady" for c in status.conditions):
        await asyncio.to_thread(refresh_task_images, meta["namespace"], meta["name"])


@kopf.timer(GROUP, VERSION, "tasks", interval=RECHECK_SEC, when=_bundle_missing)
async def recheck_bundle(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A Task whose bundle ConfigMap did not exist yet (applied after the Task, as GitOps
    tools may) becomes Ready once it appears."""
    status, event = await task_status(body)
    if status.conditions[0].reason != Reason.BUNDLE_NOT_FOUND:
        await write_status(body, status, event)


async def task_status(body: kopf.Body) -> tuple[TaskStatus, tuple[str, str, str]]:
    """The Task's status and the Event that announces it (`reconcile.task_status`)."""
    generation = body["metadata"].get("generation")
    previous = object_conditions(body)
    now = iso(datetime.now(UTC))
    try:
        task = await asyncio.to_thread(load_task, dict(body))
    except TaskUnavailable as e:
        return computed.invalid(previous, generation, e.reason, e.message, now)
    verdicts = runnable.verdicts(
        task, bool(config.current().scheduling.pod_defaults.image_pull_secrets))
    refused = runnable.refused_message(verdicts)
    if refused is not None:  # it loads, but this operator will not run it: say so now
        return computed.invalid(previous, generation, Reason.TASK_INVALID, refused, now)
    status, event = computed.valid(previous, generation, task, now,
                                   notes=[str(v) for v in verdicts])
    return await ensure_task_images(dict(body), task, status), event
