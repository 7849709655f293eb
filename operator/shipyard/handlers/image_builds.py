"""kopf registrations for task images: ImageBuild events update their owner Tasks (and wake
the trials waiting for them), build pods and Jobs decide their ImageBuild at once, and a
safety-net timer refreshes building Tasks. The work is `runtime.images`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from shipyard.api.conventions import LABEL_IMAGE_BUILD
from shipyard.api.models import GROUP, IMAGES_READY, VERSION
from shipyard.api.reasons import Reason
from shipyard.render.build_job import BUILD_CONTAINER
from shipyard.runtime import images
from shipyard.runtime.images import PLURAL, REFRESH_SEC


@kopf.on.event(GROUP, VERSION, PLURAL)
async def build_status_changed(event: dict[str, Any], body: kopf.Body, namespace: str,
                               **_: Any) -> None:
    """Every change of an ImageBuild (kopf keeps no diff of status) updates its owner Tasks;
    a deleted one is made again for the Tasks that still need it (a retry)."""
    if event.get("type") == "DELETED":
        for task in images.owner_tasks(dict(body)):
            await asyncio.to_thread(images.rebuild_for_task, namespace, task)
            images.wake_trials(namespace, task)
        return
    if not body.get("status"):
        return
    for task in images.owner_tasks(dict(body)):
        await asyncio.to_thread(images.refresh_task_images, namespace, task)
        images.wake_trials(namespace, task)


def _building(status: dict[str, Any], **_: Any) -> bool:
    return any(c.get("type") == IMAGES_READY and c.get("status") == "False"
               and c.get("reason") in (Reason.BUILDING, Reason.REGISTRY_UNAVAILABLE)
               for c in (status or {}).get("conditions") or [])


@kopf.timer(GROUP, VERSION, "tasks", interval=REFRESH_SEC, when=_building)
async def refresh_building_task(namespace: str, name: str, **_: Any) -> None:
    """A safety net: a build's status change missed while the operator was down."""
    await asyncio.to_thread(images.refresh_task_images, namespace, name)
    images.wake_trials(namespace, name)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
async def start_build(body: kopf.Body, retry: int, **_: Any) -> None:
    await images.apply_build(dict(body), retry)


@kopf.on.event("v1", "pods", labels={LABEL_IMAGE_BUILD: kopf.PRESENT})
async def build_pod_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
    """The build container ended: decide at once, before the Job controller notices."""
    statuses = (body.get("status") or {}).get("containerStatuses") or []
    if not any(cs.get("name") == BUILD_CONTAINER and (cs.get("state") or {}).get("terminated")
               for cs in statuses):
        return
    await images.decide_build_of(
        namespace, (body.get("metadata") or {}).get("labels", {}).get(LABEL_IMAGE_BUILD))


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_IMAGE_BUILD: kopf.PRESENT})
async def build_job_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
    """The build Job finished (or changed): decide the ImageBuild's outcome at once."""
    conditions = (body.get("status") or {}).get("conditions") or []
    if not any(c.get("status") == "True" for c in conditions):
        return
    await images.decide_build_of(
        namespace, (body.get("metadata") or {}).get("labels", {}).get(LABEL_IMAGE_BUILD))
