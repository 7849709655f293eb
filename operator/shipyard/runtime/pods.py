"""Trial pods left behind: a driver writes its trial's end, then deletes its pods; an operator
stopped in between leaves them. Pods seen while no driver runs are removed once their Trial is
known finished (without keepPods), in whichever order the two watches tell. The memory of
finished Trials and of unattended pods lives from the watch event that tells it until the Trial
is deleted (`trial_gone`).
"""

from __future__ import annotations

import asyncio
import logging

from shipyard.kube import objects

log = logging.getLogger("shipyard.pods")

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




def pod_unattended(namespace: str, trial: str, name: str, deleting: bool) -> None:
    """A pod of a Trial no driver runs for: removed when the Trial is known finished (without
    keepPods), else kept aside until the Trial's event tells."""
    key = (namespace, trial)
    if key in _finished:
        if left_behind(True, _finished[key], deleting):
            remove_left_behind(namespace, trial, [name])
    elif not deleting:
        _unattended.setdefault(key, set()).add(name)
