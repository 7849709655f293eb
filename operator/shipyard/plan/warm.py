"""Warm pods (`docs/warm-pods.md`): which trials claim one, how many a Sweep keeps, and the
Trial a WarmPool renders its pods for.

A warm pod is a trial's environment pod made before its trial: the same spec, less what is
per trial (the agent's Secret volumes; labels, owner and network label come at the claim). It
is created for exactly one trial, never reused, and deleted with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shipyard.api.conventions import (
    LABEL_QUEUE_NAME,
    LABEL_SWEEP,
    MANAGED_BY,
    label_value,
    warm_pool_name,
)
from shipyard.api.models import API_VERSION
from shipyard.api.sweep import SweepSpec
from shipyard.plan.phases import TrialPlan
from shipyard.plan.sweep import Slot, kueue_labels, owner_reference, trial_body


def claims_warm_pod(plan: TrialPlan, labels: Mapping[str, str], kueue_admitted: bool) -> bool:
    """Does this trial look for a warm pod before it creates its environment pod? Not when
    Kueue admits it (a warm pod runs before any admission: Kueue's quota would not hold), nor
    for docker-compose tasks (their sidecars start with the pod, per task and not shared)."""
    if kueue_admitted or LABEL_QUEUE_NAME in labels:
        return False
    return plan.environment.compose is None


def sweep_warm_target(parallelism: int | None, unstarted: int, cap: int, ahead: int = 1) -> int:
    """How many warm pods a Sweep keeps of one task: `ahead` per trial slot (its parallelism),
    never more than the task's trials that have no pod yet (so every pod made is claimed),
    nor `cap`. More than one per slot keeps the node starting pods while the slots' trials
    run: a pod's start is latency more than CPU, and a trivial trial is over before the
    pod that replaces its warm one is up (bench/README.md, "Warm pods")."""
    if cap <= 0 or unstarted <= 0:
        return 0
    slots = parallelism * max(1, ahead) if parallelism and parallelism > 0 else cap
    return min(cap, unstarted, slots)


def pool_trial(pool: Mapping[str, Any]) -> dict[str, Any]:
    """The Trial a WarmPool's pods are rendered for: the pool's task, agent, environment and
    pod settings, under the pool's name (which no pod spec carries)."""
    meta, spec = pool.get("metadata") or {}, pool.get("spec") or {}
    trial_spec = {"agent": {"name": "nop"},  # the pool's default: no solution needed
                  **{k: spec[k] for k in ("taskRef", "agent", "environment", "pod") if k in spec}}
    return {"apiVersion": pool.get("apiVersion"), "kind": "Trial",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "uid": meta.get("uid") or ""},
            "spec": trial_spec}


def sweep_pools(sweep: Mapping[str, Any], spec: SweepSpec, slots: Sequence[Slot],
                unstarted: Mapping[str, list[Slot]], cap: int, ahead: int = 1
                ) -> dict[str, dict[str, Any]]:
    """The WarmPools a Sweep keeps, by name: one per task with trials left to start (`unstarted`:
    its slots whose Trial is not created or not running yet), sized by `sweep_warm_target`
    (`ahead` pods per slot), for the agent of its next slot (a trial of another agent whose pod
    differs starts cold).
    None while the Sweep is suspended or Kueue admits its trials (`claims_warm_pod`)."""
    if spec.suspend or kueue_labels(sweep) or cap <= 0:
        return {}
    name, pools = sweep["metadata"]["name"], {}
    for task, waiting in unstarted.items():
        per_task = spec.per_task_parallelism
        parallelism = min(spec.parallelism, per_task) if per_task else spec.parallelism
        replicas = sweep_warm_target(parallelism, len(waiting), cap, ahead)
        if replicas <= 0:
            continue
        trial = trial_body(sweep, spec, waiting[0])["spec"]
        pool = warm_pool_name(name, task)
        pools[pool] = {
            "apiVersion": API_VERSION, "kind": "WarmPool",
            "metadata": {"name": pool, "namespace": sweep["metadata"].get("namespace"),
                         "labels": {**MANAGED_BY, LABEL_SWEEP: label_value(name)},
                         "ownerReferences": [owner_reference(sweep)]},
            "spec": {"replicas": replicas,
                     **{k: trial[k] for k in ("taskRef", "agent", "environment", "pod")
                        if k in trial}},
        }
    return pools
