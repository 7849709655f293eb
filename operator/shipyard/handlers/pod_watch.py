"""The pod watch → trial wake-ups. Each change of a trial pod (its start, the probe container's
readiness as phases run, its loss) lands here through kopf's single shared watch and wakes the
trial's driver. Memory holds only the latest pod per trial, never trial state."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import kopf

from shipyard.api.conventions import LABEL_COMPONENT, LABEL_TRIAL, POD_COMPONENTS


@dataclass
class TrialWaker:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    pods: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """The latest body of each trial pod a watch event told us about (None: deleted)."""

    async def wait(self, timeout: float | None) -> bool:
        """Until woken or `timeout` seconds passed; True when woken. A wake that lands while a
        timed-out wait is being cancelled (`wait_for` yields to the loop then) still counts:
        cleared unseen, it was lost, and a driver whose pod turned Running just as its short
        wait ended slept until the start timeout (bench/concurrent_trials.py, 1 of 30)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout)
        woken = self.event.is_set()
        self.event.clear()
        return woken


_wakers: dict[tuple[str, str], TrialWaker] = {}


def waker(namespace: str, trial: str) -> TrialWaker:
    return _wakers.setdefault((namespace, trial), TrialWaker())


def wake(namespace: str, trial: str) -> None:
    w = _wakers.get((namespace, trial))
    if w is not None:
        w.event.set()


def forget(namespace: str, trial: str) -> None:
    _wakers.pop((namespace, trial), None)


@kopf.on.event("v1", "pods", labels={LABEL_TRIAL: kopf.PRESENT, LABEL_COMPONENT: kopf.PRESENT})
async def pod_changed(event: dict[str, Any], body: kopf.Body, namespace: str, name: str,
                      **_: Any) -> None:
    """Async on purpose: kopf runs a plain function in a thread, and an asyncio.Event set from
    another thread does not wake the loop (a phase's end would wait for some other wake-up)."""
    meta = body.get("metadata", {})
    if meta.get("labels", {}).get(LABEL_COMPONENT) not in POD_COMPONENTS:
        return
    # The owner's name, not the label: a label value may be a shortened name.
    owner = next((o["name"] for o in meta.get("ownerReferences") or []
                  if o.get("kind") == "Trial"), None)
    w = _wakers.get((namespace, owner))
    if w is None:
        return
    w.pods[name] = None if event.get("type") == "DELETED" else dict(body)
    w.event.set()
