"""The pod watch → trial wake-ups. Each change of a trial pod (its start, the probe container's
readiness as phases run, its loss) lands here through kopf's single shared watch and wakes the
trial's driver. Memory holds only the latest pod per trial, never trial state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from shipyard.api.conventions import LABEL_COMPONENT, LABEL_TRIAL, POD_COMPONENTS, owner_name
from shipyard.kube import objects

log = logging.getLogger("shipyard.pods")


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


def driven(namespace: str, trial: str) -> bool:
    """Does a driver run for the trial now?"""
    return (namespace, trial) in _wakers


def forget(namespace: str, trial: str) -> None:
    _wakers.pop((namespace, trial), None)


# Pods left behind: a driver writes its trial's end, then deletes its pods; an operator stopped
# in between leaves them. Pods seen while no driver runs are removed once their Trial is known
# finished (without keepPods), in whichever order the two watches tell.
_finished: dict[tuple[str, str], bool] = {}  # finished Trials → keepPods
_unattended: dict[tuple[str, str], set[str]] = {}  # pods of Trials not yet seen, by Trial


def trial_seen(namespace: str, trial: str, finished: bool, keep_pods: bool) -> list[str]:
    """A Trial event: the pods of a finished one seen meanwhile that are to go."""
    key = (namespace, trial)
    pods = _unattended.pop(key, set())
    if not finished:
        return []
    _finished[key] = keep_pods
    return sorted(p for p in pods if left_behind(True, keep_pods, False))


def trial_gone(namespace: str, trial: str) -> None:
    _finished.pop((namespace, trial), None)
    _unattended.pop((namespace, trial), None)


def left_behind(trial_finished: bool, keep_pods: bool, pod_deleting: bool) -> bool:
    """A pod of a finished Trial without keepPods, not being deleted yet, is to go."""
    return trial_finished and not keep_pods and not pod_deleting


async def _remove(namespace: str, name: str, trial: str) -> None:
    await asyncio.to_thread(objects.delete_pod, namespace, name)
    log.info(f"pod {namespace}/{name} of finished trial {trial} was left behind: deleted")


def remove_left_behind(namespace: str, trial: str, pods: list[str]) -> None:
    for name in pods:
        task = asyncio.get_running_loop().create_task(_remove(namespace, name, trial))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)


_tasks: set[asyncio.Task] = set()


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
    w = _wakers.get((namespace, owner))
    if w is None:
        if owner is None or event.get("type") == "DELETED":
            return
        key, deleting = (namespace, owner), bool(meta.get("deletionTimestamp"))
        if key in _finished:
            if left_behind(True, _finished[key], deleting):
                remove_left_behind(namespace, owner, [name])
        elif not deleting:
            _unattended.setdefault(key, set()).add(name)
        return
    w.pods[name] = None if event.get("type") == "DELETED" else dict(body)
    w.event.set()
