"""Drives one trial: observe → `reconcile.trial_machine` decides → carry it out → patch status.

Runs as a kopf daemon per unfinished Trial, so a restarted operator resumes every trial from its
status and its pod. Blocking client calls run in threads; no connection is held for a phase.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import replace
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import kopf
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from shipyard.api.models import (
    CANCEL_ANNOTATION,
    TrialSpec,
    TrialStatus,
    cancel_requested,
)
from shipyard.handlers import image_builds
from shipyard.handlers.pod_watch import forget, waker
from shipyard.handlers.task_files import TaskUnavailable, load_task_by_name
from shipyard.kube import network as kube_network
from shipyard.kube import objects
from shipyard.kube.pod_exec import PodGone, exec_in_pod
from shipyard.plan.accelerators import SchedulingSettings
from shipyard.plan.images import ImagesFailed, ImagesReady
from shipyard.plan.network import NetworkSettingError, NetworkSettings, settings_from_env
from shipyard.plan.phases import ARTIFACTS_TAR, PhaseSpec, PlanError, TrialPlan, build_plan
from shipyard.reconcile import trial_machine as machine
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.reconcile.runner_output import (
    PhaseStatus,
    RunnerProtocolError,
    parse_runner_output,
)
from shipyard.render.network_policy import LABEL_NETWORK, build_network_objects
from shipyard.render.phase_bundle import build_phase_bundle
from shipyard.render.pod import (
    RUNNER_PATH,
    build_logs_configmap,
    build_runner_configmap,
    pod_name_for,
)
from shipyard.render.trial_pod import build_trial_pod
from shipyard.taskformat import LoadedTask

EXEC_ATTEMPTS = 3
NETWORK_SETTLE_ENV = "SHIPYARD_NETWORK_SETTLE_SEC"
TASK_WAIT_ENV = "SHIPYARD_TASK_WAIT_SEC"
NETWORK_SETTLE_SEC = 2.0
"""After a pod's network label changes, dataplanes take a moment to apply the new policy: no
phase starts before this has passed since the last change."""
TASK_ENV_ALLOW = "SHIPYARD_TASK_ENV_ALLOW"
_runner_configmaps: set[str] = set()


def now() -> datetime:
    return datetime.now(UTC)


class TrialDriver:
    def __init__(self, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.body = body
        self.logger = logger
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]
        self.generation = body["metadata"].get("generation")
        self.status = TrialStatus.model_validate(_known_status(body.get("status") or {}))
        self.waker = waker(self.namespace, self.name)
        self.plan: TrialPlan | None = None
        self.network: NetworkSettings | None = None
        self.network_ready = False
        self.pod_network: dict[str, tuple[str | None, float]] = {}  # pod → (key, changed at)

    # ------------------------------------------------------------ plumbing

    async def call(self, fn, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def save(self, status: TrialStatus, outcome: machine.Outcome | None = None) -> None:
        if outcome is not None:
            if outcome.logs:
                cm = build_logs_configmap(self.body, outcome.logs)
                await self.call(objects.merge_configmap_data, cm)
                status = status.model_copy(update={"logs_config_map": cm["metadata"]["name"]})
            for type_, reason, message in outcome.events:
                kopf.event(self.body, type=type_, reason=reason, message=message)
            for name in outcome.delete_pods:
                await self.call(objects.delete_pod, self.namespace, name)
        status = machine.with_current_phase(status)
        if status != self.status:
            patch = status.model_dump(by_alias=True, mode="json")
            await self.call(objects.patch_status, "trials", self.namespace, self.name, patch)
            self.status = status

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            if machine.is_finished(self.status):
                return
            plan = await self.prepare()
            if plan is None:
                await self.loop_without_plan()
                return
            self.plan = plan
            await self.loop(plan)
        finally:
            forget(self.namespace, self.name)

    async def prepare(self) -> TrialPlan | None:
        """Load the Task and plan the trial; a failure here is decided as TaskInvalid & co."""
        try:
            spec = TrialSpec.model_validate(self.body.get("spec") or {})
        except ValidationError as e:
            await self.fail_now("TrialInvalid", _validation_message(e))
            return None
        try:
            task = await self.load_task(spec.task_ref.name)
            if self.status.task_digest and self.status.task_digest != task.digest:
                raise TaskUnavailable("TaskInvalid", "the Task changed while this trial ran")
            try:
                self.network = await self.call(operator_network_settings)
                scheduling = SchedulingSettings.from_env(os.environ)
            except (NetworkSettingError, ValueError) as e:
                raise PlanError("TrialInvalid", f"operator settings: {e}") from e
            images = await self.wait_for_images(spec, task)
            plan = build_plan(task, spec, task_environ(), self.network, scheduling, images)
        except TaskUnavailable as e:
            await self.fail_now(e.reason, e.message)
            return None
        except PlanError as e:
            await self.fail_now(e.reason, e.message)
            return None
        if self.status.phase == "Pending":
            await self.save(machine.start(self.status, plan, task.digest, self.generation, now()))
            kopf.event(
                self.body,
                type="Normal",
                reason="Started",
                message=f"trial of task {spec.task_ref.name} with agent {spec.agent.name}",
            )
        return plan

    async def load_task(self, name: str) -> LoadedTask:
        """The Task, waiting a while for one that does not exist yet (polled every 2 s: a
        bounded number of requests) so that Trial and Task may be applied in any order."""
        created = machine.parse_iso((self.body.get("metadata") or {}).get("creationTimestamp"))
        wait = env_seconds(TASK_WAIT_ENV, machine.TASK_WAIT_SEC)
        deadline = machine.task_wait_deadline(created, now(), wait)
        while True:
            try:
                return await self.call(load_task_by_name, self.namespace, name)
            except TaskUnavailable as e:
                if e.reason != "TaskNotFound":
                    raise
                if now() >= deadline:
                    raise TaskUnavailable(e.reason, f"{e.message} (waited {wait:.0f}s for "
                                          "it to be created)") from e
                if self.cancelling():
                    raise TaskUnavailable("Cancelled", f"cancelled by the {CANCEL_ANNOTATION} "
                                          f"annotation while waiting: {e.message}") from e
                await self.save(*machine.waiting_for_task(self.status, e.message, deadline,
                                                          now()))
                await self.waker.wait(min(2.0, (deadline - now()).total_seconds()))

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
                    raise TaskUnavailable("Cancelled", f"cancelled by the {CANCEL_ANNOTATION} "
                                          f"annotation while {decision.message}")
                image_builds.wait_for(self.namespace, task_name, self.name)
                await self.save(*machine.waiting_for_image(self.status, decision.message,
                                                           now()))
                await self.waker.wait(30.0)
        finally:
            image_builds.stop_waiting(self.namespace, task_name, self.name)

    async def fail_now(self, reason: str, message: str) -> None:
        status, outcome = machine.fail(self.status, reason, message, now())
        if status.started_at is None:
            status.started_at = machine.iso(now())
        await self.save(status, outcome)

    async def loop_without_plan(self) -> None:
        """A trial that failed before it had a plan only needs its finish."""
        if machine.terminal_condition(self.status) is not None:
            await self.finish(keep=False)

    async def loop(self, plan: TrialPlan) -> None:
        spec = self.body.get("spec") or {}
        keep, retries = bool(spec.get("keepPods")), int(spec.get("retries") or 0)
        pods = await self.observe()
        while True:
            if self.cancelling():
                stopped = await self.stop_running_phase(plan)
                await self.save(*machine.cancel(self.status, now(), plan, stopped))
            action, decided, outcome = machine.next_action(self.status, plan, pods, now(), retries)
            if decided is not None:
                await self.save(decided, outcome)
            match action:
                case machine.Done():
                    return
                case machine.Finish():
                    await self.finish(keep)
                    return
                case machine.CreatePod(role=role, step=step):
                    await self.create_pod(plan, role, step)
                    pods = await self.observe()
                case machine.StopPod(role=role):
                    name = machine.pod_name(self.status, role)
                    if name and not keep:
                        await self.call(objects.delete_pod, self.namespace, name)
                    await self.save(machine.on_pod_stopped(self.status, role))
                case machine.Launch(phase=phase):
                    if not await self.switch_network(plan, plan.phase(phase)):
                        pods = await self.observe(force=True)
                        continue
                    result = await self.exec_runner(["launch", phase], plan, phase, retries)
                    if result is None:
                        pods = await self.observe(force=True)
                        continue
                    status, out = machine.on_launch(self.status, phase, result, now())
                    await self.save(status, out)
                    if not result.done:
                        await self.sleep(plan, pods)
                        pods = await self.observe()
                case machine.ReadResult(phase=phase):
                    result = await self.exec_runner(
                        ["result", phase, str(plan.log_limit_bytes)], plan, phase, retries)
                    if result is None:
                        pods = await self.observe(force=True)
                        continue
                    if not result.done:
                        await self.sleep(plan, pods)
                        pods = await self.observe()
                        continue
                    status, out = machine.on_result(self.status, plan, phase, result, now())
                    await self.save(status, out)
                    await self.restore_network(plan, plan.phase(phase))
                case machine.Wait(until=until):
                    await self.sleep(plan, pods, until)
                    pods = await self.observe()

    async def stop_running_phase(self, plan: TrialPlan) -> PhaseStatus | None:
        """Best effort, before a cancelled trial's pods go: end the running phase in its pod
        and read what it wrote so far (one exec; None when that fails)."""
        phase_id = machine.stoppable_phase(self.status)
        if phase_id is None:
            return None
        pod_name = machine.pod_name(self.status, plan.phase(phase_id).pod)
        if pod_name is None:
            return None
        argv = ["/bin/sh", RUNNER_PATH, "stop", phase_id, str(plan.log_limit_bytes)]
        try:
            res = await self.call(exec_in_pod, self.namespace, pod_name, argv, None)
            if res.exit_code != 0:  # e.g. a pod started by an older runner, without `stop`
                raise RunnerProtocolError(f"runner exited {res.exit_code}")
            return parse_runner_output(res.stdout.decode(errors="replace"))
        except (PodGone, ApiException, RunnerProtocolError, TimeoutError, OSError) as e:
            self.logger.warning(f"could not stop phase {phase_id} of a cancelled trial: {e}")
            return None

    def cancelling(self) -> bool:
        """The cancel annotation is set (kopf keeps a daemon's body current) and no outcome
        has been decided yet."""
        annotations = (self.body.get("metadata") or {}).get("annotations")
        return cancel_requested(annotations) and machine.terminal_condition(self.status) is None

    async def sleep(self, plan: TrialPlan, pods: machine.Pods,
                    until: datetime | None = None) -> None:
        deadline = machine.wake_deadline(self.status, plan, pods, now())
        if until is not None and (deadline is None or until < deadline):
            deadline = until  # e.g. a retry's backoff, which no pod event announces
        timeout = None if deadline is None else max(0.0, (deadline - now()).total_seconds())
        await self.waker.wait(timeout)

    async def observe(self, force: bool = False) -> machine.Pods:
        """The trial's pods: from the watch when it has told us, else one GET each."""
        found = []
        for name in (self.status.pod_name, self.status.verifier_pod_name):
            pod = None
            if name is not None:
                if name in self.waker.pods and not force:
                    pod = self.waker.pods[name]
                else:
                    pod = await self.call(objects.get_pod, self.namespace, name)
            found.append(observe_pod(pod))
        return machine.Pods(env=found[0], verifier=found[1])

    async def create_pod(self, plan: TrialPlan, role: str, step: str | None) -> None:
        if self.namespace not in _runner_configmaps:
            await self.call(objects.ensure_configmap, build_runner_configmap(self.namespace))
            _runner_configmaps.add(self.namespace)
        names = [s.name for s in plan.steps]
        index = names.index(step) + 1 if plan.multi_step and role == "verifier" else None
        name = pod_name_for(self.body, role, index, self.status.attempt)
        if not await self.ensure_network(plan):
            return
        manifest = build_trial_pod(self.body, plan, role, step, name)
        await self.call(objects.create_pod, manifest)
        self.pod_network[name] = (manifest["metadata"]["labels"].get(LABEL_NETWORK),
                                  asyncio.get_running_loop().time())
        await self.save(machine.on_pod_created(self.status, role, name, now()))
        what = "environment" if role == "env" else "verifier"
        kopf.event(
            self.body,
            type="Normal",
            reason="PodCreated",
            message=f"{what} pod {name} created with image "
            f"{manifest['spec']['containers'][0]['image']}",
        )

    # ------------------------------------------------------------ network policies

    async def ensure_network(self, plan: TrialPlan) -> bool:
        """The trial's NetworkPolicies (and FQDN policies) exist before any of its pods. When
        they cannot be created the trial fails (NetworkPolicyUnenforceable): never run open."""
        if self.network_ready or plan.network is None:
            return True
        objects_ = build_network_objects(self.body, list(plan.network.policies.values()),
                                         self.network or NetworkSettings())
        try:
            await self.call(kube_network.apply_network_objects, objects_)
        except ApiException as e:
            if e.status is not None and 500 <= e.status < 600:
                raise  # transient: the daemon is retried
            body = e.body.decode(errors="replace") if isinstance(e.body, bytes) else e.body
            status, outcome = machine.fail(
                self.status, "NetworkPolicyUnenforceable",
                f"could not create the trial's network policies ({e.status} {e.reason}): "
                f"{(body or '')[:300]}", now())
            await self.save(status, outcome)
            return False
        self.network_ready = True
        backend = (self.network or NetworkSettings()).fqdn_backend
        kopf.event(
            self.body, type="Normal", reason="NetworkPolicies",
            message=f"network policies: deny-all plus {', '.join(plan.network.policies)}"
            + (f" (FQDN backend {backend})" if backend != "none" else ""),
        )
        for notice in plan.network.notices:
            kopf.event(self.body, type="Warning", reason="NetworkNotice", message=notice)
        return True

    async def _pod_network_key(self, pod: str) -> tuple[str | None, float] | None:
        known = self.pod_network.get(pod)
        if known is None:
            body = await self.call(objects.get_pod, self.namespace, pod)
            if body is None:
                return None
            key = (body["metadata"].get("labels") or {}).get(LABEL_NETWORK)
            known = self.pod_network[pod] = (key, 0.0)  # set before we started: settled
        return known

    async def set_network(self, pod: str, key: str, reason: str) -> bool:
        """Put `pod` under policy `key`; False when the pod is gone."""
        known = await self._pod_network_key(pod)
        if known is None:
            return False
        if known[0] != key:
            if not await self.call(kube_network.label_pod, self.namespace, pod,
                                   {LABEL_NETWORK: key}):
                return False
            self.pod_network[pod] = (key, asyncio.get_running_loop().time())
            self.logger.info(f"pod {pod}: network policy {key} ({reason})")
        return True

    async def switch_network(self, plan: TrialPlan, phase: PhaseSpec) -> bool:
        """Before a phase: its policy on its pod, applied long enough to hold."""
        pod = machine.pod_name(self.status, phase.pod)
        if plan.network is None or phase.network is None or pod is None:
            return True
        if not plan.network.restricted:  # public throughout: nothing to switch or wait for
            return True
        if not await self.set_network(pod, phase.network, f"{phase.id} phase"):
            return False
        changed_at = self.pod_network[pod][1]
        wait = changed_at + network_settle_sec() - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        return True

    async def restore_network(self, plan: TrialPlan, phase: PhaseSpec) -> None:
        """After a phase: its pod back under the pod's baseline."""
        pod = machine.pod_name(self.status, phase.pod)
        if plan.network is None or not plan.network.restricted or pod is None:
            return
        baseline = plan.network.baseline(phase.pod, phase.step)
        await self.set_network(pod, baseline, "baseline")

    async def artifacts_for(self, phase: PhaseSpec) -> dict[str, bytes]:
        """The agent environment's artifacts, packed by the collect phase, for a separate
        verifier pod (read now, so a restarted operator simply reads them again)."""
        if phase.name != "verifier-environment" or not self.status.pod_name:
            return {}
        res = await self.call(
            exec_in_pod, self.namespace, self.status.pod_name, ["cat", ARTIFACTS_TAR]
        )
        if res.exit_code != 0:
            self.logger.warning(f"no artifacts from {self.status.pod_name}: {res.stderr[-300:]}")
            return {}
        return {"artifacts.tar": res.stdout}

    async def exec_runner(
        self, args: list[str], plan: TrialPlan, phase_id: str, retries: int
    ) -> PhaseStatus | None:
        """Run the in-pod runner; None when the pod could not be reached (re-observe it)."""
        phase = plan.phase(phase_id)
        pod_name = machine.pod_name(self.status, phase.pod)
        assert pod_name is not None
        stdin = None
        argv = ["/bin/sh", RUNNER_PATH, *args]
        try:
            if args[0] == "launch":
                extra = await self.artifacts_for(phase)
                if extra:
                    phase = replace(phase, payload={**phase.payload, **extra})
                stdin = build_phase_bundle(phase_id, phase)
                argv.append(str(len(stdin)))
        except PodGone:
            return None
        for attempt in range(EXEC_ATTEMPTS):
            try:
                res = await self.call(exec_in_pod, self.namespace, pod_name, argv, stdin)
                if res.exit_code != 0:
                    stderr = res.stderr.decode(errors="replace")[-500:]
                    raise RunnerProtocolError(f"runner exited {res.exit_code}: {stderr}")
                return parse_runner_output(res.stdout.decode(errors="replace"))
            except PodGone:
                return None
            except (ApiException, RunnerProtocolError, TimeoutError, OSError) as e:
                self.logger.warning(
                    f"exec {args[0]} {phase_id} failed (attempt {attempt + 1}): {e}"
                )
                await asyncio.sleep(1 + attempt * 2)
        pod = await self.call(objects.get_pod, self.namespace, pod_name)
        if pod is None or observe_pod(pod).lost:
            return None
        status, outcome = machine.infrastructure_failure(
            self.status,
            plan,
            retries,
            "PodLost",
            f"the pod {pod_name} stopped answering execs",
            now(),
        )
        await self.save(status, outcome)
        return None

    async def finish(self, keep: bool) -> None:
        if not keep:
            for name in (
                self.status.pod_name,
                self.status.verifier_pod_name,
                *[a.pod_name for a in self.status.attempts],
            ):
                if name:
                    await self.call(objects.delete_pod, self.namespace, name)
        status = machine.finished(self.status, now())
        cond = machine.terminal_condition(status)
        if cond is not None:  # before the patch: a finished trial's daemon is stopped at once
            kopf.event(
                self.body,
                type="Normal" if cond.type == "Complete" else "Warning",
                reason=status.phase,
                message=cond.message,
            )
        await self.save(status)


def task_environ() -> dict[str, str]:
    """What task `${VAR}` templates resolve against: the operator's environment, as Harbor uses
    its host's, but only the names the platform team allows (SHIPYARD_TASK_ENV_ALLOW: comma
    separated names or `PREFIX_*` patterns), so that a Task cannot copy the operator's own
    credentials into a pod."""
    patterns = [p.strip() for p in os.environ.get(TASK_ENV_ALLOW, "").split(",") if p.strip()]
    return {k: v for k, v in os.environ.items() if any(fnmatchcase(k, p) for p in patterns)}


def operator_network_settings() -> NetworkSettings:
    """The operator's network settings against what this cluster serves (cached lookups)."""
    return settings_from_env(
        os.environ, kube_network.discovered_fqdn_apis(), kube_network.node_ip_families()
    )


def env_seconds(name: str, default: float) -> float:
    """A duration setting from the operator's environment; the default when unset or bad."""
    try:
        return max(0.0, float(os.environ.get(name) or default))
    except ValueError:
        return default


def network_settle_sec() -> float:
    return env_seconds(NETWORK_SETTLE_ENV, NETWORK_SETTLE_SEC)


def _known_status(status: dict[str, Any]) -> dict[str, Any]:
    """Our status fields only (kopf keeps its own bookkeeping next to them)."""
    fields = set()
    for name, info in TrialStatus.model_fields.items():
        fields.add(info.alias or name)
    return {k: v for k, v in status.items() if k in fields}


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"spec.{loc}: {err['msg']}")
    return "; ".join(parts)
