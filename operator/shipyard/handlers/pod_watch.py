"""The pod watch → trial wake-ups. Each change of a trial pod (its start, the probe container's
readiness as phases run, its loss) lands here through kopf's single shared watch and wakes the
trial's driver (`runtime.wake`); a pod of a trial no driver runs for goes to `runtime.pods`."""

from __future__ import annotations

from typing import Any

import kopf

from shipyard.api.conventions import (
    LABEL_COMPONENT,
    LABEL_TRIAL,
    POD_COMPONENTS,
    owner_name,
    owner_references,
)
from shipyard.runtime import pods, trial_tasks, wake


@kopf.on.event("v1", "pods", labels={LABEL_TRIAL: kopf.PRESENT, LABEL_COMPONENT: kopf.PRESENT})
async def pod_changed(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                      **_: Any) -> None:
    """Async on purpose: kopf runs a plain function in a thread, and an asyncio.Event set from
    another thread does not wake the loop (a phase's end would wait for some other wake-up)."""
    meta = body.get("metadata", {})
    if meta.get("labels", {}).get(LABEL_COMPONENT) not in POD_COMPONENTS:
        return
    # The owner's name, not the label: a label value may be a shortened name.
    owner = owner_name(body, "Trial")
    owner_uid = next((o.get("uid") for o in owner_references(body, "Trial")), None)
    if owner is not None and trial_tasks.runs_other(namespace, owner, owner_uid):
        return  # a deleted Trial's pod under the name a new one of the same name uses
    w = wake.get(wake.TRIAL, namespace, owner or "")
    if w is None:
        if owner is None or event.get("type") == "DELETED":
            return
        pods.pod_unattended(namespace, owner, name, bool(meta.get("deletionTimestamp")))
        return
    w.pods[name] = None if event.get("type") == "DELETED" else dict(body)
    w.event.set()
