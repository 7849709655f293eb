"""kopf handlers for Trials: a task drives each unfinished trial (started from the watch,
without kopf's daemons and so without their finalizer patches); a daemon honours
`ttlSecondsAfterFinished` for finished ones."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import kopf

from shipyard.api.conventions import cancel_requested, is_finished_phase, parse_time
from shipyard.api.models import GROUP, VERSION
from shipyard.kube import objects
from shipyard.runtime import config, metrics, pods, trial_tasks, wake
from shipyard.runtime.trial_driver import TrialDriver


def _unfinished(status: dict[str, Any], **_: Any) -> bool:
    return not is_finished_phase((status or {}).get("phase"))


def _expiring(spec: dict[str, Any], status: dict[str, Any], **_: Any) -> bool:
    return (is_finished_phase((status or {}).get("phase"))
            and config.current().ttl_seconds(spec) is not None)


@kopf.on.event(GROUP, VERSION, "trials")
async def trial_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                      logger: logging.Logger, **_: Any) -> None:
    """Each unfinished Trial gets a driver task (`shipyard.runtime.trial_tasks`); a cancel
    request wakes it, and it decides `Cancelled` and stops its pods."""
    with metrics.reconciling("trial"):
        _trial_event(event, dict(body), namespace, name, logger)


def _trial_event(event: dict[str, Any], raw: dict[str, Any], namespace: str, name: str,
                 logger: logging.Logger) -> None:
    if event.get("type") == "DELETED":
        trial_tasks.stop(namespace, name, (raw.get("metadata") or {}).get("uid", ""))
        pods.trial_gone(namespace, name)
        metrics.trial_gone(namespace, name)
        return
    metrics.trial_seen(namespace, name, raw)
    driven = trial_tasks.update(namespace, name, raw)
    unfinished = _unfinished(raw.get("status") or {})
    if not driven and unfinished:
        trial_tasks.start(namespace, name, raw, logger, drive, reread, give_up)
    left = pods.trial_seen(namespace, name, not unfinished,
                                bool((raw.get("spec") or {}).get("keepPods")))
    if left and not driven:
        pods.remove_left_behind(namespace, name, left)
    if cancel_requested((raw.get("metadata") or {}).get("annotations")):
        wake.wake(wake.TRIAL, namespace, name)


async def drive(body: kopf.Body, logger: logging.Logger) -> None:
    await TrialDriver(body, logger, config.current()).run()


async def give_up(body: kopf.Body, logger: logging.Logger, message: str) -> None:
    await TrialDriver(body, logger, config.current()).give_up(message)


async def reread(namespace: str, name: str) -> dict[str, Any] | None:
    return await asyncio.to_thread(objects.get_custom, "trials", namespace, name)


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
    finished = parse_time(status.get("finishedAt")) or datetime.now(UTC)
    ttl = config.current().ttl_seconds(spec)
    if ttl is None:
        return
    delay = finished.timestamp() + ttl - datetime.now(UTC).timestamp()
    if delay > 0:
        await asyncio.sleep(delay)
    await asyncio.to_thread(objects.delete_custom, "trials", namespace, name)
