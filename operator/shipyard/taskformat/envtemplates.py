"""``${VAR}`` / ``${VAR:-default}`` values in env tables (Harbor `utils/env.resolve_env_vars`).

The loader keeps templates as written; the caller resolves them against the environment of
whatever plays Harbor's orchestrator host (for Shipyard, the operator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator

# Like Harbor, only a value that is entirely one template is resolved; text around a
# template (``"Bearer ${TOKEN}"``) leaves the value as it is.
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}", re.DOTALL)


class MissingEnvVar(ValueError):
    """Harbor's message; ``key`` is the env table's entry, ``name`` the variable it needs."""

    def __init__(self, key: str, name: str) -> None:
        super().__init__(f"Environment variable '{name}' not found in host environment")
        self.key, self.name = key, name


def resolve_env_templates(mapping: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Resolve templated values from ``environ``; a missing variable without default raises."""
    resolved = {}
    for key, value in mapping.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            resolved[key] = value
            continue
        name, default = match.group(1), match.group(2)
        if name in environ:
            resolved[key] = environ[name]
        elif default is not None:
            resolved[key] = default
        else:
            raise MissingEnvVar(key, name)
    return resolved


MAX_ENV_VAR_BYTES = 128 * 1024
"""What Linux lets one `NAME=value` of a process's environment hold (MAX_ARG_STRLEN, with its
NUL): past it no process starts (`argument list too long`)."""


def env_var_problem(name: str, value: str) -> str | None:
    """Why no process could be started with `name=value` in its environment (None: it can)."""
    if "\0" in value:
        return "holds a NUL byte, which no process's environment can hold"
    size = len(f"{name}={value}".encode()) + 1
    if size > MAX_ENV_VAR_BYTES:
        return (f"{size:,} bytes with its name: Linux lets one environment variable hold at "
                f"most {MAX_ENV_VAR_BYTES:,}, so no process could start with it")
    return None


MAX_ENV_TOTAL_BYTES = 1024 * 1024
"""Shipyard's bound on one phase's whole environment. Linux refuses to start a process whose
arguments and environment together pass a quarter of its stack limit (2 MiB under the usual
8 MiB `ulimit -s`), and the image's own ENV and the phase's command share that room."""


def env_bytes(env: Mapping[str, str]) -> int:
    """What `env` takes of a new process's room: each `NAME=value`, its NUL and its pointer."""
    return sum(len(f"{name}={value}".encode()) + 1 + 8 for name, value in env.items())


def env_total_problem(env: Mapping[str, str]) -> str | None:
    """Why a phase could not start with all of `env` (None: it can)."""
    size = env_bytes(env)
    if size <= MAX_ENV_TOTAL_BYTES:
        return None
    return (f"{len(env):,} variables take {size:,} bytes together: over {MAX_ENV_TOTAL_BYTES:,}, "
            "the most one phase's environment may take (Linux starts no process whose "
            "arguments and environment pass a quarter of its stack limit, 2 MiB under the "
            "usual 8 MiB, and the image's own ENV shares that room)")


def _startable(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if (problem := env_var_problem(name, value)) is not None:
            raise ValueError(f"{name}: {problem}")
    return env


EnvTable = Annotated[dict[str, str], AfterValidator(_startable)]
"""An env table of task.toml: each value one a process can be started with."""
