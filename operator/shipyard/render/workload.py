"""The Kueue Workload of one trial attempt, and the admission merged into a trial pod.

One Workload per attempt, owned by the Trial, with one pod set sized to the larger of the
trial's pods (the environment pod and each separate verifier pod, each with its sidecars and
accelerators): the pods of a trial run one after the other, so the quota they hold at once is
the largest of them. Kueue admits it once; the pods are created only then (the pattern of an
external framework, as Apache's Spark operator does), so a separate verifier never queues
again mid-trial.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Any

from shipyard.api.conventions import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    LABEL_COMPONENT,
    MANAGED_BY,
    Role,
    trial_selector,
)
from shipyard.plan.phases import TrialPlan
from shipyard.render.pod import Runner, build_trial_pod, owner_reference

POD_SET = "trial"
WORKLOAD_COMPONENT = "workload"
_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "Pi": 2**50, "Ei": 2**60}


def quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", "1e3") as a number."""
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)\s*", str(text))
    if match is None or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {text!r}")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def _format(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value(rounding='ROUND_CEILING'))}m"


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """What the scheduler counts for a pod: its containers' requests summed, at least each
    init container's (they run before, one at a time)."""
    spec = pod["spec"]
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = total.get(k, Decimal(0)) + quantity(v)
    for c in spec.get("initContainers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total.get(k, Decimal(0)), quantity(v))
    return total


def trial_pods(trial: dict[str, Any], plan: TrialPlan, probe_image: str | None,
               runner: Runner = None) -> list[dict[str, Any]]:
    """Every pod an attempt of the trial creates (names do not matter here), as the operator
    creates them (with the Go runner's init container when `runner` is its image)."""
    pods = [build_trial_pod(trial, plan, Role.ENV, None, "sizing", probe_image, runner)]
    for step in plan.steps:
        if step.verifier_pod is not None:
            pods.append(build_trial_pod(trial, plan, Role.VERIFIER, step.name, "sizing",
                                        probe_image, runner))
    return pods


def pod_set_template(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """One container asking for the largest amount of each resource any of the pods asks for,
    with the environment pod's scheduling constraints (accelerators: all pods share them)."""
    largest: dict[str, Decimal] = {}
    for pod in pods:
        for k, v in pod_requests(pod).items():
            largest[k] = max(largest.get(k, Decimal(0)), v)
    env = pods[0]["spec"]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "trial", "image": "trial",
                        "resources": {"requests": {k: _format(v) for k, v in
                                                   sorted(largest.items())}}}],
    }
    for key in ("nodeSelector", "affinity", "tolerations", "priorityClassName",
                "runtimeClassName"):
        if env.get(key):
            spec[key] = copy.deepcopy(env[key])
    return {"spec": spec}


def build_workload(trial: dict[str, Any], plan: TrialPlan, name: str, queue: str,
                   priority: tuple[str, int] | None, probe_image: str | None,
                   runner: Runner = None) -> dict[str, Any]:
    """`priority`: the WorkloadPriorityClass and its value (Kueue wants both on a Workload).
    `probe_image`, `runner`: the operator's, so the pod set is sized to the pods made."""
    meta = trial["metadata"]
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": POD_SET, "count": 1,
                     "template": pod_set_template(trial_pods(trial, plan, probe_image,
                                                             runner))}],
    }
    if priority is not None:
        spec["priorityClassRef"] = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass",
                                    "name": priority[0]}
        spec["priority"] = priority[1]
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**MANAGED_BY, **trial_selector(meta["name"]),
                       LABEL_COMPONENT: WORKLOAD_COMPONENT},
            "ownerReferences": [owner_reference(trial)],
        },
        "spec": spec,
    }


def admit_pod(pod: dict[str, Any], node_labels: dict[str, str], tolerations: list[dict],
              updates: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of a trial pod with the admitted flavors' node labels and tolerations and the
    admission checks' `podSetUpdates` merged in (what Kueue's own integrations do)."""
    pod = copy.deepcopy(pod)
    spec, meta = pod["spec"], pod["metadata"]
    selector = {**node_labels}
    tols = list(tolerations)
    for update in updates:
        meta.setdefault("labels", {}).update(update.get("labels") or {})
        meta.setdefault("annotations", {}).update(update.get("annotations") or {})
        selector.update(update.get("nodeSelector") or {})
        tols += update.get("tolerations") or []
    if selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
    have = spec.get("tolerations") or []
    extra = [t for t in tols if t not in have]
    if extra:
        spec["tolerations"] = [*have, *extra]
    return pod
