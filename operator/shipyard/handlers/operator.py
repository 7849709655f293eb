"""The operator process: kopf settings and the entry point behind `shipyard operator`."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import kopf
from kopf._core.reactor import observation

from shipyard.api.conventions import FINALIZER, KOPF_ANNOTATION_PREFIX

# Importing registers the handlers with kopf.
from shipyard.handlers import (  # noqa: F401
    admission,
    image_builds,
    pod_watch,
    sweeps,
    tasks,
    trials,
    warm_pools,
)
from shipyard.kube.client import requests_made
from shipyard.runtime import config, metrics, shared_objects, trial_tasks
from shipyard.runtime.executor import MeasuredExecutor, execs
from shipyard.runtime.leader import Leadership

_executor: MeasuredExecutor | None = None

_kopf_namespace_event = observation.process_discovered_namespace_event


async def _namespace_event_or_listing(*, raw_event: Any, **kwargs: Any) -> None:
    """kopf lists the namespaces once, then starts a watch that lists them again and drops that
    second listing (its events have no type), so a namespace created between the two listings
    (a namespace of a served pattern, made as the operator starts) was never served until it
    changed. Here the watch's listing counts too: adding a namespace twice is harmless."""
    if raw_event.get("type") is None:
        raw_event = {**raw_event, "type": "ADDED"}
    await _kopf_namespace_event(raw_event=raw_event, **kwargs)


observation.process_discovered_namespace_event = _namespace_event_or_listing


class TasksOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf deep-copies every object on every watch event to detect changes, which only the
    Task handlers (on.create/on.update) use; Trials and pods are followed through plain
    events, so their copy (the main cost of the event loop under many trials) is skipped."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        if body.get("kind") != "Task":
            return {}
        return super().build(body=body, extra_fields=extra_fields)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any) -> None:
    global _executor
    ours = config.load()
    if ours.error:
        logger.error(f"operator settings: {ours.error}; trials will fail with TrialInvalid")
    _executor = MeasuredExecutor(ours.threads)
    metrics.STATE.queue_depth = _executor.queued
    metrics.STATE.drivers = trial_tasks.running
    asyncio.get_running_loop().set_default_executor(_executor)
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = TasksOnlyDiffBase(
        prefix=KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Our own Events are posted explicitly (kube.events); kopf's per-handler log lines are not.
    settings.posting.level = logging.WARNING
    # `kubectl describe` shows who speaks: "From shipyard-operator", not "From kopf".
    settings.posting.reporting_component = "shipyard-operator"
    settings.posting.reporting_instance = socket.gethostname()
    settings.execution.max_workers = ours.threads


@kopf.on.cleanup()
async def report(logger: logging.Logger, **_: Any) -> None:
    """bench/ reads this line: Shipyard's own API requests, kopf's watches not included."""
    logger.info(f"shipyard api requests: {requests_made()}")
    if _executor is not None:
        logger.info(_executor.summary())
    logger.info(execs.summary())


def run(namespaces: list[str], liveness: str | None, verbose: bool,
        metrics_port: int | None = None) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # Served from the start, by a standby too (its reconciles stay at 0).
    metrics.serve(metrics_port)
    # One driver per trial: only the holder of the Lease runs kopf (standalone: kopf's own
    # peering is not used); a standby waits here, before any watch starts. The Lease is named
    # from the namespaces served, so operators serving others do not wait for this one.
    settings = config.load().leader
    leadership = Leadership(settings, namespaces) if settings.enabled else None
    if leadership is not None:
        leadership.acquire(liveness)
        leadership.keep()
    shared_objects.start(namespaces)
    try:
        asyncio.run(
            kopf.operator(
                clusterwide=not namespaces,
                namespaces=namespaces,
                liveness_endpoint=liveness,
                standalone=True,
            )
        )
    finally:
        shared_objects.stop()
        if leadership is not None:
            leadership.release()
