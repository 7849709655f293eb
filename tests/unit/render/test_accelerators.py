"""GPUs and TPUs (docs/harbor.md §c.4 tables, §g.4 improvements) and trial-level pod overrides.

Golden files under `golden/` hold rendered scheduling fragments; regenerate with

    SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_accelerators.py

and review the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shipyard.plan.accelerators import (
    BOTH_FAMILIES,
    GKE_GPU_TYPE_MAP,
    GKE_TPU_TYPE_MAP,
    TPU_HOST_CHIPS,
    AcceleratorError,
    Accelerators,
    PodOverrides,
    gpu_label,
    resolve_accelerators,
    tpu_label,
)
from shipyard.render.accelerators import apply_scheduling, scheduling_fields
from shipyard.taskformat import EnvironmentConfig
from tests.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"


def env(**fields: Any) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate({"docker_image": "x", **fields})


def base_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t-env"},
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "resources": {"requests": {"cpu": "1"}}}]},
    }


def check_golden(name: str, obj: dict[str, Any]) -> None:
    path = GOLDEN / name
    text = (
        "# Rendered by tests/unit/render/test_accelerators.py; regenerate with\n"
        "# SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_accelerators.py\n"
        + yaml.safe_dump(obj, sort_keys=False)
    )
    assert_golden(path, text)


# ---------------------------------------------------------------- GPUs


@pytest.mark.parametrize(("alias", "label"), sorted(GKE_GPU_TYPE_MAP.items()))
def test_every_gpu_alias_renders_its_gke_label(alias: str, label: str) -> None:
    for spelling in (alias, alias.upper(), f" {alias} "):
        acc = resolve_accelerators(env(gpus=1, gpu_types=[spelling]))
        assert acc.gpu is not None and acc.gpu.accelerators == (label,)
    pod = apply_scheduling(base_pod(), resolve_accelerators(env(gpus=1, gpu_types=[alias])))
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "cloud.google.com/gke-accelerator",
                                            "operator": "In", "values": [label]}]}]


@pytest.mark.parametrize("label", sorted(set(GKE_GPU_TYPE_MAP.values())))
def test_canonical_gpu_labels_pass_through(label: str) -> None:
    assert gpu_label(label) == label
    assert gpu_label(label.upper()) == label


def test_unknown_gpu_type_is_refused_with_the_known_ones() -> None:
    with pytest.raises(AcceleratorError) as caught:
        resolve_accelerators(env(gpus=1, gpu_types=["l4", "V100"]))
    supported = ", ".join(sorted(set(GKE_GPU_TYPE_MAP) | set(GKE_GPU_TYPE_MAP.values())))
    assert caught.value.message == (
        f"GPU type 'V100' is not supported on GKE. Supported types: {supported}")
    assert caught.value.field == "environment.gpu_types"


def test_every_gpu_type_is_honoured_not_only_the_first() -> None:
    acc = resolve_accelerators(env(gpus=2, gpu_types=["h100", "nvidia-h100-80gb", "a100-80gb",
                                                      "L4"]))
    assert acc.gpu is not None
    assert acc.gpu.accelerators == ("nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4")
    check_golden("gpu-pod.yaml", apply_scheduling(base_pod(), acc))


def test_gpus_without_types_need_only_the_resource_and_toleration() -> None:
    pod = apply_scheduling(base_pod(), resolve_accelerators(env(gpus=1)))
    spec = pod["spec"]
    assert "affinity" not in spec and "nodeSelector" not in spec
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    resources = spec["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                         "limits": {"nvidia.com/gpu": "1"}}


def test_gpu_types_without_gpus_request_nothing() -> None:
    assert resolve_accelerators(env(gpus=0, gpu_types=["l4"])) == Accelerators()
    assert resolve_accelerators(env(gpu_types=["nonsense"])) == Accelerators()


# ---------------------------------------------------------------- TPUs


def _single_host_topology(label: str) -> str:
    return TPU_HOST_CHIPS[label][1]


@pytest.mark.parametrize(("alias", "label"), sorted(GKE_TPU_TYPE_MAP.items()))
def test_every_tpu_alias_renders_its_gke_selectors(alias: str, label: str) -> None:
    topology = _single_host_topology(label)
    acc = resolve_accelerators(env(tpu={"type": alias, "topology": topology}))
    assert acc.tpu is not None
    assert (acc.tpu.accelerator, acc.tpu.topology) == (label, topology)
    pod = apply_scheduling(base_pod(), acc)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": label,
                                    "cloud.google.com/gke-tpu-topology": topology}
    assert spec["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    chips = str(TPU_HOST_CHIPS[label][0])
    assert spec["containers"][0]["resources"]["limits"] == {"google.com/tpu": chips}
    assert spec["containers"][0]["resources"]["requests"]["google.com/tpu"] == chips


@pytest.mark.parametrize("label", sorted(set(GKE_TPU_TYPE_MAP.values())))
def test_canonical_tpu_labels_pass_through(label: str) -> None:
    assert tpu_label(label) == label


def test_harbor_verified_single_host_renders() -> None:
    for tpu, label, chips in (({"type": "v6e", "topology": "2x4"}, "tpu-v6e-slice", 8),
                              ({"type": "ironwood", "topology": "2x2x1"}, "tpu7x", 4),
                              ({"type": "v5e", "topology": "1x1"}, "tpu-v5-lite-podslice", 1)):
        acc = resolve_accelerators(env(tpu=tpu))
        assert acc.tpu is not None and (acc.tpu.accelerator, acc.tpu.chips) == (label, chips)
    check_golden("tpu-pod.yaml", apply_scheduling(
        base_pod(), resolve_accelerators(env(tpu={"type": "v6e", "topology": "2x4"}))))


@pytest.mark.parametrize(("tpu_type", "topology", "host"), [
    ("tpu-v5p-slice", "2x2x2", "4 chips, topology 2x2x1"),
    ("v4", "2x2x2", "4 chips, topology 2x2x1"),
    ("v5e", "4x4", "8 chips, topology 2x4"),
    ("trillium", "4x8", "8 chips, topology 2x4"),
    ("v7", "2x2x2", "4 chips, topology 2x2x1"),
    ("v3", "4x4", "4 chips, topology 2x2"),
])
def test_multi_host_topologies_are_refused_naming_the_host_size(
        tpu_type: str, topology: str, host: str) -> None:
    with pytest.raises(AcceleratorError) as caught:
        resolve_accelerators(env(tpu={"type": tpu_type, "topology": topology}))
    assert host in caught.value.message
    assert "multi-host" in caught.value.message
    assert caught.value.field == "environment.tpu.topology"


def test_unknown_tpu_type_is_refused_with_the_known_ones() -> None:
    with pytest.raises(AcceleratorError, match=r"TPU type 'v2' is not supported on GKE\. "
                                               r"Supported types: ironwood, tpu-v3-device"):
        resolve_accelerators(env(tpu={"type": "v2", "topology": "2x2"}))


def test_gpu_and_tpu_together_are_refused() -> None:
    with pytest.raises(AcceleratorError) as caught:
        resolve_accelerators(env(gpus=1, tpu={"type": "v6e", "topology": "2x2"}))
    assert caught.value.message == BOTH_FAMILIES


# ---------------------------------------------------------------- overrides


def test_trial_overrides_merge_into_the_pod() -> None:
    overrides = PodOverrides(
        node_selector={"pool": "eval", "cloud.google.com/gke-tpu-topology": "2x2"},
        tolerations=({"key": "dedicated", "operator": "Equal", "value": "eval",
                      "effect": "NoSchedule"},
                     {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}),
        priority_class_name="eval-low",
        runtime_class_name="gvisor",
    )
    acc = resolve_accelerators(env(tpu={"type": "v5e", "topology": "2x4"}))
    fields = scheduling_fields(acc, overrides)
    assert fields["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator":
                                      "tpu-v5-lite-podslice",
                                      "cloud.google.com/gke-tpu-topology": "2x2",
                                      "pool": "eval"}
    assert len(fields["tolerations"]) == 2  # the duplicate TPU toleration is kept once
    assert fields["priorityClassName"] == "eval-low"
    assert fields["runtimeClassName"] == "gvisor"
    check_golden("overrides-pod.yaml", apply_scheduling(base_pod(), Accelerators(), overrides))


def test_nothing_requested_leaves_the_pod_alone() -> None:
    assert apply_scheduling(base_pod(), Accelerators()) == base_pod()
