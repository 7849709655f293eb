"""Warm pods at run time (`docs/warm-pods.md`; the kopf registrations are
`handlers.warm_pools`): a task per WarmPool keeps its unclaimed
pods (`reconcile.warm_pool` decides), and `claim` gives a starting trial one of them instead
of a new pod.

A pool's pods are rendered for the Trial the pool describes (`plan.warm.pool_trial`): the
trial's environment pod less what is per trial (`render.warm_pod.warm_spec`), keyed by the
digest of that spec. A trial claims a pod of its own key with one patch under the pod's
resourceVersion (labels, owner, network baseline, the claim annotation); a 409 means another
trial got it first and the next one is tried. The claim is on the pod (its annotation, found
again by a restarted operator) and in the Trial's status (`warmPod`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from shipyard.api.compat import known_fields
from shipyard.api.conditions import material
from shipyard.api.conventions import (
    ANNOTATION_CLAIMED_BY,
    LABEL_COMPONENT,
    LABEL_SWEEP,
    LABEL_WARM_POOL,
    Component,
    label_value,
    parse_time,
)
from shipyard.api.models import TrialSpec, WarmPoolSpec
from shipyard.kube import network as kube_network
from shipyard.kube import nodes as kube_nodes
from shipyard.kube import objects
from shipyard.kube import warm_pods as kube
from shipyard.plan.capacity import node_capacities
from shipyard.plan.images import ImagesFailed, ImagesReady
from shipyard.plan.network import NetworkSettings
from shipyard.plan.phases import (
    PlanError,
    TrialPlan,
    build_plan,
    check_runnable,
    start_images,
)
from shipyard.plan.settings import OperatorSettings
from shipyard.plan.warm import claims_warm_pod, pool_trial
from shipyard.reconcile.warm_pool import (
    ClaimWatch,
    DeadWatch,
    claimable,
    dead_hold,
    decide,
    observe_warm_pod,
    refill_hold,
)
from shipyard.render.network_policy import build_namespace_baseline
from shipyard.render.pod import build_runner_configmap, probe_image_for
from shipyard.render.warm_pod import build_warm_pod, claim_patch, warm_key, warm_spec
from shipyard.runtime import config, image_configs
from shipyard.runtime import images as image_builds
from shipyard.runtime.runner_files import ensure_runner, runner_of
from shipyard.runtime.task_files import TaskUnavailable, load_task_by_name

IDLE_WAIT = 30.0
CLAIM_TRIES = 5
"""Candidates a trial tries (each a 409 when another trial got it first) before it creates its
own pod."""
BATCH_SEC = 0.2
"""A pool's pass waits this long after a wake, so that a burst of its pods' events (a pod
starting changes several times) is one pass, one list."""
STATUS_SEC = 1.0
"""A pool's counts alone (ready, starting, claimed) are written at most this often; a change
of its Ready condition at once."""
STARTUP_SEC = 30.0
"""After the operator starts, every trial looks for a pod of its own before it claims or
creates one (an operator restarted between a claim and its record), pools known or not."""
log = logging.getLogger("shipyard.warm")
_loaded_at = time.monotonic()
_loaded_wall = datetime.now(UTC)
CLOCK_SKEW = timedelta(seconds=5)
"""The apiserver's clock against the operator's (a trial's creationTimestamp is the former)."""


def _created_since_start(created: str | None) -> bool:
    """The trial was created after this operator started (with room for clock skew)."""
    when = parse_time(created) if created else None
    return when is not None and when > _loaded_wall + CLOCK_SKEW


# ---------------------------------------------------------------- claims (a trial's side)


def pod_spec_for(trial: dict[str, Any], plan: TrialPlan, settings: OperatorSettings
                 ) -> tuple[dict[str, Any], str]:
    spec = warm_spec(trial, plan, probe_image_for(plan, settings.probe_image),
                     runner_of(settings))
    return spec, warm_key(spec)


def claim(trial: dict[str, Any], plan: TrialPlan, settings: OperatorSettings,
          kueue_admitted: bool) -> dict[str, Any] | None:
    """(In a thread) a warm pod claimed for the trial's environment pod, or None: none fits,
    or the trial does not use warm pods (`plan.warm.claims_warm_pod`). The trial's network
    policies must be in force before this (the claim puts the pod under them)."""
    meta = trial["metadata"]
    if not claims_warm_pod(plan, meta.get("labels") or {}, kueue_admitted):
        return None
    if plan.secret_names and runner_of(settings) is None:
        return None  # runner.sh cannot take a claimed pod's Secrets (`deliver_secrets`)
    namespace, uid = meta["namespace"], meta.get("uid") or ""
    started = ((trial.get("status") or {}).get("phase") or "Pending") != "Pending"
    # Just up, the pool watch may not have told; but a trial created since cannot have been
    # claimed for by an operator before (a sweep started with the operator lists nothing).
    just_up = (time.monotonic() - _loaded_at < STARTUP_SEC
               and not _created_since_start(meta.get("creationTimestamp")))
    if not (started or just_up) and not any(ns == namespace for ns, _ in list(_pools)):
        return None  # a fresh trial, no pool in the namespace (as the watch tells): no call
    for pod in kube.trial_env_pods(namespace, label_value(meta["name"])):
        # Made before an operator restart: a pod it claimed is its pod again; one it created
        # is (the driver's create finds it), and no warm pod is claimed besides.
        mine = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_CLAIMED_BY) == uid
        return pod if mine else None
    _, key = pod_spec_for(trial, plan, settings)
    pods = {p["metadata"]["name"]: p for p in kube.claimable_pods(namespace, key)}
    for candidate in claimable([observe_warm_pod(p) for p in pods.values()], key)[:CLAIM_TRIES]:
        claimed = kube.claim(namespace, candidate.name,
                             claim_patch(trial, plan, pods[candidate.name]))
        if claimed is not None:
            wake_pool((claimed["metadata"].get("labels") or {}).get(LABEL_WARM_POOL), namespace)
            return claimed
    return None


