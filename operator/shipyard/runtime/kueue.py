"""Kueue admission: the gate a trial's driver passes before it creates a pod, and the latest
Workloads the watch told (`handlers.admission`), kept while their trial's driver runs.
Decisions in `reconcile.admission`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shipyard.api.conventions import (
    LABEL_QUEUE_NAME,
    trial_selector,
    workload_name,
)
from shipyard.api.reasons import Reason
from shipyard.kube import objects
from shipyard.kube import workloads as kube_workloads
from shipyard.plan.phases import PlanError, TrialPlan
from shipyard.reconcile import admission
from shipyard.render.pod import probe_image_for
from shipyard.render.workload import admit_pod, build_workload
from shipyard.runtime import wake
from shipyard.runtime.runner_files import runner_of

if TYPE_CHECKING:
    from shipyard.runtime.trial_driver import TrialDriver

_workloads: dict[tuple[str, str], dict[str, Any] | None] = {}
"""The latest body of each watched Workload, by (namespace, name); None: deleted."""


def workload_seen(namespace: str, name: str, body: dict[str, Any] | None, owner: str | None
                  ) -> None:
    """A Workload event (None: deleted): kept while its trial's driver runs (it sees it gone),
    and the driver woken."""
    if body is not None:
        _workloads[(namespace, name)] = body
    elif owner is not None and wake.waiting(wake.TRIAL, namespace, owner):
        _workloads[(namespace, name)] = None  # its driver sees it gone
    else:
        _workloads.pop((namespace, name), None)
    if owner is not None:
        wake.wake(wake.TRIAL, namespace, owner)


class KueueGate:
    """One trial's admission: its Workload per attempt, the wait for Kueue, the admitted
    scheduling merged into its pods, eviction, and the release at its end."""

    def __init__(self, driver: TrialDriver, choice: admission.QueueChoice) -> None:
        self.driver = driver
        self.choice = choice
        self.scheduling: tuple[dict[str, str], list[dict], tuple[dict, ...]] | None = None
        self.admitted_name: str | None = None

    @property
    def name(self) -> str:
        d = self.driver
        return workload_name(d.name, d.body["metadata"].get("uid") or "", d.status.attempt)

    def _cached(self) -> tuple[bool, dict[str, Any] | None]:
        key = (self.driver.namespace, self.name)
        return key in _workloads, _workloads.get(key)

    async def _read(self, force: bool = False) -> dict[str, Any] | None:
        seen, body = self._cached()
        if seen and not force:
            return body
        return await self.driver.call(kube_workloads.get_workload, self.driver.namespace,
                                      self.name)

    async def admit(self, plan: TrialPlan) -> bool:
        """Until this attempt's Workload is admitted (True), or the trial is cancelled or
        evicted meanwhile (False: the driver decides again)."""
        d = self.driver
        if self.admitted_name == self.name and self.scheduling is not None:
            return True
        await self._clean_earlier_attempts()
        force = True
        while True:
            workload = await self._read(force)
            force = False
            state = admission.workload_state(workload)
            if isinstance(state, admission.Missing):
                priority = None
                if self.choice.priority_class:
                    value = await d.call(kube_workloads.get_priority_class_value,
                                         self.choice.priority_class)
                    if value is None:
                        await d.fail_now(Reason.TRIAL_INVALID,
                                         admission.unknown_priority(self.choice))
                        return False
                    priority = (self.choice.priority_class, value)
                body = build_workload(d.body, plan, self.name, self.choice.queue, priority,
                                      probe_image_for(plan, d.settings.probe_image),
                                      runner_of(d.settings))
                workload = await d.call(kube_workloads.create_workload, body)
                _workloads[(d.namespace, self.name)] = workload
                state = admission.workload_state(workload)
            if isinstance(state, admission.Deleting):  # wait for it to be gone, then again
                if d.cancelling():
                    return False
                if not await d.waker.wait(admission.QUEUE_POLL_SEC):
                    force = True
                continue
            if isinstance(state, admission.Evicted):  # before it ever ran: queue again
                await self.preempt(plan, state)
                force = True
                continue
            if isinstance(state, admission.Admitted):
                flavors = []
                for flavor in sorted(set(state.flavors.values())):
                    found = await d.call(kube_workloads.get_resource_flavor, flavor)
                    if found is not None:
                        flavors.append(found)
                labels, tolerations = admission.flavor_scheduling(flavors)
                self.scheduling = (labels, tolerations, state.updates)
                self.admitted_name = self.name
                await d.save(*admission.admitted(d.status, self.choice, self.name, state,
                                                 _now()))
                await d.flush()  # on record before any pod: a restart knows it was admitted
                return True
            assert isinstance(state, admission.Queued)
            await d.save(*admission.queued(d.status, self.choice, self.name, state, _now()))
            await d.flush()
            if d.cancelling():
                return False
            if not await d.waker.wait(admission.QUEUE_POLL_SEC):
                force = True  # no event: look at the Workload itself

    def pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The pod with the admission's scheduling merged in."""
        assert self.scheduling is not None
        return admit_pod(manifest, *self.scheduling[:2], list(self.scheduling[2]))

    def evicted(self) -> admission.Evicted | None:
        """The current attempt's Workload, as last watched, was evicted (or, once admitted or
        with pods, deleted by someone else). Read from the Workload, not from what this driver
        saw: a driver started again after a crash knows it too."""
        seen, body = self._cached()
        status = self.driver.status
        return admission.eviction(body, seen, self.admitted_name == self.name
                                  or bool(status.pod_name or status.verifier_pod_name),
                                  self.name)

    async def preempt(self, plan: TrialPlan, state: admission.Evicted) -> None:
        """Record the attempt (status first), stop its pods, release its Workload."""
        d = self.driver
        old = self.name
        await d.save(*admission.preempted(d.status, plan, state, _now()))
        await d.flush()
        await d.call(kube_workloads.delete_workload, d.namespace, old)
        self.scheduling = self.admitted_name = None

    async def _clean_earlier_attempts(self) -> None:
        """Workloads (and the environment pod) of attempts before this one that an operator
        stopped mid-preemption left behind: they would hold quota."""
        d = self.driver
        if d.status.attempt <= 1:
            return
        for workload in await d.call(kube_workloads.list_workloads, d.namespace,
                                     trial_selector(d.name)):
            name = workload["metadata"]["name"]
            if name != self.name:
                await d.call(kube_workloads.delete_workload, d.namespace, name)
        for record in d.status.attempts:
            if record.pod_name:
                await d.call(objects.delete_pod, d.namespace, record.pod_name)

    async def release(self) -> None:
        """The trial ended: every Workload of it goes (quota is freed at once)."""
        d = self.driver
        for workload in await d.call(kube_workloads.list_workloads, d.namespace,
                                     trial_selector(d.name)):
            await d.call(kube_workloads.delete_workload, d.namespace,
                         workload["metadata"]["name"])
            _workloads.pop((d.namespace, workload["metadata"]["name"]), None)


async def gate_for(driver: TrialDriver) -> KueueGate | None:
    """The trial's gate when Kueue admits it (its label, or the operator's default queue);
    PlanError when it is labelled for Kueue and Kueue is not installed."""
    labels = driver.body.get("metadata", {}).get("labels") or {}
    default = driver.settings.kueue_default_queue
    if not labels.get(LABEL_QUEUE_NAME) and not default:
        return None
    served = await asyncio.to_thread(kube_workloads.served)
    choice = admission.queue_of(labels, default, served)
    if choice is None:
        return None
    if not served:
        raise PlanError(Reason.TRIAL_INVALID, admission.not_served(choice))
    return KueueGate(driver, choice)


def _now() -> datetime:
    return datetime.now(UTC)
