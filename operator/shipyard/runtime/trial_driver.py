"""Drives one trial: the loop asks `reconcile.trial_loop.decide` for the next action, has the
executor (`runtime.trial_executor`) carry it out, and folds what came back into its state with
`trial_loop.absorb`. It decides nothing itself.

Runs as an asyncio task per unfinished Trial (`runtime.trial_tasks`, started from the Trial
watch and started again with a backoff when it raises), so a restarted operator resumes every
trial from its status and its pods. Before the loop it loads the Task, waits for its images and
plans the trial (`prepare`); a failure there is decided as TaskInvalid & co.

The interface: `TrialDriver(body, logger, settings).run()` and `.give_up(message)`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from datetime import UTC, datetime

import kopf
from pydantic import ValidationError

from shipyard.api.compat import known_fields
from shipyard.api.conventions import CANCEL_ANNOTATION, cancel_requested, parse_time
from shipyard.api.models import TrialSpec, TrialStatus
from shipyard.api.reasons import Reason
from shipyard.kube import nodes as kube_nodes
from shipyard.plan.capacity import node_capacities
from shipyard.plan.images import ImagesFailed, ImagesReady
from shipyard.plan.phases import (
    PlanError,
    TrialPlan,
    build_plan,
    check_runnable,
    start_images,
)
from shipyard.plan.settings import OperatorSettings
from shipyard.reconcile import trial_loop as loop
from shipyard.reconcile import trial_machine as machine
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.render.pod import logs_configmap_name, runner_configmap_name
from shipyard.runtime import image_configs, kueue, wake
from shipyard.runtime import images as image_builds
from shipyard.runtime.config import cluster_network_settings
from shipyard.runtime.runner_files import go_runner_name
from shipyard.runtime.task_files import TaskUnavailable, load_task_by_name
from shipyard.runtime.trial_executor import KubeTrialExecutor
from shipyard.taskformat import LoadedTask


def now() -> datetime:
    return datetime.now(UTC)


class TrialDriver:
    def __init__(self, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter,
                 settings: OperatorSettings, executor=None) -> None:
        self.body = body
        self.settings = settings
        self.logger = logger
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]
        self.generation = body["metadata"].get("generation")
        status = known_fields(TrialStatus, body.get("status") or {})  # not kopf's fields
        status = TrialStatus.model_validate(status)
        spec = body.get("spec") or {}
        self.state = loop.LoopState(
            plan=None, status=status, saved=status, trial=self.name,
            uid=body["metadata"].get("uid") or "", namespace=self.namespace,
            logs_config_map=logs_configmap_name(body),
            task_name=(spec.get("taskRef") or {}).get("name", ""),
            agent_name=(spec.get("agent") or {}).get("name", ""),
            retries=int(spec.get("retries") or 0), keep=bool(spec.get("keepPods")),
            settle_sec=settings.network_settle_sec, current_runner=runner_configmap_name(),
            current_go_runner=go_runner_name(settings))
        self.waker = wake.waiter(wake.TRIAL, self.namespace, self.name)
        self.executor = executor or KubeTrialExecutor(body, settings, self.waker, logger)
        self.executor.drop_wait = self.drop_wait
        self.kueue: kueue.KueueGate | None = None  # admitted by Kueue (docs/kueue.md)

    @property
    def status(self) -> TrialStatus:
        return self.state.status

    async def call(self, fn, *args, **kwargs):
        return await self.executor.call(fn, *args, **kwargs)

    # ------------------------------------------------------------ applying

    async def step(self, action: loop.Action) -> None:
        """Carry out one action and absorb what it observed."""
        ex = self.executor
        ex.status, ex.plan, ex.gate = self.state.status, self.state.plan, self.kueue
        ex.pod_runners = dict(self.state.pod_runners)
        seen = await ex.apply(action)
        self.state = self.log(loop.absorb(self.state, seen, now()))

    def log(self, state: loop.LoopState) -> loop.LoopState:
        for level, line in state.notes:
            getattr(self.logger, level)(line)
        return replace(state, notes=()) if state.notes else state

    async def save(self, status: TrialStatus, outcome: machine.Outcome | None = None) -> None:
        """Take a new status (and its outcome's Events, logs, pods to stop) now; the status is
        written with the next `flush` (writes are coalesced, `trial_loop.take`)."""
        queued = len(self.state.todo)
        self.state = self.log(loop.take(self.state, status, outcome))
        for _ in range(len(self.state.todo) - queued):  # what it queued (pods to delete)
            action, self.state = loop.decide(self.state, now())
            await self.step(action)

    async def flush(self) -> None:
        await self.step(loop.flush_action(self.state))

    def cancelling(self) -> bool:
        """The cancel annotation is set (the Trial watch keeps the driver's body current) and no
        outcome has been decided yet."""
        annotations = (self.body.get("metadata") or {}).get("annotations")
        return loop.cancelling(replace(self.state,
                                       cancel_requested=cancel_requested(annotations)))

    def seen(self) -> loop.TrialSeen:
        annotations = (self.body.get("metadata") or {}).get("annotations")
        evicted = self.kueue.evicted() if self.kueue is not None else None
        return loop.TrialSeen(cancel_requested(annotations), evicted)

    def drop_wait(self, pod_name: str) -> bool:
        """A waiting exec is dropped when the trial is cancelled, evicted or its pod goes."""
        pod = self.waker.pods.get(pod_name, {})
        seen = observe_pod(pod) if pod is not None else None
        evicted = self.kueue is not None and self.kueue.evicted() is not None
        return self.cancelling() or seen is None or seen.lost or seen.deleting or evicted

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            if machine.is_finished(self.status):
                # Run again after its finish failed (e.g. a pod's delete): the pods go now.
                if not self.state.keep:
                    await self.step(loop.RemovePods(loop.pod_names(self.status)))
                await self.release_workloads()
                return
            plan = await self.prepare()
            if plan is None:
                if machine.terminal_condition(self.status) is not None:
                    await self.finish(keep=False)  # failed before it had a plan
                return
            await self.loop(plan)
        finally:
            wake.forget(wake.TRIAL, self.namespace, self.name)

    async def loop(self, plan: TrialPlan) -> None:
        self.state = replace(self.state, plan=plan, admission=self.kueue is not None)
        await self.step(loop.Observe())
        await self.drive()

    async def drive(self) -> None:
        """Decide, apply, absorb, until the loop says Done."""
        while True:
            self.state = loop.absorb(self.state, self.seen(), now())
            action, self.state = loop.decide(self.state, now())
            self.state = self.log(self.state)
            if isinstance(action, machine.Done):
                return
            if isinstance(action, loop.ReleaseWorkloads):
                await self.release_workloads()
            else:
                await self.step(action)

    async def finish(self, keep: bool) -> None:
        """The outcome and the end in one write, then the pods go (`trial_loop.finishing`)."""
        self.state = loop.finishing(replace(self.state, keep=keep))
        await self.drive()

    async def release_workloads(self) -> None:
        """A trial admitted by Kueue: its Workloads go at its end, however it ended (also when
        it ended before its driver planned it, e.g. given up), so its quota is free at once."""
        if self.kueue is None:
            with contextlib.suppress(PlanError):  # labelled, and Kueue is not there (any more)
                self.kueue = await kueue.gate_for(self)
        await self.step(loop.ReleaseWorkloads())

    async def give_up(self, message: str) -> None:
        """End the trial (its driver failed the same way again and again): Failed with the
        reason of the phase it was in, its pods removed. Nothing pending is written (the logs
        that could not be may be why)."""
        if not (machine.is_finished(self.status) or machine.terminal_condition(self.status)):
            await self.save(*machine.given_up(self.status, message, now()))
        await self.finish(self.state.keep)

    async def fail_now(self, reason: Reason, message: str) -> None:
        await self.save(*loop.failed_early(self.status, reason, message, now()))

    # ------------------------------------------------------------ before the loop

    async def prepare(self) -> TrialPlan | None:
        """Load the Task and plan the trial; a failure here is decided as TaskInvalid & co."""
        try:
            spec = TrialSpec.model_validate(known_fields(TrialSpec, self.body.get("spec") or {}))
        except ValidationError as e:
            await self.fail_now(Reason.TRIAL_INVALID, _validation_message(e))
            return None
        try:
            task = await self.load_task(spec.task_ref.name)
            refused = loop.refuse_task(self.status, task.digest, self.settings.error)
            if refused is not None:
                raise PlanError(*refused)
            network = await self.call(cluster_network_settings, self.settings.network)
            self.executor.network = network
            check_runnable(task, spec, self.settings.scheduling)  # before building its images
            images = await self.wait_for_images(spec, task)
            nodes = node_capacities(await self.call(kube_nodes.allocatable))
            entrypoints = await self.call(image_configs.entrypoints,
                                          start_images(task, spec, images, network))
            plan = build_plan(task, spec, self.settings.task_env, network,
                              self.settings.scheduling, self.settings.agent_bundle_repository,
                              images, nodes, entrypoints)
            self.kueue = await kueue.gate_for(self)
        except (TaskUnavailable, PlanError) as e:
            await self.fail_now(e.reason, e.message)
            return None
        if self.status.phase == "Pending":
            await self.save(machine.start(self.status, plan, task.digest, self.generation, now()))
        return plan

    async def load_task(self, name: str) -> LoadedTask:
        """The Task, waiting a while for one that does not exist yet (`task_missing`)."""
        created = parse_time((self.body.get("metadata") or {}).get("creationTimestamp"))
        while True:
            try:
                return await self.call(load_task_by_name, self.namespace, name)
            except TaskUnavailable as e:
                if e.reason != Reason.TASK_NOT_FOUND:
                    raise
                decided = machine.task_missing(self.status, e.message, created, now(),
                                               self.settings.task_wait_sec, self.cancelling())
                if not isinstance(decided, machine.WaitForTask):
                    raise TaskUnavailable(*decided) from e
                await self.save(decided.status, decided.outcome)
                await self.flush()
                await self.waker.wait(decided.poll_sec)

    async def wait_for_images(self, spec: TrialSpec, task: LoadedTask) -> dict[str, str]:
        """The Task's images by role, once built (one build serves all its trials: they
        wait, woken when a build changes); TaskUnavailable when they cannot be had
        (ImageBuildFailed is never retried)."""
        task_name = spec.task_ref.name
        override = spec.environment.image is not None
        try:
            while True:
                decision = await self.call(image_builds.trial_decision, self.namespace,
                                           task_name, task, override)
                if isinstance(decision, ImagesReady):
                    return decision.refs
                if isinstance(decision, ImagesFailed):
                    raise TaskUnavailable(decision.reason, decision.message)
                if self.cancelling():
                    raise TaskUnavailable(Reason.CANCELLED, f"cancelled by the {CANCEL_ANNOTATION} "
                                          f"annotation while {decision.message}")
                image_builds.wait_for(self.namespace, task_name, self.name)
                await self.save(*machine.waiting_for_image(self.status, decision.message,
                                                           now()))
                await self.flush()
                await self.waker.wait(30.0)
        finally:
            image_builds.stop_waiting(self.namespace, task_name, self.name)


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"spec.{loc}: {err['msg']}")
    return "; ".join(parts)
