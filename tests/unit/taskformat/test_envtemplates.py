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