def deliver_secrets(namespace: str, pod: str, plan: TrialPlan):
    """(In a thread) the agent's Secrets into a claimed warm pod's `secrets` container, where
    a cold pod has them mounted (`render.pod.SECRETS_MOUNT`)."""
    return kube.deliver_secrets(namespace, pod, plan.secret_names)


# ---------------------------------------------------------------- pools


@dataclass
class PoolIndex:
    body: dict[str, Any]  # the live WarmPool, updated in place by its watch events
    event: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


_pools: dict[tuple[str, str], PoolIndex] = {}
"""One asyncio task per WarmPool, started from its watch (no kopf daemon: no finalizer on a
pool, whose pods are owned by it and go with it)."""


def wake_pool(pool: str | None, namespace: str) -> None:
    for (ns, name), index in _pools.items():
        if ns == namespace and (pool is None or label_value(name) == pool):
            index.event.set()


def pool_event(event_type: str | None, body: dict[str, Any], namespace: str, name: str,
               logger: logging.Logger) -> None:
    """A WarmPool's watch event: its task started, its body refreshed, or stopped (deleted)."""
    key = (namespace, name)
    index = _pools.get(key)
    if event_type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        if index is not None and index.task is not None:
            index.task.cancel()
        _pools.pop(key, None)
        return
    if index is not None:
        # The pool's own status write comes back as an event: nothing to do for it (a pass
        # per write would list the pods again for nothing).
        spec_changed = (index.body.get("metadata", {}).get("generation")
                        != body.get("metadata", {}).get("generation"))
        index.body.clear()
        index.body.update(body)
        if spec_changed:
            index.event.set()
        return
    index = _pools[key] = PoolIndex(dict(body))
    index.task = asyncio.get_running_loop().create_task(run_pool(index, namespace, name, logger),
                                                        name=f"warm pool {namespace}/{name}")


def stop_all() -> None:
    for index in list(_pools.values()):
        if index.task is not None:
            index.task.cancel()


async def run_pool(index: PoolIndex, namespace: str, name: str,
                   logger: logging.Logger) -> None:
    """Reconcile the pool on each wake (its pods, its task, itself changed) and every
    IDLE_WAIT; a failed pass is logged and tried again after a pause."""
    pool = PoolDriver(index.body, namespace, name, logger)
    while True:
        try:
            wait = await pool.reconcile()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the cluster's failure or a bug: never a dead pool
            logger.warning(f"warm pool {namespace}/{name}: {type(e).__name__}: {e}")
            wait = 5.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(index.event.wait(), wait)
        await asyncio.sleep(BATCH_SEC)  # a burst of pod events: one pass
        index.event.clear()


