"""Kueue admission glue: the Workload watch that wakes a trial's driver (the gate itself is
`runtime.kueue`)."""

from __future__ import annotations

from typing import Any

import kopf

from shipyard.api.conventions import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    LABEL_COMPONENT,
    LABEL_TRIAL,
    owner_name,
)
from shipyard.render.workload import WORKLOAD_COMPONENT
from shipyard.runtime import kueue


@kopf.on.event(KUEUE_GROUP, KUEUE_VERSION, "workloads",
               labels={LABEL_TRIAL: kopf.PRESENT, LABEL_COMPONENT: WORKLOAD_COMPONENT})
async def workload_changed(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                           **_: Any) -> None:
    """Async so that the wake lands on the loop (see `pod_watch.pod_changed`)."""
    kueue.workload_seen(namespace, name,
                        None if event.get("type") == "DELETED" else dict(body),
                        owner_name(body, "Trial"))
