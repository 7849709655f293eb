"""The Sweep daemon's work (its kopf registrations are `handlers.sweeps`): it creates the
missing Trials of its Sweep's plan within the limits and writes its status; Trial and Sweep
events wake it (`runtime.wake`).

Nothing here is state: the index of a Sweep's Trials is a cache of the API (listed when the
daemon starts and every few minutes, then kept current by kopf's Trial watch and by our own
creates), so a restarted operator rebuilds it and goes on where the Trials are. A create that
answers 409 means the cache missed a Trial: it is listed again before anything else is created.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from shipyard.api.compat import known_fields
from shipyard.api.conditions import carried, changed, event_key
from shipyard.api.conventions import (
    iso,
    owner_references,
    parse_time,
    selector_string,
    sweep_selector,
)
from shipyard.api.models import Condition
from shipyard.api.reasons import Reason
from shipyard.api.sweep import SweepSpec, SweepStatus
from shipyard.kube import sweeps as kube
from shipyard.kube import warm_pods as warm_kube
from shipyard.kube.errors import ApiException, namespace_terminating
from shipyard.plan.sweep import Slot, expand, trial_body
from shipyard.plan.warm import sweep_pools
from shipyard.reconcile.sweep_status import (
    ObservedTrial,
    admit,
    newer,
    observe,
    pause_after,
    resolve_tasks,
    sweep_status,
    write_delay,
)
from shipyard.runtime import config, metrics, wake
from shipyard.runtime.status_writer import PendingEvent, StatusWriter, named

TASKS_REFRESH = 300.0  # Task events wake the Sweeps; this is only a safety net
RESYNC = 300.0  # the Sweep's Trials are listed again after this long
IDLE_WAIT = 60.0
PENDING_RECHECK = 5.0


@dataclass
class SweepIndex:
    """The Trials of one Sweep as last seen (its daemon's waiter is `runtime.wake`'s)."""

    trials: dict[str, ObservedTrial] = field(default_factory=dict)
    tasks_changed: bool = True

    def put(self, trial: ObservedTrial | None) -> None:
        if trial is not None and newer(self.trials.get(trial.name), trial):
            self.trials[trial.name] = trial


_index: dict[tuple[str, str], SweepIndex] = {}


def index_of(namespace: str, name: str) -> SweepIndex | None:
    return _index.get((namespace, name))


def indexes_in(namespace: str) -> list[SweepIndex]:
    return [index for (ns, _name), index in _index.items() if ns == namespace]


async def run(body: kopf.Body, namespace: str, name: str, logger: logging.Logger,
              stopped: kopf.DaemonStopped) -> None:
    """A Sweep's daemon: its index and its waiter live as long as it runs."""
    index = _index.setdefault((namespace, name), SweepIndex())
    try:
        await SweepDriver(body, namespace, name, index, logger).run(stopped)
    finally:
        _index.pop((namespace, name), None)
        wake.forget(wake.SWEEP, namespace, name)
        metrics.sweep_queued(namespace, name, None)


