"""Accelerator requests and trial-level scheduling settings, applied to a rendered pod."""

from __future__ import annotations

import copy
from typing import Any

from shipyard.plan.accelerators import (
    GKE_ACCELERATOR_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    GPU_RESOURCE,
    NO_OVERRIDES,
    TPU_RESOURCE,
    Accelerators,
    PodOverrides,
)
from shipyard.plan.capacity import cpu_request_millis, format_cpu, parse_cpu

GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
TPU_TOLERATION = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def accelerator_resources(accelerators: Accelerators) -> dict[str, str]:
    """The extended resources to request and limit (they must be equal for GPUs/TPUs)."""
    if accelerators.gpu is not None:
        return {GPU_RESOURCE: str(accelerators.gpu.count)}
    if accelerators.tpu is not None:
        return {TPU_RESOURCE: str(accelerators.tpu.chips)}
    return {}


def scheduling_fields(accelerators: Accelerators, overrides: PodOverrides = NO_OVERRIDES
                      ) -> dict[str, Any]:
    """The pod spec fields for `accelerators` and `overrides`: nodeSelector, affinity,
    tolerations, priorityClassName, runtimeClassName (only those that are set)."""
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    gpu, tpu = accelerators.gpu, accelerators.tpu
    if gpu is not None:
        tolerations.append(dict(GPU_TOLERATION))
        if gpu.accelerators:
            fields["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": GKE_ACCELERATOR_LABEL,
                                        "operator": "In",
                                        "values": list(gpu.accelerators),
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
    if tpu is not None:
        tolerations.append(dict(TPU_TOLERATION))
        node_selector[GKE_TPU_ACCELERATOR_LABEL] = tpu.accelerator
        node_selector[GKE_TPU_TOPOLOGY_LABEL] = tpu.topology
    node_selector.update(overrides.node_selector)
    for toleration in overrides.tolerations:
        if toleration not in tolerations:
            tolerations.append(dict(toleration))
    if node_selector:
        fields["nodeSelector"] = node_selector
    if tolerations:
        fields["tolerations"] = tolerations
    if overrides.priority_class_name:
        fields["priorityClassName"] = overrides.priority_class_name
    if overrides.runtime_class_name:
        fields["runtimeClassName"] = overrides.runtime_class_name
    if overrides.image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": n} for n in overrides.image_pull_secrets]
    return fields


def apply_scheduling(pod: dict[str, Any], accelerators: Accelerators,
                     overrides: PodOverrides = NO_OVERRIDES) -> dict[str, Any]:
    """A copy of `pod` with the accelerator resources on its `main` container and the
    scheduling fields on its spec."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    main = next(c for c in spec["containers"] if c["name"] == "main")
    declared_cpu = parse_cpu(((main.get("resources") or {}).get("limits") or {}).get("cpu"))
    if declared_cpu is not None:  # the request is the operator's share of the declared limit
        main["resources"]["requests"]["cpu"] = format_cpu(
            cpu_request_millis(declared_cpu / 1000, overrides))
    if overrides.default_requests:  # operator-wide requests where the task sets none
        requests = main.setdefault("resources", {}).setdefault("requests", {})
        for key, value in overrides.default_requests.items():
            requests.setdefault(key, value)
    extra = accelerator_resources(accelerators)
    if extra:
        resources = main.setdefault("resources", {})
        resources.setdefault("requests", {}).update(extra)
        resources.setdefault("limits", {}).update(extra)
    spec.update(scheduling_fields(accelerators, overrides))
    return pod