class PoolDriver:
    def __init__(self, body: dict[str, Any], namespace: str, name: str,
                 logger: logging.Logger) -> None:
        self.body, self.namespace, self.name, self.logger = body, namespace, name, logger
        self.settings = config.current()
        self.written: dict[str, Any] | None = None
        self.written_at = -1e9
        self.fit: tuple[tuple[Any, ...], dict[str, Any], str] | None = None
        self.fit_at = -1e9
        self.network = NetworkSettings()
        self.claims = ClaimWatch()
        self.dead = DeadWatch()

    async def reconcile(self) -> float:
        pool = {"apiVersion": self.body.get("apiVersion"), "kind": self.body.get("kind"),
                "metadata": dict(self.body.get("metadata", {})),
                "spec": dict(self.body.get("spec", {}))}
        now = datetime.now(UTC)
        try:
            spec = WarmPoolSpec.model_validate(known_fields(WarmPoolSpec, pool["spec"]))
            found = await self.pod_spec(pool)
            blocked = found if isinstance(found, str) else None
        except ValidationError as e:
            spec, found, blocked = None, None, f"spec: {e.errors()[0]['msg']}"
        fit = found if isinstance(found, tuple) else None
        pods = await asyncio.to_thread(kube.pool_pods, self.namespace, label_value(self.name))
        unclaimed = [p for p in pods
                     if (p["metadata"].get("labels") or {}).get(LABEL_COMPONENT) == Component.WARM]
        claimed_names = frozenset(p["metadata"]["name"] for p in pods if p not in unclaimed
                                  and not p["metadata"].get("deletionTimestamp"))
        claimed = len(claimed_names)
        generation = pool["metadata"].get("generation")
        seen = [observe_warm_pod(p) for p in unclaimed]
        failed, self.dead = dead_hold(self.dead, seen, time.monotonic())
        decision = decide(spec.replicas if spec else 0, fit[1] if fit else None, seen, claimed,
                          generation, now, blocked, self.dead.why)
        hold, self.claims = refill_hold(self.claims, claimed_names,
                                        LABEL_SWEEP in (pool["metadata"].get("labels") or {}),
                                        time.monotonic())
        hold = max(hold, failed)
        for pod in decision.delete:
            await asyncio.to_thread(kube.delete_unclaimed, self.namespace, pod.name,
                                    pod.resource_version)
        status = decision.status.model_dump(by_alias=True, mode="json")
        if decision.create and hold > 0:  # the Sweep may want one less: see first
            return min(hold, await self.write(status))
        if decision.create and fit is not None and spec is not None:
            await self.prepare_namespace()
            manifest = build_warm_pod(pool, spec.task_ref.name, fit[0], fit[1])
            for _ in range(decision.create):
                await asyncio.to_thread(kube.create_pod, manifest)
        return await self.write(status)

    async def pod_spec(self, pool: dict[str, Any]) -> tuple[dict[str, Any], str] | str:
        """The pool's pod spec and key, or why there is none now (the task is missing or not
        ready, its image not built, a docker-compose task). Planned again when the pool or
        its task changed, at most every few seconds otherwise."""
        trial = pool_trial(pool)
        spec = TrialSpec.model_validate(known_fields(TrialSpec, trial["spec"]))
        try:
            task = await asyncio.to_thread(load_task_by_name, self.namespace,
                                           spec.task_ref.name)
        except TaskUnavailable as e:
            return f"{e.reason}: {e.message}"
        ident = (pool["metadata"].get("generation"), task.digest)
        if self.fit is not None and self.fit[0] == ident and time.monotonic() - self.fit_at < 60:
            return self.fit[1], self.fit[2]
        try:
            check_runnable(task, spec, self.settings.scheduling)
            decision = await asyncio.to_thread(image_builds.trial_decision, self.namespace,
                                               spec.task_ref.name, task,
                                               spec.environment.image is not None)
            if isinstance(decision, ImagesFailed):
                return f"{decision.reason}: {decision.message}"
            if not isinstance(decision, ImagesReady):
                return f"waiting for the task's image: {decision.message}"
            network = await asyncio.to_thread(config.cluster_network_settings,
                                              self.settings.network)
            nodes = node_capacities(await asyncio.to_thread(kube_nodes.allocatable))
            entrypoints = await asyncio.to_thread(
                image_configs.entrypoints, start_images(task, spec, decision.refs, network))
            plan = build_plan(task, spec, self.settings.task_env, network,
                              self.settings.scheduling, self.settings.agent_bundle_repository,
                              decision.refs, nodes, entrypoints)
        except PlanError as e:
            return f"{e.reason}: {e.message}"
        if not claims_warm_pod(plan, {}, False):
            return "docker-compose tasks have no warm pods"
        pod_spec, key = pod_spec_for(trial, plan, self.settings)
        self.fit, self.fit_at = (ident, pod_spec, key), time.monotonic()
        self.network = network
        return pod_spec, key

    async def prepare_namespace(self) -> None:
        """Before a pool's first pod: the runner ConfigMap it mounts, and the namespace's
        deny-all for trial pods (which holds the unclaimed pods)."""
        await asyncio.to_thread(objects.ensure_configmap_once,
                                build_runner_configmap(self.namespace))
        await asyncio.to_thread(ensure_runner, self.settings, self.namespace)
        await asyncio.to_thread(kube_network.ensure_namespace_baseline,
                                build_namespace_baseline(self.namespace, self.network))

    async def write(self, status: dict[str, Any]) -> float:
        """The status, when it changed (the condition's time aside): a transition of its
        condition at once, its counts alone at most every STATUS_SEC (a sweep's pool changes
        with every claim). The seconds until the next pass."""
        def essence(s: dict[str, Any] | None) -> Any:
            if s is None:
                return None
            conds = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                     for c in s.get("conditions") or []]
            return {**s, "conditions": conds}
        before = self.written if self.written is not None else self.body.get("status")
        if essence(before) == essence(status):
            return IDLE_WAIT
        since = time.monotonic() - self.written_at
        if not material((before or {}).get("conditions"), status.get("conditions")) and (
                since < STATUS_SEC):
            return STATUS_SEC - since
        await asyncio.to_thread(objects.patch_status, "warmpools", self.namespace, self.name,
                                status)
        self.written, self.written_at = status, time.monotonic()
        return IDLE_WAIT