class SweepDriver:
    """Reads (the live Sweep body, the cached Trials, the Tasks), asks the pure layers what
    to create and what the status is, and applies that."""

    def __init__(self, body: kopf.Body, namespace: str, name: str, index: SweepIndex,
                 logger: logging.Logger) -> None:
        self.body, self.namespace, self.name = body, namespace, name
        self.index, self.logger = index, logger
        self.settings = config.current()
        self.tasks: list[dict[str, Any]] = []
        self.tasks_at = self.synced_at = -1e9
        self.writer = StatusWriter(body, "sweeps",
                                   patch=lambda status: kube.write_status(namespace, name, status))
        self.written_at = -1e9
        self.generation: int | None = None
        self.computed = 0.0  # seconds the last pass spent in the pure layers (on the loop)
        self.pools: dict[str, Any] | None = None  # its WarmPools' specs, as last written
        self.waiter = wake.waiter(wake.SWEEP, namespace, name)

    async def run(self, stopped: kopf.DaemonStopped) -> None:
        # Stopped (the Sweep deleted, the operator stopping): leave at once, so that kopf
        # takes its finalizer off the Sweep before a stopping operator is gone.
        stopping = asyncio.create_task(_until(stopped))
        try:
            await self.resync()
            while not stopped:
                try:
                    with metrics.reconciling("sweep"):
                        wait = await self.reconcile()
                except ApiException as e:
                    if not namespace_terminating(e):
                        raise
                    self.logger.info("the namespace is being deleted, and the sweep with it: "
                                     "no more trials")
                    return
                woken = asyncio.create_task(self.waiter.event.wait())
                await asyncio.wait({woken, stopping}, timeout=wait,
                                   return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                self.waiter.event.clear()
                if not stopped:  # let a burst of Trial events land first
                    await asyncio.sleep(pause_after(self.computed))
        finally:
            stopping.cancel()

    async def resync(self) -> None:
        items = await asyncio.to_thread(kube.list_trials, self.namespace,
                                        selector_string(sweep_selector(self.name)))
        seen = set()
        for item in items:
            trial = observe(item)
            if trial is not None and _owned_by(item, self.body):
                seen.add(trial.name)
                self.index.put(trial)
        for gone in set(self.index.trials) - seen:
            self.index.trials.pop(gone, None)
        self.synced_at = time.monotonic()

    async def reconcile(self) -> float:
        """One pass; returns how long to wait at most before the next."""
        sweep = {"metadata": dict(self.body.get("metadata", {})),
                 "spec": dict(self.body.get("spec", {})),
                 "status": dict(self.body.get("status") or {})}
        now = datetime.now(UTC)
        try:
            spec = SweepSpec.model_validate(known_fields(SweepSpec, sweep["spec"]))
        except ValidationError as exc:
            return await self.invalid(sweep, exc, now)
        generation = sweep["metadata"].get("generation")
        clock = time.monotonic()
        if (self.index.tasks_changed or clock - self.tasks_at > TASKS_REFRESH
                or generation != self.generation):
            self.index.tasks_changed = False
            self.tasks = await asyncio.to_thread(kube.list_tasks, self.namespace)
            self.tasks_at, self.generation = clock, generation
        if clock - self.synced_at > RESYNC:
            await self.resync()
        created = parse_time(sweep["metadata"].get("creationTimestamp")) or now
        began = time.perf_counter()
        tasks = resolve_tasks(spec, self.tasks, (now - created).total_seconds(),
                              self.settings.task_wait_sec)
        slots = expand([t.name for t in tasks], spec)
        admitted = admit(spec, slots, tasks, list(self.index.trials.values()))
        self.computed = time.perf_counter() - began
        for slot, gen in admitted:
            body = trial_body(sweep, spec, slot, gen)
            made = await asyncio.to_thread(kube.create_trial, self.namespace, body)
            if made is None:  # the cache missed it: list again before creating more
                await self.resync()
                # Not ours: a deleted Sweep of the same name's, not collected yet (its
                # deletion wakes this Sweep): no create again before then, or a second.
                return 0.0 if body["metadata"]["name"] in self.index.trials else 1.0
            self.index.put(observe(made))
        began = time.perf_counter()
        status = sweep_status(sweep, spec, tasks, slots, list(self.index.trials.values()), now)
        wanted = status.model_dump(by_alias=True, mode="json")
        unrunnable = {t.name for t in tasks if t.state in ("invalid", "missing")}
        metrics.sweep_queued(self.namespace, self.name, 0 if spec.suspend else (
            status.counts.planned - status.counts.created
            - sum(1 for s in slots if s.task in unrunnable)))
        self.computed += time.perf_counter() - began
        wait = await self.write(sweep, wanted)
        await self.keep_warm(sweep, spec, slots, {t.name for t in tasks if t.state == "ready"})
        # a missing Task turns into errors when its wait is over: look again by then
        return min(wait, PENDING_RECHECK) if any(t.state == "pending" for t in tasks) else wait

    async def keep_warm(self, sweep: dict[str, Any], spec: SweepSpec, slots: list[Slot],
                        ready: set[str]) -> None:
        """The Sweep's WarmPools (`plan.warm.sweep_pools`): one per ready task with trials left
        to start, none once every trial started, the Sweep is suspended or finished (deleted
        with it: it owns them). Written only when they change."""
        if self.pools is None:
            found = await asyncio.to_thread(warm_kube.list_pools, self.namespace,
                                            sweep_selector(self.name))
            self.pools = {p["metadata"]["name"]: p.get("spec") for p in found
                          if _owned_by(p, self.body)}
        # Started: running, or holding its pod already (a claimed warm pod, a cold one): a
        # trial whose pod is starting must not count as one still to warm a pod for (its
        # pool would make one for it, then delete it unclaimed when the trial runs).
        started = {t.slot_key for t in self.index.trials.values()
                   if t.phase != "Pending" or wake.holds_pod(self.namespace, t.name)}
        unstarted: dict[str, list[Slot]] = {}
        for slot in slots:
            if slot.task in ready and slot.key not in started:
                unstarted.setdefault(slot.task, []).append(slot)
        wanted = sweep_pools(sweep, spec, slots, unstarted, self.settings.sweep_warm_pods,
                             self.settings.sweep_warm_ahead)
        for name, body in wanted.items():
            if self.pools.get(name) != body["spec"]:
                await asyncio.to_thread(warm_kube.apply_pool, body)
                self.pools[name] = body["spec"]
        for name in set(self.pools) - set(wanted):
            await asyncio.to_thread(warm_kube.delete_pool, self.namespace, name)
            del self.pools[name]

    async def write(self, sweep: dict[str, Any], wanted: dict[str, Any]) -> float:
        """Write the status (as API dicts) when `write_delay` says so; returns the longest
        wait before the next pass."""
        written = self.writer.written if self.writer.written is not None else sweep["status"]
        delay = write_delay(written, wanted, time.monotonic() - self.written_at,
                            self.settings.sweep_status_interval_sec)
        if delay is None:
            return IDLE_WAIT
        if delay > 0:
            return delay
        events = self.announce(sweep, wanted)
        await asyncio.to_thread(self.writer.write, wanted, events)  # Events, then status
        self.written_at = time.monotonic()
        return IDLE_WAIT

    def announce(self, sweep: dict[str, Any], wanted: dict[str, Any]) -> list[PendingEvent]:
        """The Events (written before the status they explain) of the conditions that
        changed (bad input, suspended, complete)."""
        before = (self.writer.written or sweep["status"]).get("conditions")
        events = []
        for c in changed(before, wanted.get("conditions") or []):
            if c["type"] == "TasksReady" and c["status"] == "True":
                continue
            warning = c["type"] == "Failed" or (c["type"] == "TasksReady"
                                                and c["reason"] != Reason.WAITING_FOR_TASKS)
            events.append(named(self.body, "Warning" if warning else "Normal", c["reason"],
                                c["message"], key=event_key(c)))
        return events

    async def invalid(self, sweep: dict[str, Any], exc: ValidationError, now: datetime
                      ) -> float:
        problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors()[:5])
        failed = carried(sweep["status"].get("conditions"), Condition(
            type="Failed", status="True", reason=Reason.INVALID_SPEC, message=problems,
            observed_generation=sweep["metadata"].get("generation")), iso(now))
        status = SweepStatus(observed_generation=failed.observed_generation,
                             conditions=[failed])
        await self.write(sweep, status.model_dump(by_alias=True, mode="json"))
        return IDLE_WAIT


async def _until(stopped: kopf.DaemonStopped) -> None:
    await stopped.wait()


def _owned_by(trial: dict[str, Any], sweep: kopf.Body) -> bool:
    uid = sweep.get("metadata", {}).get("uid")
    return any(o.get("uid") == uid for o in owner_references(trial, "Sweep"))
