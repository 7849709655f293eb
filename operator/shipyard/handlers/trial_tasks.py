"""One asyncio task per unfinished Trial, driven from the Trial watch.

kopf's daemons would do this too, but each costs two patches per trial (its finalizer added,
then removed) and a handling cycle for each. Here a Trial event starts the trial's task unless
it runs; the task sees the Trial as the watch last delivered it (one dict, updated in place, as
kopf keeps a daemon's body); deleting the Trial cancels it (its pods are owned by the Trial and
go with it). A task that fails is started again with a backoff, from the Trial read afresh (the
watch may not have delivered what the failed driver wrote: a restart from an older status
would redo finished work against pods already gone); one that returns is done for good for
that Trial (its uid), even if late events still show it unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import kopf

FIRST_BACKOFF_SEC = 1.0
MAX_BACKOFF_SEC = 60.0
Driver = Callable[[kopf.Body, logging.Logger | logging.LoggerAdapter], Awaitable[None]]
Reread = Callable[[str, str], Awaitable[dict[str, Any] | None]]  # (namespace, name): the Trial


@dataclass
class _Running:
    raw: dict[str, Any]  # the live body: updated in place by every watch event
    task: asyncio.Task | None = None
    uid: str = ""


_running: dict[tuple[str, str], _Running] = {}
_done_uids: set[str] = set()


def update(namespace: str, name: str, raw: dict[str, Any]) -> bool:
    """Refresh the live body of a trial whose task runs (or has returned); False when none."""
    uid = (raw.get("metadata") or {}).get("uid", "")
    if uid in _done_uids:
        return True
    entry = _running.get((namespace, name))
    if entry is None or entry.uid != uid:
        return False
    entry.raw.clear()
    entry.raw.update(raw)
    return True


def start(namespace: str, name: str, raw: dict[str, Any],
          logger: logging.Logger | logging.LoggerAdapter, driver: Driver,
          reread: Reread) -> None:
    key = (namespace, name)
    entry = _Running(raw=dict(raw), uid=(raw.get("metadata") or {}).get("uid", ""))
    _running[key] = entry
    entry.task = asyncio.get_running_loop().create_task(
        _supervise(key, entry, logger, driver, reread), name=f"trial {namespace}/{name}")


async def _supervise(key: tuple[str, str], entry: _Running,
                     logger: logging.Logger | logging.LoggerAdapter, driver: Driver,
                     reread: Reread) -> None:
    delay = FIRST_BACKOFF_SEC
    try:
        fresh = True
        while True:
            try:
                if not fresh:
                    current = await reread(*key)
                    if current is None or (current.get("metadata") or {}).get("uid") != entry.uid:
                        return  # deleted meanwhile (its deletion event cancels us too)
                    entry.raw.clear()
                    entry.raw.update(current)
                await driver(kopf.Body(entry.raw), logger)
                _done_uids.add(entry.uid)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # transient (e.g. an apiserver 5xx): start again
                logger.exception(f"driving the trial failed; again in {delay:.0f}s: {e}")
                fresh = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_SEC)
    finally:
        if _running.get(key) is entry:
            del _running[key]


def stop(namespace: str, name: str, uid: str) -> None:
    """The Trial is gone: cancel its task and forget it."""
    _done_uids.discard(uid)
    entry = _running.pop((namespace, name), None)
    if entry is not None and entry.task is not None:
        entry.task.cancel()


def running() -> int:
    return len(_running)


async def stop_all(timeout: float) -> None:
    """The operator stops: cancel every task and give them `timeout` seconds to end."""
    tasks = [e.task for e in _running.values() if e.task is not None]
    for task in tasks:
        task.cancel()
    if tasks:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait(tasks, timeout=timeout)
