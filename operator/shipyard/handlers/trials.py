"""kopf handlers for Trials: a task drives each unfinished trial (started from the watch,
without kopf's daemons and so without their finalizer patches); a daemon honours
`ttlSecondsAfterFinished` for finished ones."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from typing import Any

import kopf

from shipyard.api.models import GROUP, VERSION, cancel_requested
from shipyard.handlers import trial_tasks
from shipyard.handlers.pod_watch import wake
from shipyard.handlers.trial_driver import TrialDriver
from shipyard.kube import objects
from shipyard.reconcile.trial_machine import parse_iso

FINISHED = ("Completed", "Failed")


def _unfinished(status: dict[str, Any], **_: Any) -> bool:
    return (status or {}).get("phase") not in FINISHED


DEFAULT_TTL_ENV = "SHIPYARD_TRIAL_TTL_SECONDS_AFTER_FINISHED"


def ttl_seconds(spec: dict[str, Any]) -> int | None:
    """The Trial's ttlSecondsAfterFinished, else the operator's default (the chart's
    `trials.logRetentionSeconds`), else None: kept until deleted."""
    if spec.get("ttlSecondsAfterFinished") is not None:
        return int(spec["ttlSecondsAfterFinished"])
    raw = os.environ.get(DEFAULT_TTL_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _expiring(spec: dict[str, Any], status: dict[str, Any], **_: Any) -> bool:
    return (status or {}).get("phase") in FINISHED and ttl_seconds(spec) is not None


@kopf.on.event(GROUP, VERSION, "trials")
async def trial_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                      logger: logging.Logger, **_: Any) -> None:
    """Each unfinished Trial gets a driver task (`shipyard.handlers.trial_tasks`); a cancel
    request wakes it, and it decides `Cancelled` and stops its pods."""
    raw = dict(body)
    if event.get("type") == "DELETED":
        trial_tasks.stop(namespace, name, (raw.get("metadata") or {}).get("uid", ""))
        return
    if not trial_tasks.update(namespace, name, raw) and _unfinished(raw.get("status") or {}):
        trial_tasks.start(namespace, name, raw, logger, drive)
    if cancel_requested((raw.get("metadata") or {}).get("annotations")):
        wake(namespace, name)


async def drive(body: kopf.Body, logger: logging.Logger) -> None:
    await TrialDriver(body, logger).run()


@kopf.on.cleanup()
async def stop_drivers(**_: Any) -> None:
    await trial_tasks.stop_all(timeout=10)


@kopf.daemon(GROUP, VERSION, "trials", when=_expiring, cancellation_timeout=5)
async def expire_trial(
    body: kopf.Body,
    spec: dict[str, Any],
    status: dict[str, Any],
    namespace: str,
    name: str,
    **_: Any,
) -> None:
    finished = parse_iso(status.get("finishedAt")) or datetime.now(UTC)
    delay = finished.timestamp() + ttl_seconds(spec) - datetime.now(UTC).timestamp()
    if delay > 0:
        await asyncio.sleep(delay)
    await asyncio.to_thread(objects.delete_custom, "trials", namespace, name)
