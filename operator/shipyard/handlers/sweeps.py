"""kopf registrations for Sweeps: a daemon per unsettled Sweep (`runtime.sweeps`), woken by its
Trials' and its own events, and by Task events in its namespace (`runtime.wake`)."""

from __future__ import annotations

import json
import logging
from typing import Any

import kopf

from shipyard.api.conventions import LABEL_SWEEP, owner_name
from shipyard.api.models import GROUP, VERSION
from shipyard.kube import sweeps as kube
from shipyard.reconcile.sweep_status import is_settled, observe, wakes
from shipyard.runtime import sweeps, wake


def _owner(body: kopf.Body) -> str | None:
    return owner_name(body, "Sweep")


@kopf.on.event(GROUP, VERSION, "trials", labels={LABEL_SWEEP: kopf.PRESENT})
async def sweep_trial_changed(event: dict[str, Any], body: kopf.Body, namespace: str,
                              name: str, **_: Any) -> None:
    owner = _owner(body) or ""
    index = sweeps.index_of(namespace, owner)
    if index is None:
        return  # its Sweep's daemon lists the Trials when it starts
    if event.get("type") == "DELETED":
        index.trials.pop(name, None)
        wake.wake(wake.SWEEP, namespace, owner)
        return
    before = index.trials.get(name)
    index.put(observe(body))
    if wakes(before, index.trials.get(name)):
        wake.wake(wake.SWEEP, namespace, owner)


@kopf.on.event(GROUP, VERSION, "sweeps")
async def sweep_changed(namespace: str, name: str, **_: Any) -> None:
    wake.wake(wake.SWEEP, namespace, name)


@kopf.on.event(GROUP, VERSION, "tasks")
async def sweep_task_changed(namespace: str, **_: Any) -> None:
    """A Task came, went or was validated: the namespace's Sweeps look at their tasks again."""
    for index in sweeps.indexes_in(namespace):
        index.tasks_changed = True
    wake.wake_all(wake.SWEEP, namespace)


@kopf.on.cleanup()
async def report_sweep_requests(logger: logging.Logger, **_: Any) -> None:
    """bench/sweep.py reads this line: the API requests Sweeps made, in all and by kind."""
    made = kube.requests_made()
    logger.info(f"shipyard sweep api requests: {sum(made.values())} {json.dumps(made)}")


def _unsettled(meta: dict[str, Any], status: dict[str, Any], **_: Any) -> bool:
    return not is_settled(meta, status)


@kopf.daemon(GROUP, VERSION, "sweeps", when=_unsettled, cancellation_timeout=10,
             initial_delay=0)
async def run_sweep(body: kopf.Body, namespace: str, name: str, logger: logging.Logger,
                    stopped: kopf.DaemonStopped, **_: Any) -> None:
    await sweeps.run(body, namespace, name, logger, stopped)

