"""Fuzzing (issue 13): task.toml and bundle inputs generated with hypothesis against the loader
and the planning the Task controller and the Trial driver do. Never a traceback: a bad input is
a TaskFormatError whose every error names its file (and the field when there is one), or a
PlanError with a reason."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.api.models import TrialSpec
from shipyard.plan.phases import PlanError, build_plan
from shipyard.taskformat import TaskFormatError, load_task_files

KEYS = {
    "": ["schema_version", "version", "source", "multi_step_reward_strategy", "bogus"],
    "agent": ["timeout_sec", "user", "network_mode", "allowed_hosts", "extra"],
    "verifier": ["timeout_sec", "user", "env", "environment_mode", "network_mode"],
    "environment": ["docker_image", "cpus", "memory_mb", "storage_mb", "memory", "storage",
                    "build_timeout_sec", "gpus", "gpu_types", "workdir", "os", "env",
                    "network_mode", "allowed_hosts"],
    "environment.healthcheck": ["command", "interval_sec", "timeout_sec", "retries",
                                "start_period_sec"],
    "solution": ["env"],
    "task": ["name", "version", "description"],
}

scalars = st.one_of(
    st.integers(min_value=-10**6, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(["public", "no-network", "allowlist", "linux", "windows", "root", "1000",
                     "1.4", "mean", "final", "10G", "org/name", "example.com", "10.0.0.0/8"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text("ABCXYZ_", min_size=1, max_size=5), scalars,
                                   max_size=2))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


@st.composite
def task_tomls(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for table, keys in KEYS.items():
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=4))
        if table and (chosen or draw(st.booleans())):
            lines.append(f"[{table}]")
        for key in chosen:
            lines.append(f"{key} = {_toml_value(draw(values))}")
    return "\n".join(lines) + "\n"


def _files(toml: str | bytes) -> dict[str, bytes]:
    return {
        "task.toml": toml if isinstance(toml, bytes) else toml.encode(),
        "instruction.md": b"Do it.\n",
        "tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": b"#!/bin/bash\ntrue\n",
    }


def _check(files: dict[str, bytes]) -> None:
    try:
        task = load_task_files(files, "fuzz")
    except TaskFormatError as e:
        assert e.errors, e
        for error in e.errors:
            assert error.file, error
            assert error.reason, error
        return
    for agent in ("nop", "oracle"):
        try:
            build_plan(task, TrialSpec.model_validate(
                {"taskRef": {"name": "fuzz"}, "agent": {"name": agent},
                 "environment": {"image": "img"}}), {})
        except PlanError as e:
            assert e.reason and e.message, e


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_tomls())
def test_generated_task_tomls_load_or_fail_naming_the_field(toml: str) -> None:
    _check(_files(toml))


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_task_toml_bytes_never_raise_anything_else(raw: bytes) -> None:
    _check(_files(raw))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(
    st.one_of(st.sampled_from(["task.toml", "instruction.md", "tests/test.sh",
                               "solution/solve.sh", "environment/Dockerfile",
                               "steps/a/instruction.md", "../escape", "/abs", "tests/"]),
              st.text(max_size=20)),
    st.binary(max_size=40), max_size=6))
def test_arbitrary_bundles_never_raise_anything_else(files: dict[str, bytes]) -> None:
    _check(files)
