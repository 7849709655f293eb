"""One wake registry for everything that sleeps until a resource changes, keyed by
(kind, namespace, name): a Trial's driver, a Sweep's daemon. A watch event wakes the waiter of
its key (the pod watch → its Trial, a Trial → its Sweep, a Task → the Sweeps of its
namespace). A waiter may follow other keys: a trial waiting for its Task's images follows
("Task", namespace, task), and a change of the Task's ImageBuilds wakes it.

Lifecycle: a waiter is made by what waits when it starts (`waiter`) and dropped when it ends
(`forget`, which also drops what it follows); a wake for a key nobody waits on is a no-op.
Memory holds only the latest body of each trial pod the watch told about, never state.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str]  # kind, namespace, name
TRIAL, SWEEP, TASK = "Trial", "Sweep", "Task"


@dataclass
class Waiter:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    pods: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """(A trial's) the latest body of each of its pods a watch event told (None: deleted)."""

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


_waiters: dict[Key, Waiter] = {}
_followers: dict[Key, set[Key]] = {}  # key → the waiters woken with it


def waiter(kind: str, namespace: str, name: str) -> Waiter:
    return _waiters.setdefault((kind, namespace, name), Waiter())


def get(kind: str, namespace: str, name: str) -> Waiter | None:
    return _waiters.get((kind, namespace, name))


def waiting(kind: str, namespace: str, name: str) -> bool:
    """Does something wait on this key now (e.g. a driver runs for the trial)?"""
    return (kind, namespace, name) in _waiters


def holds_pod(namespace: str, trial: str) -> bool:
    """Has this Trial's driver (in this process) a pod: one it created or claimed (set before
    the watch tells of it), or one the watch told of and not deleted?"""
    w = _waiters.get((TRIAL, namespace, trial))
    return w is not None and any(body is not None for body in w.pods.values())


def wake(kind: str, namespace: str, name: str) -> None:
    """Wake the waiter of the key and every waiter following it. Call it on the event loop:
    an asyncio.Event set from another thread does not wake the loop."""
    key = (kind, namespace, name)
    for k in (key, *_followers.get(key, ())):
        w = _waiters.get(k)
        if w is not None:
            w.event.set()


def wake_all(kind: str, namespace: str) -> None:
    """Wake every waiter of a kind in a namespace (a Task changed: its namespace's Sweeps)."""
    for (k, ns, _name), w in list(_waiters.items()):
        if k == kind and ns == namespace:
            w.event.set()


def follow(key: Key, follower: Key) -> None:
    _followers.setdefault(key, set()).add(follower)


def unfollow(key: Key, follower: Key) -> None:
    followers = _followers.get(key)
    if followers is not None:
        followers.discard(follower)
        if not followers:
            _followers.pop(key, None)


def forget(kind: str, namespace: str, name: str) -> None:
    key = (kind, namespace, name)
    _waiters.pop(key, None)
    for followed in [k for k, f in _followers.items() if key in f]:
        unfollow(followed, key)
