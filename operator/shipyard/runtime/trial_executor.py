"""Carries out the trial loop's actions (`reconcile.trial_loop`) against the cluster: one method
per action, named after it (`RunExec` → `run_exec`), each returning one observation. It decides
nothing; what it does with an answer is the loop's (`trial_loop.absorb`). Blocking client calls
run in threads (execs in their own pool, `executor.execs`), so their cost is visible here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import kopf

from shipyard.api.conventions import (
    LABEL_NETWORK,
    artifacts_configmap_name,
    launch_key,
    owner_name,
)
from shipyard.api.models import TrialStatus
from shipyard.api.reasons import Reason
from shipyard.kube import artifacts as kube_artifacts
from shipyard.kube import network as kube_network
from shipyard.kube import nodes as kube_nodes
from shipyard.kube import objects
from shipyard.kube import runner as kube_runner
from shipyard.kube.errors import ApiException, api_message, error_body, is_server_error
from shipyard.kube.pod_exec import EXEC_TIMEOUT_SEC
from shipyard.plan import capacity
from shipyard.plan.compose import service_log_key
from shipyard.plan.network import NetworkSettings
from shipyard.plan.phases import ARTIFACTS_TAR, PhaseSpec, TrialPlan, VerifierEnvironmentScript
from shipyard.plan.settings import OperatorSettings
from shipyard.reconcile import trial_loop as loop
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.reconcile.runner_output import PackedArtifacts
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
    task_files_configmaps,
)
from shipyard.render.network_policy import build_namespace_baseline, build_network_objects
from shipyard.render.phase_bundle import build_chain_bundle, build_phase_bundle
from shipyard.render.phase_scripts import recovery_items
from shipyard.render.pod import (
    build_logs_configmap,
    build_runner_configmap,
    build_trial_pod,
    pod_name_for,
    probe_image_for,
    runner_configmap_name,
    truncate_log,
)
from shipyard.runtime import wake, warm_pools
from shipyard.runtime.executor import execs
from shipyard.runtime.runner_files import ensure_runner
from shipyard.runtime.status_writer import StatusWriter
from shipyard.runtime.wake import Waiter
from shipyard.taskformat import ArtifactConfig

ARTIFACT_LIMIT = ARTIFACTS_LIMIT_BYTES + TAR_OVERHEAD_BYTES


class KubeTrialExecutor:
    """The executor of one trial's driver. `status` and `plan` are the driver's (read, never
    changed here); `gate` its Kueue gate; `drop_wait` says when a waiting exec is dropped."""

    def __init__(self, body: kopf.Body, settings: OperatorSettings, waker: Waiter,
                 logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.body, self.settings, self.waker, self.logger = body, settings, waker, logger
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]
        self.status = TrialStatus()
        self.plan: TrialPlan | None = None
        self.network: NetworkSettings | None = None
        self.gate: Any = None  # runtime.kueue.KueueGate
        self.drop_wait: Callable[[str], bool] = lambda pod: False
        self.pod_runners: dict[str, str] = {}
        self.writer = StatusWriter(body, "trials")

    async def call(self, fn, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def exec_call(self, fn, *args):
        """An exec into a trial pod, in the pool of execs (`executor.execs`)."""
        return await asyncio.get_running_loop().run_in_executor(execs,
                                                                functools.partial(fn, *args))

    def apply(self, action: loop.Action):
        """The coroutine carrying out `action` (its method is named after it)."""
        method = "".join("_" + c.lower() if c.isupper() else c for c in type(action).__name__)
        return getattr(self, method.lstrip("_"))(action)

    # ------------------------------------------------------------ pods and writes

    async def observe(self, action: loop.Observe) -> loop.PodsSeen:
        """The trial's pods: from the watch when it has told us, else one GET each."""
        found = []
        for name in (self.status.pod_name, self.status.verifier_pod_name):
            pod = None
            if name is not None:
                if name in self.waker.pods and not action.force:
                    pod = self.waker.pods[name]
                else:
                    pod = await self.call(objects.get_pod, self.namespace, name)
            seen = observe_pod(pod)
            if pod is not None and capacity.TAINT_REASON in (seen.unschedulable or ""):
                tolerations = (pod.get("spec") or {}).get("tolerations") or []
                seen = replace(seen, passing_taints=capacity.passing_taints(
                    await self.call(kube_nodes.taints), tolerations))
            found.append(seen)
        return loop.PodsSeen(*found)

    async def fetch_pod(self, action: loop.FetchPod) -> loop.PodFetched:
        return loop.PodFetched(observe_pod(await self.call(objects.get_pod, self.namespace,
                                                           action.pod)))

    async def flush(self, action: loop.Flush) -> loop.Written:
        if action.logs:
            cm = build_logs_configmap(self.body, dict(action.logs))
            await self.call(objects.merge_configmap_data, cm, action.logs_known)
        if action.events or action.status is not None:
            patch = (action.status.model_dump(by_alias=True, mode="json")
                     if action.status is not None else None)
            await self.call(self.writer.write, patch, action.events)  # one thread for both
        return loop.Written(action)

    async def wait_wake(self, action: loop.WaitWake) -> loop.Woken:
        return loop.Woken(await self.waker.wait(action.timeout))

    async def pause(self, action: loop.Pause) -> loop.Nothing:
        await asyncio.sleep(action.seconds)
        return loop.Nothing()

    async def crash(self, action: loop.Crash) -> loop.Nothing:
        raise RuntimeError(action.message)

    async def done(self, action: Any) -> loop.Nothing:
        return loop.Nothing()

    async def delete_pod(self, action: loop.DeletePod) -> loop.Nothing:
        await self.call(objects.delete_pod, self.namespace, action.pod)
        return loop.Nothing()

    async def remove_pods(self, action: loop.RemovePods) -> loop.Nothing:
        for name in action.pods:
            await self.call(objects.delete_pod, self.namespace, name)
        return loop.Nothing()

    async def create_pod_object(self, action: loop.CreatePodObject
                                ) -> loop.PodCreated | loop.PodRefused:
        plan = self.plan
        assert plan is not None
        await self.call(objects.ensure_configmap_once, build_runner_configmap(self.namespace))
        runner = await self.call(ensure_runner, self.settings, self.namespace)
        names = [s.name for s in plan.steps]
        index = (names.index(action.step) + 1
                 if plan.multi_step and action.role == loop.machine.Role.VERIFIER else None)
        if action.role == loop.machine.Role.ENV:
            claimed = await self.call(warm_pools.claim, self.body, plan, self.settings,
                                      self.gate is not None)
            if claimed is not None:  # a warm pod (docs/warm-pods.md)
                name = claimed["metadata"]["name"]
                self.waker.pods[name] = claimed
                self._wake_sweep()
                return loop.PodCreated(action.role, name, claimed["spec"]["containers"][0]["image"],
                                       claimed["metadata"]["labels"].get(LABEL_NETWORK), warm=True)
        if action.role == loop.machine.Role.ENV and plan.environment.compose is not None:
            # Made (or checked) for each pod, not once per process: one deleted meanwhile
            # would leave the pod waiting for its volume.
            for configmap in task_files_configmaps(self.namespace, plan.environment.compose):
                await self.call(objects.ensure_configmap, configmap)
        name = pod_name_for(self.body, action.role, index, self.status.attempt)
        manifest = build_trial_pod(self.body, plan, action.role, action.step, name,
                                   probe_image_for(plan, self.settings.probe_image),
                                   runner)
        if self.gate is not None:
            manifest = self.gate.pod(manifest)  # the admitted flavor's node labels
        try:
            created = await self.call(objects.create_pod, manifest)
        except ApiException as e:
            if e.status not in (400, 403, 422):
                raise
            message = api_message(e)
            return loop.PodRefused(action.role, e.status, message,
                                   e.status == 403 and "exceeded quota" in message)
        self.waker.pods.setdefault(name, created)  # until the watch tells more: no GET
        if action.role == loop.machine.Role.ENV:
            self._wake_sweep()
        return loop.PodCreated(action.role, name, manifest["spec"]["containers"][0]["image"],
                               manifest["metadata"]["labels"].get(LABEL_NETWORK))

    def _wake_sweep(self) -> None:
        """The trial holds its environment pod now: its Sweep sizes its warm pods again at
        once (`SweepDriver.keep_warm` counts it started)."""
        sweep = owner_name(self.body, "Sweep")
        if sweep is not None:
            wake.wake(wake.SWEEP, self.namespace, sweep)

    async def service_logs(self, action: loop.ServiceLogs) -> loop.ServiceLogsRead:
        """The docker-compose sidecars' logs, kept with the trial's logs before its pod goes."""
        plan, logs = self.plan, {}
        if plan is None or plan.environment.compose is None:
            return loop.ServiceLogsRead({})
        limit = plan.log_limit_bytes
        for service in plan.environment.compose.service_names:
            text = await self.call(objects.container_log, self.namespace, action.pod, service,
                                   limit)
            if text:
                logs[service_log_key(service)] = truncate_log(text, len(text.encode()), limit)
        return loop.ServiceLogsRead(logs)

    # ------------------------------------------------------------ Kueue

    async def admit(self, action: loop.Admit) -> loop.Admitted:
        assert self.plan is not None
        return loop.Admitted(self.gate is None or await self.gate.admit(self.plan))

    async def preempt(self, action: loop.Preempt) -> loop.Nothing:
        await self.gate.preempt(self.plan, action.evicted)
        return loop.Nothing()

    async def release_workloads(self, action: loop.ReleaseWorkloads) -> loop.Nothing:
        if self.gate is not None:
            await self.gate.release()
        return loop.Nothing()

    # ------------------------------------------------------------ network policies

    async def apply_network(self, action: loop.ApplyNetwork
                            ) -> loop.NetworkApplied | loop.NetworkRefused:
        """The trial's NetworkPolicies (and FQDN policies), else the namespace's baseline."""
        plan = self.plan
        assert plan is not None and plan.network is not None
        settings = self.network or NetworkSettings()
        try:
            if action.own:
                objects_ = build_network_objects(
                    self.body, list(plan.network.policies.values()), settings,
                    plan.network.model_policies, plan.network.model_peer)
                await self.call(kube_network.apply_network_objects, objects_)
            else:  # public throughout: the namespace's shared policies are all it needs
                await self.call(kube_network.ensure_namespace_baseline,
                                build_namespace_baseline(self.namespace, settings))
        except ApiException as e:
            return loop.NetworkRefused(e.status, str(e.reason), error_body(e),
                                       is_server_error(e))
        return loop.NetworkApplied(settings.fqdn_backend)

    async def label_pod(self, action: loop.LabelPod) -> loop.Labelled:
        ok = await self.call(kube_network.label_pod, self.namespace, action.pod,
                             {LABEL_NETWORK: action.key})
        return loop.Labelled(action.pod, action.key, action.why, bool(ok))

    # ------------------------------------------------------------ execs

    def _reply(self, kind: str, reply: kube_runner.Reply, started: float,
               events: tuple = ()) -> loop.ExecReply:
        return loop.ExecReply(kind, reply.state, reply.text, reply.error, reply.exit_code,
                              reply.stdout, time.monotonic() - started, events)

    async def put_secrets(self, action: loop.PutSecrets) -> loop.ExecReply:
        """The agent's Secret files copied into its drop by the pod's `secrets` container (the
        operator never reads a Secret, no value is on a command line)."""
        started = time.monotonic()
        if action.pod == self.status.warm_pod:  # no Secret volumes: the operator sends them
            reply = await self.exec_call(warm_pools.deliver_secrets, self.namespace, action.pod,
                                         self.plan)
            if reply.state != "ok":
                return self._reply("secrets", reply, started)
        reply = await self.exec_call(kube_runner.put_secrets, self.namespace, action.pod,
                                     action.phase)
        return self._reply("secrets", reply, started)

    async def stop_phase(self, action: loop.StopPhase) -> loop.ExecReply:
        assert self.plan is not None
        started = time.monotonic()
        reply = await self.exec_call(kube_runner.stop, self.namespace, action.pod,
                                     action.phase, self.plan.log_limit_bytes)
        return self._reply("stop", reply, started)

    async def run_exec(self, action: loop.RunExec) -> loop.ExecReply:
        plan = self.plan
        assert plan is not None
        started, limit, pod = time.monotonic(), plan.log_limit_bytes, action.pod
        artifacts = ARTIFACT_LIMIT if action.artifacts else 0
        if action.command != "launch":
            if action.wait:
                reply = await self.waiting(pod, kube_runner.result, self.namespace, pod,
                                           action.phases[0], limit, action.wait, artifacts)
            else:
                reply = await self.exec_call(kube_runner.result, self.namespace, pod,
                                             action.phases[0], limit, 0, artifacts)
            return self._reply("exec", reply, started)
        bundles, events = [], []
        for phase_id in action.phases:
            bundle = await self.bundle(phase_id, plan.phase(phase_id), events)
            if isinstance(bundle, kube_runner.Reply):
                return self._reply("exec", bundle, started, tuple(events))
            bundles.append((phase_id, bundle))
        uid, attempt = self.body["metadata"].get("uid") or "", self.status.attempt
        if len(bundles) == 1:
            base = self.status.pod_process_base if pod == self.status.pod_name else None
            reply = await self.exec_call(kube_runner.launch, self.namespace, pod,
                                         action.phases[0], bundles[0][1], limit,
                                         launch_key(uid, attempt, action.phases[0]), base,
                                         artifacts)
        else:
            keys = [(p, launch_key(uid, attempt, p)) for p in action.phases]
            reply = await self.exec_call(kube_runner.chain, self.namespace, pod, keys,
                                         build_chain_bundle(bundles, keys if action.folded
                                                            else ()),
                                         limit, artifacts, action.folded)
        return self._reply("exec", reply, started, tuple(events))

    async def waiting(self, pod_name: str, fn, *args) -> kube_runner.Reply:
        """A waiting exec, dropped when `drop_wait` says so after a wake (the trial is
        cancelled or its pod is going): the answer is then `gone`, and the driver looks again.
        A dropped exec ends in its pod by itself."""
        future = asyncio.ensure_future(self.exec_call(fn, *args))
        while True:
            woken = asyncio.ensure_future(self.waker.wait(None))
            done, _ = await asyncio.wait({future, woken}, return_when=asyncio.FIRST_COMPLETED)
            if future in done:
                woken.cancel()
                return future.result()
            if self.drop_wait(pod_name):
                future.add_done_callback(lambda f: f.exception())  # nobody reads it
                return kube_runner.Reply("gone", error="the wait was dropped: the trial "
                                         "was cancelled or its pod is going")

    # ------------------------------------------------------------ artifacts

    async def _read_artifacts(self, pod: str, recover: tuple[ArtifactConfig, ...] = ()
                              ) -> kube_runner.Reply:
        """The tar the collect phase packed in the environment pod (bounded by the limit);
        `recover`: packed first if nothing was (the Go runner only)."""
        runner = self.pod_runners.get(pod)
        current = runner is None or runner == runner_configmap_name()
        items = recovery_items(recover) if recover and current else ""
        return await self.exec_call(kube_runner.artifacts, self.namespace, pod, ARTIFACT_LIMIT,
                                    ARTIFACTS_TAR, current, items)

    async def read_artifacts(self, action: loop.ReadArtifacts) -> loop.ExecReply:
        started = time.monotonic()
        return self._reply("artifacts", await self._read_artifacts(action.pod), started)

    async def save_artifacts(self, action: loop.SaveArtifacts) -> loop.Nothing:
        """Kept in ConfigMaps of the trial's before the pod goes (cleaned when the verifier is
        set up, or exported, as when read from the pod), with the step's compose sidecar
        evidence and its collection set (the export's manifest)."""
        data = concat_tars(action.data, await self.sidecar_evidence(action.pod, action.step))
        await self._keep(data, action.step, action.refused)
        return loop.Nothing()

    async def _keep(self, data: bytes, step: str | None, refused: str | None,
                    packed: bool = False) -> None:
        """Kept with the step's collection set; nothing when nothing was packed (`packed`: an
        empty tar was, e.g. the agent removed every artifact: the manifest says `failed`)."""
        if not data and not refused and not packed:
            return
        entries = self.plan.step(step).artifacts if self.plan is not None else ()
        if refused:
            refused = (f"{refused.strip()} (the artifacts limit is "
                       f"{ARTIFACTS_LIMIT_BYTES // (1024 * 1024)} MiB of files)")
        await self.call(kube_artifacts.save,
                        artifacts_configmaps(self.body, data, step, entries, refused,
                                             self._earlier_step_index(step)))

    def _earlier_step_index(self, step: str | None) -> int | None:
        """The 1-based index of a multi-step trial's step before its last (whose artifacts
        are kept under names of their own); None for the last step, or a single step."""
        names = [s.name for s in self.plan.steps] if self.plan is not None else []
        if len(names) < 2 or step not in names[:-1]:
            return None
        return names.index(step) + 1

    async def keep_artifacts(self, action: loop.KeepArtifacts) -> loop.Nothing:
        """What its environment pod packed (a shared verifier's artifacts), kept for the
        export: at the trial's end, or (a multi-step trial's) as each step's verifier ends.
        Best effort: a failure is logged, never fails the trial. Without an exec when the
        verifier's reply carried them."""
        reply = (_carried(action.packed) if action.packed is not None
                 else await self._read_artifacts(action.pod, action.recover))
        refused = None
        if reply.state != "ok":
            if reply.exit_code != loop.ARTIFACTS_OVER_LIMIT:
                if reply.exit_code is None:
                    self.logger.warning(f"artifacts of {action.pod} not kept: {reply.error}")
                if not action.sidecars:
                    return loop.Nothing()  # none were packed (the trial ended before)
            else:
                refused = reply.error
                self.logger.warning(f"artifacts of {action.pod} not kept: {refused}")
        raw = reply.stdout if reply.state == "ok" else None
        if action.sidecars:
            raw = concat_tars(raw or b"", action.sidecars)
        await self._keep_for_export(raw, action.step, refused, action.pod)
        return loop.Nothing()

    async def collect_sidecars(self, action: loop.CollectSidecars) -> loop.SidecarsCollected:
        """Before a shared verifier: its step's sidecar evidence (`sidecar_evidence`)."""
        return loop.SidecarsCollected(action.phase, action.step,
                                      await self.sidecar_evidence(action.pod, action.step))

    async def _keep_for_export(self, raw: bytes | None, step: str | None,
                               refused: str | None, pod: str) -> None:
        """`_keep`, best effort (a failed write is logged, never fails the trial): what a
        shared verifier packed, or an earlier step's as read for its separate verifier."""
        try:
            await self._keep(raw or b"", step, refused, packed=raw is not None)
        except ApiException as e:
            self.logger.warning(f"artifacts of {pod} not kept: {e.status} {e.reason}")

    async def kept_artifacts(self) -> bytes | None:
        uid = self.body["metadata"].get("uid", "")
        first = await self.call(kube_artifacts.load, self.namespace,
                                [artifacts_configmap_name(self.name, 0)], uid)
        if not first:
            return None
        names = [artifacts_configmap_name(self.name, i) for i in range(1, parts_of(first[0]))]
        rest = (await self.call(kube_artifacts.load, self.namespace, names, uid) if names
                else [])
        if rest is None:
            return None
        return b"".join(part_bytes(cm) for cm in [*first, *rest])

    async def bundle(self, phase_id: str, phase: PhaseSpec, events: list
                     ) -> bytes | kube_runner.Reply:
        """The phase's bundle; a separate verifier's first phase also carries the agent
        environment's artifacts, packed by the collect phase (read now, so a restarted
        operator simply reads them again) and cleaned here (`render.artifact_bundle`). The
        failed read's reply when that exec did not run; Events of what was left out."""
        script = phase.script
        if isinstance(script, VerifierEnvironmentScript):
            pod = self.status.pod_name
            if pod:
                reply = await self._read_artifacts(pod)
                if reply.exit_code is None:
                    return reply  # the exec did not run: this attempt failed
                raw = reply.stdout if reply.state == "ok" else None
                problem = reply.error if reply.state != "ok" else ""
                evidence = await self.sidecar_evidence(pod, phase.step)
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
                    problem, clean = str(e), None
            if self.status.pod_name and self._earlier_step_index(phase.step) is not None:
                over = reply.exit_code == loop.ARTIFACTS_OVER_LIMIT
                await self._keep_for_export(raw, phase.step, reply.error if over else None,
                                            pod)
            if problem and clean is not None:
                self.logger.warning(f"no artifacts from {pod}'s main container: {problem}")
            if clean is not None:
                phase = replace(phase, payload={**phase.payload, "artifacts.tar": clean.tar})
                if clean.skipped:
                    shown = "; ".join(clean.skipped[:5]) + (
                        f"; and {len(clean.skipped) - 5} more" if len(clean.skipped) > 5 else "")
                    events.append(("Warning", Reason.ARTIFACTS_SKIPPED,
                                   f"artifacts left out for the verifier: {shown}"[:1000]))
            else:
                self.logger.warning(f"no artifacts from {pod}: {problem}")
                events.append(("Warning", Reason.ARTIFACTS_SKIPPED,
                               f"no artifacts for the verifier: {problem}"[:1000]))
        return build_phase_bundle(phase_id, phase)

    async def sidecar_evidence(self, pod: str, step: str | None) -> bytes:
        """The step's docker-compose sidecar evidence for its verifier: each sidecar's collect
        hooks, then its artifacts copied out (best effort, as Harbor's collection: a failure
        is logged, never fails the trial)."""
        if self.plan is None:
            return b""
        parts = []
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
                                             EXEC_TIMEOUT_SEC, ARTIFACT_LIMIT)
                if reply.state == "ok":
                    parts.append((artifact, reply.stdout))
                else:
                    self.logger.warning(f"artifact {artifact.source} of {evidence.service} in "
                                        f"{pod} not collected: {reply.error}")
        return merge_sidecar_tars(parts) if parts else b""


def _carried(packed: PackedArtifacts) -> kube_runner.Reply:
    """The artifacts a verifier's reply carried, as `runner artifacts` answers for them."""
    if packed.data is not None:
        return kube_runner.Reply("ok", packed.data, exit_code=0)
    if packed.size is None:
        return kube_runner.Reply("failed", error="no artifacts were packed",
                                 exit_code=loop.NO_ARTIFACTS)
    return kube_runner.Reply("failed", error=f"the artifacts tar is {packed.size} bytes, over "
                             f"the limit of {ARTIFACT_LIMIT}", exit_code=loop.ARTIFACTS_OVER_LIMIT)
