"""Drives one trial: observe → `reconcile.trial_machine` decides → carry it out → patch status.

Runs as an asyncio task per unfinished Trial (`handlers.trial_tasks`, started from the Trial
watch and started again with a backoff when it raises), so a restarted operator resumes every
trial from its status and its pod. Blocking client calls run in threads; no connection is held
for a phase.

The interface: `TrialDriver(body, logger, settings).run()`. Every decision is the machine's
(`next_action`, `on_*`, `reconcile.exec_policy` for execs, `task_missing` for a Task not there
yet); this class only observes (`observe`), carries out one action each (`create_pod`,
`set_network`, `launch`, `read_result`, `finish`, …) and saves (`save`), and each cluster call
goes through `call`, so its cost is visible in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import kopf
from pydantic import ValidationError

from shipyard.api.compat import known_fields
from shipyard.api.conventions import (
    CANCEL_ANNOTATION,
    LABEL_NETWORK,
    Role,
    artifacts_configmap_name,
    cancel_requested,
    event_name,
    iso,
    launch_key,
    parse_time,
)
from shipyard.api.models import TrialSpec, TrialStatus
from shipyard.api.reasons import Reason
from shipyard.handlers import admission as kueue
from shipyard.handlers import image_builds
from shipyard.handlers.executor import execs
from shipyard.handlers.pod_watch import forget, waker
from shipyard.handlers.task_files import TaskUnavailable, load_task_by_name
from shipyard.kube import artifacts as kube_artifacts
from shipyard.kube import events as kube_events
from shipyard.kube import network as kube_network
from shipyard.kube import nodes as kube_nodes
from shipyard.kube import objects
from shipyard.kube import runner as kube_runner
from shipyard.kube.errors import ApiException, error_body, is_server_error
from shipyard.kube.pod_exec import EXEC_TIMEOUT_SEC
from shipyard.plan.capacity import node_capacities
from shipyard.plan.compose import service_log_key
from shipyard.plan.images import ImagesFailed, ImagesReady
from shipyard.plan.network import NetworkConfig, NetworkSettings
from shipyard.plan.phases import (
    ARTIFACTS_TAR,
    PhaseSpec,
    PlanError,
    TrialPlan,
    VerifierEnvironmentScript,
    build_plan,
    check_runnable,
)
from shipyard.plan.settings import OperatorSettings
from shipyard.reconcile import exec_policy
from shipyard.reconcile import trial_machine as machine
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.reconcile.runner_output import PhaseStatus
from shipyard.render.artifact_bundle import (
    ARTIFACTS_LIMIT_BYTES,
    TAR_OVERHEAD_BYTES,
    ArtifactsRefused,
    CleanArtifacts,
    clean_artifacts,
)
from shipyard.render.artifacts_store import artifacts_configmaps, part_bytes, parts_of
from shipyard.render.compose import (
    concat_tars,
    merge_sidecar_tars,
    sidecar_artifact_argv,
    sidecar_hook_argv,
)
from shipyard.render.network_policy import build_namespace_baseline, build_network_objects
from shipyard.render.phase_bundle import build_chain_bundle, build_phase_bundle
from shipyard.render.pod import (
    build_logs_configmap,
    build_runner_configmap,
    build_trial_pod,
    logs_configmap_name,
    pod_name_for,
    probe_image_for,
    runner_configmap_name,
    truncate_log,
)
from shipyard.taskformat import LoadedTask

KEEP_ARTIFACTS_TRIES = 6
"""Reads of the environment pod's artifacts (before it stops) whose exec did not run, after
which the verifier gets none (said in an Event) rather than the trial waiting forever."""


def now() -> datetime:
    return datetime.now(UTC)


class TrialDriver:
    def __init__(self, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter,
                 settings: OperatorSettings) -> None:
        self.body = body
        self.settings = settings
        self.logger = logger
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]
        self.generation = body["metadata"].get("generation")
        status = known_fields(TrialStatus, body.get("status") or {})  # not kopf's fields
        self.status = TrialStatus.model_validate(status)
        self.saved = self.status  # what the Trial's status says (self.status may be ahead)
        self.pending_logs: dict[str, str] = {}
        self.pending_events: list[tuple[str, str, str, str]] = []  # name, type, reason, message
        self.unsaved_since: float | None = None  # since when a pod start holds back a write
        self.unsaved_exec_sec = 0.0  # time spent in execs since the last write
        self.unsaved_execs = 0  # and how many
        self.waker = waker(self.namespace, self.name)
        self.plan: TrialPlan | None = None
        self.network: NetworkSettings | None = None
        self.network_ready = False
        # What this driver set on its pods: pod → (network key, settled at); it wins over a
        # watched pod body that may not show the change yet.
        self.pod_network: dict[str, tuple[str | None, datetime | None]] = {}
        self.pod_runners: dict[str, str] = {}  # pod → the runner ConfigMap it mounts
        # Pods into which a launch of task code was sent (its answer may never come: the
        # container may end during it): their container's end is that code's failure.
        self.task_code_sent: set[str] = set()
        self.keep_tries = 0  # failed reads of the artifacts before the environment pod stops
        self.kueue: kueue.KueueGate | None = None  # admitted by Kueue (docs/kueue.md)

    # ------------------------------------------------------------ plumbing

    async def call(self, fn, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def exec_call(self, fn, *args):
        """An exec into a trial pod, in the pool of execs (`executor.execs`)."""
        return await asyncio.get_running_loop().run_in_executor(execs,
                                                                functools.partial(fn, *args))

    async def save(self, status: TrialStatus, outcome: machine.Outcome | None = None) -> None:
        """Take the new status (and its Events) now; write them with `flush`.

        Writes are coalesced: the status and the logs ConfigMap are written before the driver
        waits and before anything that cannot be redone (deleting a pod, finishing), not after
        every transition. Whatever happens between two writes can be redone after a restart
        (pods are created by name, a launch never runs a phase twice and returns its result
        again), so a trial whose phases end within their launch costs a handful of writes.
        Events are posted with the write, before the status, under names fixed by what they
        record (`api.conventions.event_name`): an operator killed in between takes the
        transition again and finds its Events there, so each is posted once.
        """
        if outcome is not None:
            if outcome.logs:
                self.pending_logs.update(outcome.logs)
                status = status.model_copy(
                    update={"logs_config_map": logs_configmap_name(self.body)})
            for type_, reason, message in outcome.events:
                self.event(type_, reason, message)
                if type_ != "Normal":  # the operator's log tells what went wrong, too
                    self.logger.warning(f"trial {self.namespace}/{self.name}: {reason}: "
                                        f"{message}")
            if outcome.delete_pods:
                self.status = machine.with_current_phase(status)
                await self.flush()  # what ran in them is on record first
            for name in outcome.delete_pods:
                await self.call(objects.delete_pod, self.namespace, name)
            for role, key in outcome.network:
                pod = machine.pod_name(status, role)
                if pod is not None:
                    await self.set_network(pod, key, "baseline")
        self.status = machine.with_current_phase(status)

    def event(self, type_: str, reason: str, message: str) -> None:
        """An Event of the transition being taken, posted with the next `flush`."""
        rec = machine.current_record(self.status)
        key = f"{self.status.attempt}/{rec and (rec.id or rec.name)}/{type_}/{reason}/{message}"
        name = event_name(self.name, self.body["metadata"].get("uid") or "", key)
        self.pending_events.append((name, type_, reason, message))

    async def flush(self) -> None:
        """Write the logs ConfigMap (when new logs came), the Events taken since the last
        write, and the status (when it changed)."""
        if self.pending_logs:
            cm = build_logs_configmap(self.body, self.pending_logs)
            await self.call(objects.merge_configmap_data, cm,
                            self.saved.logs_config_map == cm["metadata"]["name"])
            self.pending_logs = {}
        events, status = self.pending_events, self.status
        if events or status != self.saved:
            patch = status.model_dump(by_alias=True, mode="json") if status != self.saved else None
            await self.call(self.write, events, patch)  # one thread for both
            self.pending_events, self.saved = [], status
        self.unsaved_since = None
        self.unsaved_exec_sec = 0.0
        self.unsaved_execs = 0

    def write(self, events: list[tuple[str, str, str, str]], patch: dict | None) -> None:
        """(In a thread) the Events, then the status patch."""
        if events:
            kube_events.post_events(dict(self.body), events)
        if patch is not None:
            objects.patch_status("trials", self.namespace, self.name, patch)

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            if machine.is_finished(self.status):
                # Run again after its finish failed (e.g. a pod's delete): the pods go now.
                if not (self.body.get("spec") or {}).get("keepPods"):
                    await self.remove_pods()
                await self.release_workloads()
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
            spec = TrialSpec.model_validate(known_fields(TrialSpec, self.body.get("spec") or {}))
        except ValidationError as e:
            await self.fail_now(Reason.TRIAL_INVALID, _validation_message(e))
            return None
        try:
            task = await self.load_task(spec.task_ref.name)
            if self.status.task_digest and self.status.task_digest != task.digest:
                raise TaskUnavailable(Reason.TASK_INVALID, "the Task changed while this trial ran")
            if self.settings.error:
                raise PlanError(Reason.TRIAL_INVALID, f"operator settings: {self.settings.error}")
            self.network = await self.call(cluster_network_settings, self.settings.network)
            check_runnable(task, spec, self.settings.scheduling)  # before building its images
            images = await self.wait_for_images(spec, task)
            nodes = node_capacities(await self.call(kube_nodes.allocatable))
            plan = build_plan(task, spec, self.settings.task_env, self.network,
                              self.settings.scheduling, self.settings.agent_bundle_repository,
                              images, nodes)
            self.kueue = await kueue.gate_for(self)
        except TaskUnavailable as e:
            await self.fail_now(e.reason, e.message)
            return None
        except PlanError as e:
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

    async def fail_now(self, reason: Reason, message: str) -> None:
        status, outcome = machine.fail(self.status, reason, message, now())
        if status.started_at is None:
            status.started_at = iso(now())
        await self.save(status, outcome)

    async def give_up(self, message: str) -> None:
        """End the trial (its driver failed the same way again and again): Failed with the
        reason of the phase it was in, its pods removed. Nothing pending is written (the logs
        that could not be may be why)."""
        if machine.is_finished(self.status) or machine.terminal_condition(self.status):
            await self.finish(bool((self.body.get("spec") or {}).get("keepPods")))
            return
        await self.save(*machine.given_up(self.status, message, now()))
        await self.finish(bool((self.body.get("spec") or {}).get("keepPods")))

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
            evicted = self.kueue.evicted() if self.kueue is not None else None
            if evicted is not None and machine.terminal_condition(self.status) is None:
                await self.kueue.preempt(plan, evicted)  # type: ignore[union-attr]
                pods = await self.observe(force=True)
                continue
            action, decided, outcome = machine.next_action(self.status, plan, pods, now(), retries,
                                                           frozenset(self.task_code_sent))
            if decided is not None:
                await self.save(decided, outcome)
            match action:
                case machine.Done():
                    return
                case machine.Finish():
                    await self.finish(keep)
                    return
                case machine.CreatePod(role=role, step=step):
                    if self.kueue is not None and not await self.kueue.admit(plan):
                        pods = await self.observe()
                        continue  # cancelled or evicted while queued: decide again
                    await self.create_pod(plan, role, step)
                    pods = await self.observe()
                case machine.SetNetwork(role=role, key=key, why=why):
                    name = machine.pod_name(self.status, role)
                    if name is None or not await self.set_network(name, key, why):
                        pods = await self.observe(force=True)
                        continue
                    pods = await self.observe()
                case machine.StopPod(role=role, keep_artifacts=keep_artifacts):
                    name = machine.pod_name(self.status, role)
                    if name and keep_artifacts and not await self.keep_artifacts(name):
                        pods = await self.observe(force=True)
                        continue
                    if name and not keep:
                        if role == Role.ENV:
                            await self.keep_service_logs()
                        await self.flush()  # what ran in it is on record first
                        await self.call(objects.delete_pod, self.namespace, name)
                    await self.save(machine.on_pod_stopped(self.status, role))
                case machine.Launch(phase=phase):
                    launched = await self.exec_runner("launch", plan, phase, retries)
                    if launched is None:
                        pods = await self.observe(force=True)
                        continue
                    for phase_id, result in launched:
                        status, out = machine.on_launch(self.status, phase_id, result, now())
                        await self.save(status, out)
                        if result.collected:  # it ended within the launch: its result too
                            await self.save(*machine.on_result(self.status, plan, phase_id,
                                                               result, now()))
                    if not launched[-1][1].done:
                        # A probed pod's readiness tells when it ends; else the next action is
                        # a waiting `result` (`trial_machine.RESULT_WAIT_SEC`), at once.
                        if pods.of(plan.phase(launched[-1][0]).pod).probed:
                            await self.sleep(plan, pods)
                        pods = await self.observe()
                case machine.ReadResult(phase=phase, wait_sec=wait):
                    if wait:
                        await self.flush()  # the driver waits: what it knows is on record
                    started = time.monotonic()
                    read = await self.exec_runner("result", plan, phase, retries, wait)
                    if read is None:
                        pods = await self.observe(force=True)
                        continue
                    result = read[0][1]
                    if not result.done:
                        # Waited for (a phase longer than the wait: ask again), else until the
                        # readiness probe or a deadline says more.
                        if time.monotonic() - started < wait / 2 or not wait:
                            await self.sleep(plan, pods)
                        pods = await self.observe()
                        continue
                    status, out = machine.on_result(self.status, plan, phase, result, now())
                    await self.save(status, out)
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
        reply = await self.exec_call(kube_runner.stop, self.namespace, pod_name, phase_id,
                                     plan.log_limit_bytes)
        stopped, why = exec_policy.stopped_status(reply.state, reply.text, reply.error)
        if stopped is None:  # e.g. a pod started by an older runner, without `stop`
            self.logger.warning(f"could not stop phase {phase_id} of a cancelled trial: {why}")
        return stopped

    def cancelling(self) -> bool:
        """The cancel annotation is set (the Trial watch keeps the driver's body current) and no
        outcome has been decided yet."""
        annotations = (self.body.get("metadata") or {}).get("annotations")
        return cancel_requested(annotations) and machine.terminal_condition(self.status) is None

    async def sleep(self, plan: TrialPlan, pods: machine.Pods,
                    until: datetime | None = None) -> None:
        deadline = machine.wake_deadline(self.status, plan, pods, now())
        if until is not None and (deadline is None or until < deadline):
            deadline = until  # e.g. a retry's backoff, which no pod event announces
        timeout = None if deadline is None else max(0.0, (deadline - now()).total_seconds())
        if machine.starting_pod(self.status) and (self.status != self.saved or self.pending_logs
                                                  or self.pending_events):
            if self.unsaved_since is None:
                self.unsaved_since = time.monotonic()
            left = machine.START_WRITE_DELAY_SEC - (time.monotonic() - self.unsaved_since)
            if left > 0:
                short = left if timeout is None else min(timeout, left)
                if await self.waker.wait(short):
                    return  # woken (the pod changed): decide again, the write can wait
                timeout = None if timeout is None else max(0.0, timeout - short)
        await self.flush()
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
            seen = observe_pod(pod)
            if seen.runner is not None and name is not None:
                self.pod_runners[name] = seen.runner
            if seen.exists and name in self.pod_network:
                key, settled_at = self.pod_network[name]
                seen = replace(seen, network=key, network_settled_at=settled_at)
            found.append(seen)
        return machine.Pods(env=found[0], verifier=found[1])

    async def create_pod(self, plan: TrialPlan, role: Role, step: str | None) -> None:
        await self.call(objects.ensure_configmap_once, build_runner_configmap(self.namespace))
        names = [s.name for s in plan.steps]
        index = names.index(step) + 1 if plan.multi_step and role == Role.VERIFIER else None
        name = pod_name_for(self.body, role, index, self.status.attempt)
        if not await self.ensure_network(plan):
            return
        manifest = build_trial_pod(self.body, plan, role, step, name,
                                   probe_image_for(plan, self.settings.probe_image),
                                   self.settings.runner_image)
        if self.kueue is not None:
            manifest = self.kueue.pod(manifest)  # the admitted flavor's node labels
        created = await self.call(objects.create_pod, manifest)
        self.waker.pods.setdefault(name, created)  # until the watch tells more: no GET
        self.pod_network[name] = (manifest["metadata"]["labels"].get(LABEL_NETWORK),
                                  self.settled_at())
        await self.save(machine.on_pod_created(self.status, role, name, now()))
        message = (f"{Role(role).noun} pod {name} created with image "
                   f"{manifest['spec']['containers'][0]['image']}")
        if role == Role.ENV and self.status.attempt == 1:  # the story's first line: one Event
            spec = self.body.get("spec") or {}
            self.event("Normal", Reason.STARTED, f"trial of task {spec['taskRef']['name']} "
                       f"with agent {spec['agent']['name']}: {message}")
        else:
            self.event("Normal", Reason.POD_CREATED, message)

    # ------------------------------------------------------------ network policies

    async def ensure_network(self, plan: TrialPlan) -> bool:
        """The trial's NetworkPolicies (and FQDN policies) exist before any of its pods. When
        they cannot be created the trial fails (NetworkPolicyUnenforceable): never run open."""
        if self.network_ready or plan.network is None:
            return True
        settings = self.network or NetworkSettings()
        own = plan.network.restricted or bool(plan.network.model_policies)
        try:
            if own:
                objects_ = build_network_objects(
                    self.body, list(plan.network.policies.values()), settings,
                    plan.network.model_policies, plan.network.model_peer)
                await self.call(kube_network.apply_network_objects, objects_)
            else:  # public throughout: the namespace's shared policies are all it needs
                await self.call(kube_network.ensure_namespace_baseline,
                                build_namespace_baseline(self.namespace, settings))
        except ApiException as e:
            if is_server_error(e):
                raise  # transient: the driver task is started again
            status, outcome = machine.fail(
                self.status, Reason.NETWORK_POLICY_UNENFORCEABLE,
                f"could not create the trial's network policies ({e.status} {e.reason}): "
                f"{error_body(e)}", now())
            await self.save(status, outcome)
            return False
        self.network_ready = True
        backend = settings.fqdn_backend
        if own:  # public throughout is the default: not worth an Event
            self.event("Normal", Reason.NETWORK_POLICIES,
                       f"network policies: deny-all plus {', '.join(plan.network.policies)}"
                       + (f" (FQDN backend {backend})" if backend != "none" else ""))
        for notice in plan.network.notices:
            self.event("Warning", Reason.NETWORK_NOTICE, notice)
        return True

    def settled_at(self) -> datetime:
        """When a network label set now holds: dataplanes take a moment to apply a policy."""
        return now() + timedelta(seconds=self.settings.network_settle_sec)

    async def set_network(self, pod: str, key: str, why: str) -> bool:
        """Put `pod` under policy `key`; False when the pod is gone."""
        if self.pod_network.get(pod, (None, None))[0] == key:
            return True
        if not await self.call(kube_network.label_pod, self.namespace, pod,
                               {LABEL_NETWORK: key}):
            return False
        self.pod_network[pod] = (key, self.settled_at())
        self.logger.info(f"pod {pod}: network policy {key} ({why})")
        return True

    async def read_artifacts(self, pod: str) -> kube_runner.Reply:
        """The tar the collect phase packed in the environment pod (bounded by the limit)."""
        runner = self.pod_runners.get(pod)
        current = runner is None or runner == runner_configmap_name()
        return await self.exec_call(kube_runner.artifacts, self.namespace, pod,
                                    ARTIFACTS_LIMIT_BYTES + TAR_OVERHEAD_BYTES, ARTIFACTS_TAR,
                                    current)

    async def keep_artifacts(self, pod: str) -> bool:
        """The artifacts the collect phase packed in the environment pod, with the last step's
        docker-compose sidecar evidence, kept in ConfigMaps of the trial's before the pod goes
        (cleaned when the verifier is set up, as when read from the pod); False when the exec
        did not run (look again)."""
        reply = await self.read_artifacts(pod)
        if reply.state == "gone":
            # Deleted already (an operator stopped between the delete and its record): what it
            # packed was kept before the delete.
            self.logger.info(f"{pod} is gone: its artifacts were kept before it was deleted")
            return True
        if (reply.state != "ok" and reply.exit_code is None
                and self.keep_tries < KEEP_ARTIFACTS_TRIES):
            # The exec did not run: look again after a pause (never a busy loop of execs).
            self.keep_tries += 1
            self.logger.warning(f"reading the artifacts of {pod} failed (try "
                                f"{self.keep_tries}): {reply.error}")
            await asyncio.sleep(min(5.0, 1.0 + 2 * (self.keep_tries - 1)))
            return False
        if reply.state != "ok":  # refused (over the limit), or unreadable however often tried
            self.logger.warning(f"no artifacts from {pod}: {reply.error}")
            self.event("Warning", Reason.ARTIFACTS_SKIPPED,
                       f"no artifacts for the verifier: {reply.error}"[:1000])
        step = self.plan.steps[-1].name if self.plan and self.plan.steps else None
        data = concat_tars(reply.stdout if reply.state == "ok" else b"",
                           await self.sidecar_evidence(step))
        if data:
            await self.call(kube_artifacts.save, artifacts_configmaps(self.body, data))
        return True

    async def kept_artifacts(self) -> bytes | None:
        name = self.body["metadata"]["name"]
        first = await self.call(kube_artifacts.load, self.namespace,
                                [artifacts_configmap_name(name, 0)])
        if not first:
            return None
        names = [artifacts_configmap_name(name, i) for i in range(1, parts_of(first[0]))]
        rest = await self.call(kube_artifacts.load, self.namespace, names) if names else []
        if rest is None:
            return None
        return b"".join(part_bytes(cm) for cm in [*first, *rest])

    async def bundle(self, phase_id: str, phase: PhaseSpec) -> bytes | kube_runner.Reply:
        """The phase's bundle; a separate verifier's first phase also carries the agent
        environment's artifacts, packed by the collect phase (read now, so a restarted
        operator simply reads them again) and cleaned here (`render.artifact_bundle`: regular
        files and folders under the declared paths only, within the size limit). The failed
        read's reply when that exec failed."""
        script = phase.script
        if isinstance(script, VerifierEnvironmentScript):
            pod = self.status.pod_name
            if pod:
                reply = await self.read_artifacts(pod)
                if reply.exit_code is None:
                    return reply  # the exec did not run: this attempt failed
                raw = reply.stdout if reply.state == "ok" else None
                problem = reply.error if reply.state != "ok" else ""
                evidence = await self.sidecar_evidence(phase.step)  # docker-compose sidecars'
                if evidence:
                    raw = concat_tars(raw or b"", evidence)
            else:  # stopped before the last step's verifier: what was kept from it
                pod = "the environment pod (stopped)"
                raw = await self.kept_artifacts()
                problem = "" if raw is not None else "none were kept before it was stopped"
            clean: CleanArtifacts | None = None
            if raw is not None:
                try:
                    clean = await asyncio.to_thread(clean_artifacts, raw, script.artifacts)
                except ArtifactsRefused as e:
                    problem = str(e)
                    clean = None
            if problem and clean is not None:
                self.logger.warning(f"no artifacts from {pod}'s main container: {problem}")
            if clean is not None:
                phase = replace(phase, payload={**phase.payload, "artifacts.tar": clean.tar})
                if clean.skipped:
                    shown = "; ".join(clean.skipped[:5]) + (
                        f"; and {len(clean.skipped) - 5} more" if len(clean.skipped) > 5 else "")
                    self.event("Warning", Reason.ARTIFACTS_SKIPPED,
                               f"artifacts left out for the verifier: {shown}"[:1000])
            else:
                self.logger.warning(f"no artifacts from {pod}: {problem}")
                self.event("Warning", Reason.ARTIFACTS_SKIPPED,
                           f"no artifacts for the verifier: {problem}"[:1000])
        return build_phase_bundle(phase_id, phase)

    async def sidecar_evidence(self, step: str | None) -> bytes:
        """The step's docker-compose sidecar evidence for its separate verifier: each
        sidecar's collect hooks, then its artifacts copied out (best effort, as Harbor's
        collection: a failure is logged, never fails the trial). After the collect phase in
        `main`, whose leftover processes the runner ended: the agent cannot change them now."""
        if self.plan is None or not self.status.pod_name:
            return b""
        pod, parts = self.status.pod_name, []
        for evidence in self.plan.step(step).sidecar_evidence:
            for hook in evidence.hooks:
                reply = await self.exec_call(kube_runner.exec_in, self.namespace, pod,
                                             evidence.service, sidecar_hook_argv(hook),
                                             hook.timeout_sec)
                if reply.state != "ok":
                    self.logger.warning(f"collect hook in {evidence.service} of {pod} "
                                        f"failed (ignored): {reply.error}")
            for artifact in evidence.artifacts:
                reply = await self.exec_call(kube_runner.exec_in, self.namespace, pod,
                                             evidence.service, sidecar_artifact_argv(artifact),
                                             EXEC_TIMEOUT_SEC,
                                             ARTIFACTS_LIMIT_BYTES + TAR_OVERHEAD_BYTES)
                if reply.state == "ok":
                    parts.append((artifact, reply.stdout))
                else:
                    self.logger.warning(f"artifact {artifact.source} of {evidence.service} in "
                                        f"{pod} not collected: {reply.error}")
        return merge_sidecar_tars(parts) if parts else b""

    async def exec_runner(self, command: str, plan: TrialPlan, phase_id: str, retries: int,
                          wait: int = 0) -> tuple[tuple[str, PhaseStatus], ...] | None:
        """`launch` or `result` (with `wait`: a waiting one) for the phase in its pod, as
        `exec_policy` says: retried with a backoff; None when the pod must be looked at again.
        A launch may start the phases after it too (`trial_machine.chained_phases`): the
        answer is each launched phase's status (its result when it ended meanwhile)."""
        role = plan.phase(phase_id).pod
        pod_name = machine.pod_name(self.status, role)
        assert pod_name is not None
        if command == "launch":
            runner = self.pod_runners.get(pod_name)
            current = runner is None or runner == runner_configmap_name()
            phases = tuple(machine.chained_phases(plan, phase_id, current))
        else:
            phases = (phase_id,)
        attempt = unavailable = 0
        runner_ran = False  # the last answer came from the runner, but was no usable one
        while True:
            decided = await self.secrets_delivered(plan, phase_id, pod_name, attempt) if (
                command == "launch") else None
            if isinstance(decided, exec_policy.SecretsMissing):
                await self.save(*machine.fail(
                    self.status, Reason.SECRET_NOT_FOUND, exec_policy.missing_secrets_message(
                        plan.secret_names, decided.indexes, self.namespace), now()))
                return None
            if decided is None:
                if machine.write_before_exec(self.unsaved_exec_sec, self.unsaved_execs):
                    await self.flush()  # a restart redoes at most two execs, not all before
                started = time.monotonic()
                reply = await self.exec_once(command, plan, phases, pod_name, wait)
                if not wait:  # time spent waiting is no work a restart would redo
                    self.unsaved_exec_sec += time.monotonic() - started
                    self.unsaved_execs += 1
                decided = exec_policy.after_exec(reply.state, reply.text, reply.error, attempt,
                                                 phases, unavailable)
                runner_ran = reply.exit_code is not None
            match decided:
                case exec_policy.Answered(results=results):
                    return results
                case exec_policy.Reobserve():
                    return None
                case exec_policy.RetryExec() | exec_policy.ExecsExhausted():
                    self.logger.warning(f"exec {command} {phase_id} failed "
                                        f"(attempt {attempt + 1}): {decided.error}")
                    await asyncio.sleep(decided.delay)
            if isinstance(decided, exec_policy.ExecsExhausted):
                break
            if isinstance(decided, exec_policy.RetryExec) and not decided.counts:
                unavailable += 1
                continue
            attempt += 1
        pod = observe_pod(await self.call(objects.get_pod, self.namespace, pod_name))
        failed = machine.unanswered_execs(self.status, plan, retries, role, pod, now(),
                                          runner_ran)
        if failed is not None:
            await self.save(*failed)
        return None

    async def exec_once(self, command: str, plan: TrialPlan, phases: tuple[str, ...],
                        pod_name: str, wait: int = 0) -> kube_runner.Reply:
        limit = plan.log_limit_bytes
        if command != "launch" and wait:
            return await self.waiting(pod_name, kube_runner.result, self.namespace, pod_name,
                                      phases[0], limit, wait)
        if command != "launch":
            return await self.exec_call(kube_runner.result, self.namespace, pod_name,
                                        phases[0], limit)
        if any(plan.phase(p).name not in machine.OWN_PHASES for p in phases):
            self.task_code_sent.add(pod_name)
        bundles = []
        for phase_id in phases:
            bundle = await self.bundle(phase_id, plan.phase(phase_id))
            if isinstance(bundle, kube_runner.Reply):
                return bundle
            bundles.append((phase_id, bundle))
        uid, attempt = self.body["metadata"].get("uid") or "", self.status.attempt
        if len(bundles) == 1:
            base = self.status.pod_process_base if pod_name == self.status.pod_name else None
            return await self.exec_call(kube_runner.launch, self.namespace, pod_name,
                                        phases[0], bundles[0][1], limit,
                                        launch_key(uid, attempt, phases[0]), base)
        return await self.exec_call(kube_runner.chain, self.namespace, pod_name,
                                    [(p, launch_key(uid, attempt, p)) for p in phases],
                                    build_chain_bundle(bundles), limit)

    async def waiting(self, pod_name: str, fn, *args) -> kube_runner.Reply:
        """A waiting exec, in the pool of execs (`executor.execs`), dropped when the trial is
        cancelled or its pod is going (a pod or Trial change wakes the driver): the answer is
        then `gone`, and the driver looks again. A dropped exec ends in its pod by itself."""
        future = asyncio.ensure_future(self.exec_call(fn, *args))
        while True:
            woken = asyncio.ensure_future(self.waker.wait(None))
            done, _ = await asyncio.wait({future, woken}, return_when=asyncio.FIRST_COMPLETED)
            if future in done:
                woken.cancel()
                return future.result()
            pod = self.waker.pods.get(pod_name, {})
            seen = observe_pod(pod) if pod is not None else None
            evicted = self.kueue is not None and self.kueue.evicted() is not None
            if self.cancelling() or seen is None or seen.lost or seen.deleting or evicted:
                future.add_done_callback(lambda f: f.exception())  # nobody reads it
                return kube_runner.Reply("gone", error="the wait was dropped: the trial "
                                         "was cancelled or its pod is going")

    async def secrets_delivered(self, plan: TrialPlan, phase_id: str, pod_name: str,
                                attempt: int) -> exec_policy.SecretsDecision:
        """Before a phase that needs them, the agent's Secret files copied into its drop by
        the pod's `secrets` container (the operator never reads a Secret, no value is on a
        command line); None when the phase needs none or they are in place."""
        if not (plan.phase(phase_id).secrets and plan.secret_names):
            return None
        reply = await self.exec_call(kube_runner.put_secrets, self.namespace, pod_name, phase_id)
        return exec_policy.after_put_secrets(reply.state, reply.text, reply.error, attempt)

    async def finish(self, keep: bool) -> None:
        """The outcome and the end in one write (the outcome is on record before its pods
        go), then the pods go. An operator stopped in between finds the trial finished with
        pods left: the pod watch removes them (`pod_watch.left_behind`); a delete that fails
        here fails the driver, whose next run removes them (`remove_pods`)."""
        # No Event here: the outcome's own (RewardRecorded, or the failure's reason) ends the
        # story in `kubectl describe`; Completed/Failed would repeat it.
        await self.keep_service_logs()
        await self.save(machine.finished(self.status, now()))
        await self.flush()
        cond = machine.terminal_condition(self.status)
        self.logger.info(f"trial {self.namespace}/{self.name}: {self.status.phase}"
                         + (f" ({cond.reason}: {cond.message})" if cond is not None else ""))
        if not keep:
            await self.remove_pods()
        await self.release_workloads()

    async def release_workloads(self) -> None:
        """A trial admitted by Kueue: its Workloads go at its end, however it ended (also when
        it ended before its driver planned it, e.g. given up), so its quota is free at once."""
        if self.kueue is None:
            with contextlib.suppress(PlanError):  # labelled, and Kueue is not there (any more)
                self.kueue = await kueue.gate_for(self)
        if self.kueue is not None:
            await self.kueue.release()

    async def keep_service_logs(self) -> None:
        """The docker-compose sidecars' logs, kept with the trial's logs before its pod goes."""
        plan = self.plan
        if plan is None or plan.environment.compose is None or not self.status.pod_name:
            return
        limit = plan.log_limit_bytes
        for service in plan.environment.compose.service_names:
            text = await self.call(objects.container_log, self.namespace, self.status.pod_name,
                                   service, limit)
            if text:
                self.pending_logs[service_log_key(service)] = truncate_log(
                    text, len(text.encode()), limit)
        if self.pending_logs:
            self.status = self.status.model_copy(
                update={"logs_config_map": logs_configmap_name(self.body)})

    async def remove_pods(self) -> None:
        for name in (
            self.status.pod_name,
            self.status.verifier_pod_name,
            *[a.pod_name for a in self.status.attempts],
        ):
            if name:
                await self.call(objects.delete_pod, self.namespace, name)


def cluster_network_settings(config: NetworkConfig) -> NetworkSettings:
    """The operator's network settings against what this cluster serves (cached lookups)."""
    return config.resolve(kube_network.discovered_fqdn_apis(), kube_network.node_ip_families(),
                          kube_network.apiserver_addresses())


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"spec.{loc}: {err['msg']}")
    return "; ".join(parts)
