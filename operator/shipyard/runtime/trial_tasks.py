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

from shipyard.kube.errors import (
    ApiException,
    TransportError,
    api_message,
    is_server_error,
    namespace_terminating,
)

FIRST_BACKOFF_SEC = 1.0
MAX_BACKOFF_SEC = 60.0
MAX_REPEATED_FAILURES = 5
"""Failures of a trial's driver that are not the cluster's (a 5xx, a connection) after which
the trial is ended (`GiveUp`) instead of driven again: a repeatable error (a value the
apiserver refuses, a bug) would otherwise restart it forever with its pods running."""
Driver = Callable[[kopf.Body, logging.Logger | logging.LoggerAdapter], Awaitable[None]]
GiveUp = Callable[[kopf.Body, logging.Logger | logging.LoggerAdapter, str], Awaitable[None]]
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
          reread: Reread, give_up: GiveUp | None = None) -> None:
    key = (namespace, name)
    entry = _Running(raw=dict(raw), uid=(raw.get("metadata") or {}).get("uid", ""))
    _running[key] = entry
    entry.task = asyncio.get_running_loop().create_task(
        _supervise(key, entry, logger, driver, reread, give_up), name=f"trial {namespace}/{name}")


def transient(e: BaseException) -> bool:
    """The cluster's failure, not the trial's: worth driving again however often."""
    if isinstance(e, ApiException):
        return e.status in (None, 0, 409, 429) or is_server_error(e)
    return isinstance(e, OSError | TransportError | asyncio.TimeoutError)


async def _supervise(key: tuple[str, str], entry: _Running,
                     logger: logging.Logger | logging.LoggerAdapter, driver: Driver,
                     reread: Reread, give_up: GiveUp | None = None) -> None:
    delay = FIRST_BACKOFF_SEC
    repeated = 0
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
                if namespace_terminating(e):
                    logger.info("the namespace is being deleted, and the trial with it: "
                                "no more to do")
                    return
                repeated = 0 if transient(e) else repeated + 1
                if give_up is not None and repeated >= MAX_REPEATED_FAILURES:
                    what = (f"{e.status}: {api_message(e, 300)}" if isinstance(e, ApiException)
                            else str(e)[:300])
                    message = (f"the operator failed {repeated} times in a row driving this "
                               f"trial ({type(e).__name__} {what}); ended")
                    logger.exception(f"driving the trial failed: {message}")
                    try:
                        await give_up(kopf.Body(entry.raw), logger, message)
                        _done_uids.add(entry.uid)
                        return
                    except asyncio.CancelledError:
                        raise
                    except Exception as again:
                        logger.exception(f"ending the trial failed too: {again}")
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


def runs_other(namespace: str, name: str, uid: str | None) -> bool:
    """A driver runs here for a Trial of this name with another uid than `uid` (an object of
    a deleted Trial of the same name, e.g. its pod, not yet collected)."""
    entry = _running.get((namespace, name))
    return entry is not None and bool(entry.uid) and entry.uid != uid


def serves(namespace: str) -> bool:
    """A trial of `namespace` is driven here (safe from another thread: a copy of the keys)."""
    return any(ns == namespace for ns, _ in list(_running))


async def stop_all(timeout: float) -> None:
    """The operator stops: cancel every task and give them `timeout` seconds to end."""
    tasks = [e.task for e in _running.values() if e.task is not None]
    for task in tasks:
        task.cancel()
    if tasks:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait(tasks, timeout=timeout)
