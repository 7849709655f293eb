"""kopf registrations for Tasks: validate the Harbor task and publish Ready, digest and summary
(`runtime.tasks`); the watch keeps the Tasks' bodies for the trials (`runtime.task_files`)."""

from __future__ import annotations

from typing import Any

import kopf

from shipyard.api.conventions import condition
from shipyard.api.models import GROUP, VERSION
from shipyard.api.reasons import Reason
from shipyard.runtime import metrics, tasks
from shipyard.runtime.task_files import remember

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
async def resume_task(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """At operator start: a Task validated before on the same spec, version and settings is
    not loaded again (a big bundle is decompressed once per content, not once per start)."""
    if tasks.already_validated(body):
        return
    await validate_task(body, patch)


@kopf.on.create(GROUP, VERSION, "tasks")
@kopf.on.update(GROUP, VERSION, "tasks", field="spec")
async def validate_task(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    with metrics.reconciling("task"):
        status, event = await tasks.task_status(body)
        await tasks.write_status(body, status, event)


@kopf.timer(GROUP, VERSION, "tasks", interval=RECHECK_SEC, when=_bundle_missing)
async def recheck_bundle(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A Task whose bundle ConfigMap did not exist yet (applied after the Task, as GitOps
    tools may) becomes Ready once it appears."""
    status, event = await tasks.task_status(body)
    if status.conditions[0].reason != Reason.BUNDLE_NOT_FOUND:
        await tasks.write_status(body, status, event)
