"""Accelerators, pod overrides and the Unschedulable grace as `build_plan` resolves them."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from shipyard.api.models import TrialSpec
from shipyard.plan.accelerators import PodOverrides, SchedulingSettings
from shipyard.plan.phases import PlanError, TrialPlan, build_plan
from shipyard.taskformat import load_task_files

BASE = """\
[environment]
docker_image = "debian:bookworm"
"""


def plan(toml: str, environ: dict[str, str] | None = None, **spec: Any) -> TrialPlan:
    """`environ`: the operator's environment (scheduling settings)."""
    files = {"task.toml": textwrap.dedent(toml), "instruction.md": "x\n",
             "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
             "solution/solve.sh": "#!/bin/bash\ntrue\n"}
    loaded = load_task_files({k: v.encode() for k, v in files.items()}, name="t")
    trial = TrialSpec.model_validate({"taskRef": {"name": "t"}, **spec})
    return build_plan(loaded, trial, {}, None, SchedulingSettings.from_env(environ or {}))


def test_gpus_with_every_type_reach_the_pod_plan() -> None:
    p = plan(BASE + 'gpus = 2\ngpu_types = ["h100", "a100-80gb"]\n')
    gpu = p.environment.accelerators.gpu
    assert gpu is not None and gpu.count == 2
    assert gpu.accelerators == ("nvidia-h100-80gb", "nvidia-a100-80gb")


def test_unknown_gpu_type_is_task_invalid_naming_the_field() -> None:
    with pytest.raises(PlanError) as caught:
        plan(BASE + 'gpus = 1\ngpu_types = ["v100"]\n')
    assert caught.value.reason == "TaskInvalid"
    assert caught.value.message.startswith("environment.gpu_types: GPU type 'v100' is not "
                                           "supported on GKE. Supported types: a100, ")


def test_multi_host_tpu_is_refused_at_admission() -> None:
    with pytest.raises(PlanError) as caught:
        plan(BASE + 'tpu = { type = "tpu-v5p-slice", topology = "2x2x2" }\n')
    assert caught.value.reason == "TaskInvalid"
    assert "environment.tpu.topology" in caught.value.message
    assert "4 chips, topology 2x2x1" in caught.value.message


def test_separate_verifier_accelerators_are_its_own() -> None:
    toml = BASE + 'gpus = 1\n[verifier.environment]\ndocker_image = "v"\n'
    p = plan(toml)
    (step,) = p.steps
    assert step.verifier_pod is not None and not step.verifier_pod.accelerators.requested
    assert p.environment.accelerators.requested


def test_unschedulable_grace_defaults_settings_and_override() -> None:
    assert plan(BASE).unschedulable_grace_sec == 30
    assert plan(BASE + "gpus = 1\n").unschedulable_grace_sec == 600
    assert plan(BASE, {"SHIPYARD_UNSCHEDULABLE_GRACE_SEC": "5"}).unschedulable_grace_sec == 5
    env = {"SHIPYARD_ACCELERATOR_UNSCHEDULABLE_GRACE_SEC": "900"}
    assert plan(BASE + "gpus = 1\n", env).unschedulable_grace_sec == 900
    assert plan(BASE + "gpus = 1\n",
                environment={"unschedulableGraceSec": 12}).unschedulable_grace_sec == 12
    with pytest.raises(ValueError, match="not a number"):
        plan(BASE, {"SHIPYARD_UNSCHEDULABLE_GRACE_SEC": "soon"})


def test_pod_overrides_come_from_the_trial() -> None:
    p = plan(BASE, pod={"nodeSelector": {"pool": "eval"},
                        "tolerations": [{"key": "dedicated", "operator": "Equal",
                                         "value": "eval", "effect": "NoSchedule"}],
                        "priorityClassName": "low", "runtimeClassName": "gvisor"})
    o = p.pod_overrides
    assert o.node_selector == {"pool": "eval"}
    assert o.tolerations == ({"key": "dedicated", "operator": "Equal", "value": "eval",
                              "effect": "NoSchedule"},)
    assert (o.priority_class_name, o.runtime_class_name) == ("low", "gvisor")


def test_operator_pod_defaults_sit_under_the_trial_settings() -> None:
    environ = {
        "SHIPYARD_TRIAL_NODE_SELECTOR": '{"pool": "default", "zone": "a"}',
        "SHIPYARD_TRIAL_TOLERATIONS": '[{"key": "shared", "operator": "Exists"}]',
        "SHIPYARD_TRIAL_RUNTIME_CLASS": "gvisor",
    }
    o = plan(BASE, environ, pod={"nodeSelector": {"pool": "eval"},
                                 "tolerations": [{"key": "mine", "operator": "Exists"}]}
             ).pod_overrides
    assert o.node_selector == {"pool": "eval", "zone": "a"}
    assert o.tolerations == ({"key": "shared", "operator": "Exists"},
                             {"key": "mine", "operator": "Exists"})
    assert o.runtime_class_name == "gvisor"
    assert plan(BASE, environ, pod={"runtimeClassName": "kata"}).pod_overrides \
        .runtime_class_name == "kata"
    # What the Helm chart passes for empty values.
    empty = {"SHIPYARD_TRIAL_NODE_SELECTOR": "{}", "SHIPYARD_TRIAL_TOLERATIONS": "[]",
             "SHIPYARD_TRIAL_RUNTIME_CLASS": ""}
    assert plan(BASE, empty).pod_overrides == PodOverrides()
    with pytest.raises(ValueError, match="SHIPYARD_TRIAL_NODE_SELECTOR"):
        plan(BASE, {"SHIPYARD_TRIAL_NODE_SELECTOR": '["x"]'})


def test_image_pull_secrets_from_the_operator_and_the_trial() -> None:
    from shipyard.render.accelerators import scheduling_fields

    environ = {"SHIPYARD_IMAGE_PULL_SECRETS": "registry-a, shared"}
    o = plan(BASE, environ, pod={"imagePullSecrets": [{"name": "mine"}, {"name": "shared"}]}
             ).pod_overrides
    assert o.image_pull_secrets == ("registry-a", "shared", "mine")
    fields = scheduling_fields(plan(BASE, {}).environment.accelerators, o)
    assert fields["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "shared"},
                                          {"name": "mine"}]
    assert "imagePullSecrets" not in scheduling_fields(
        plan(BASE, {}).environment.accelerators, plan(BASE, {}).pod_overrides)
