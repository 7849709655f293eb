"""kopf registrations for warm pods (`docs/warm-pods.md`): WarmPool events start, refresh
and stop a pool's task (`runtime.warm_pools`; no kopf daemon, so no finalizer on a pool); its
pods' and its namespace's Tasks' events wake it."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from shipyard.api.conventions import LABEL_WARM_POOL
from shipyard.api.models import GROUP, VERSION
from shipyard.runtime import warm_pools


@kopf.on.event("v1", "pods", labels={LABEL_WARM_POOL: kopf.PRESENT})
async def warm_pod_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
    labels = body.get("metadata", {}).get("labels") or {}
    warm_pools.wake_pool(labels.get(LABEL_WARM_POOL), namespace)


@kopf.on.event(GROUP, VERSION, "tasks")
async def warm_task_changed(namespace: str, **_: Any) -> None:
    warm_pools.wake_pool(None, namespace)


@kopf.on.event(GROUP, VERSION, "warmpools")
async def warm_pool_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                          logger: logging.Logger, **_: Any) -> None:
    warm_pools.pool_event(event.get("type"), dict(body), namespace, name, logger)


@kopf.on.cleanup()
async def stop_pools(**_: Any) -> None:
    warm_pools.stop_all()
