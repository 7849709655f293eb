"""``${VAR}`` and ``${VAR:-default}`` in env tables."""

from __future__ import annotations

import pytest

from shipyard.taskformat import resolve_env_templates


def test_resolution() -> None:
    env = {
        "PLAIN": "value",
        "FROM_HOST": "${TOKEN}",
        "DEFAULTED": "${MISSING:-fallback}",
        "EMPTY_DEFAULT": "${MISSING:-}",
        "SET_WINS": "${TOKEN:-fallback}",
        "EMBEDDED": "Bearer ${TOKEN}",
    }
    assert resolve_env_templates(env, {"TOKEN": "t0k"}) == {
        "PLAIN": "value",
        "FROM_HOST": "t0k",
        "DEFAULTED": "fallback",
        "EMPTY_DEFAULT": "",
        "SET_WINS": "t0k",
        "EMBEDDED": "Bearer ${TOKEN}",
    }


def test_empty_host_value_counts_as_set() -> None:
    assert resolve_env_templates({"A": "${A:-d}"}, {"A": ""}) == {"A": ""}


def test_missing_variable() -> None:
    with pytest.raises(ValueError) as info:
        resolve_env_templates({"KEY": "${API_KEY}"}, {})
    assert str(info.value) == "Environment variable 'API_KEY' not found in host environment"


@pytest.mark.parametrize(("table", "value", "problem"), [
    ("environment.env", "x" * (128 * 1024 - 2), "131,073 bytes with its name"),
    ("verifier.env", "a\\u0000b", "holds a NUL byte"),
    ("solution.env", "a\\u0000b", "holds a NUL byte"),
])
def test_env_values_no_process_can_hold_are_refused_naming_the_table(
        table: str, value: str, problem: str) -> None:
    """Past MAX_ARG_STRLEN with its name, or with a NUL byte: no process starts with it."""
    from shipyard.taskformat import TaskFormatError, load_task_config

    section = table.rsplit(".", 1)[0]
    with pytest.raises(TaskFormatError) as caught:
        load_task_config(f'[{section}.env]\nV = "{value}"\n', "task.toml")
    (error,) = caught.value.errors
    assert error.field.startswith(table) and problem in error.reason, error
    load_task_config(f'[{section}.env]\nV = "{"x" * (128 * 1024 - 3)}"\n', "task.toml")


def test_a_trials_env_var_no_process_can_hold_is_refused() -> None:
    from pydantic import ValidationError

    from shipyard.api.models import EnvVar

    assert EnvVar(name="A", value="x" * (128 * 1024 - 3)).value
    for value in ("x" * (128 * 1024 - 2), "a\0b"):
        with pytest.raises(ValidationError):
            EnvVar(name="A", value=value)


def test_a_phase_whose_task_and_trial_env_together_could_not_start_is_refused_before_a_pod(
        ) -> None:
    from shipyard.api.reasons import Reason
    from shipyard.plan.phases import PlanError
    from tests.unit.helpers import HELLO_TOML, plan_for, task

    half = "".join(f'E{i} = "{"e" * (100 * 1024)}"\n' for i in range(6))
    loaded = task(HELLO_TOML + f"\n[environment.env]\n{half}")
    plan_for(loaded)  # 600 KiB: it fits
    big = [{"name": f"A{i}", "value": "a" * (100 * 1024)} for i in range(5)]
    with pytest.raises(PlanError) as caught:
        plan_for(loaded, agent={"name": "oracle", "env": big})
    assert caught.value.reason == Reason.TRIAL_INVALID
    assert "agent phase: the task's env tables and the Trial's env: 12 variables" in str(
        caught.value), caught.value
    # Within task.toml's own 1 MiB: many short variables, each with its pointer and NUL.
    many = "".join(f'V{i:05} = ""\n' for i in range(75_000))
    with pytest.raises(PlanError) as caught:
        plan_for(task(HELLO_TOML + f"\n[solution.env]\n{many}"))
    assert caught.value.reason == Reason.TASK_INVALID
    assert "agent phase: the task's env tables: 75,001 variables" in str(caught.value)
