"""Resolution rules of docs/harbor.md §a.5: verifier mode and environment, per-step settings,
timeouts."""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from shipyard.taskformat.artifacts import ArtifactConfig, collection_set
from shipyard.taskformat.environment import EnvironmentConfig, HealthcheckConfig
from shipyard.taskformat.models import MinReward, StepConfig, TaskConfig, VerifierCollectConfig

VerifierMode = Literal["shared", "separate"]
_T = TypeVar("_T")


def _step(config: TaskConfig, step: str | None) -> StepConfig | None:
    return None if step is None else config.step(step)


def resolve_verifier_mode(config: TaskConfig, step: str | None = None) -> VerifierMode:
    """Explicit ``environment_mode``, else ``separate`` if a verifier environment is defined,
    else ``shared``; a step's own settings come before the task's."""
    step_config = _step(config, step)
    if step_config is not None:
        if step_config.verifier.environment_mode is not None:
            return step_config.verifier.environment_mode
        if step_config.verifier.environment is not None:
            return "separate"
    if config.verifier.environment_mode is not None:
        return config.verifier.environment_mode
    return "separate" if config.verifier.environment is not None else "shared"


def verifier_environment_config(
    config: TaskConfig, step: str | None = None
) -> tuple[EnvironmentConfig, bool]:
    """The configuration a separate verifier container is defined by, and whether it is the
    inherited ``[environment]`` (no verifier environment is declared for the step or task)."""
    step_config = _step(config, step)
    if step_config is not None and step_config.verifier.environment is not None:
        return step_config.verifier.environment, False
    if config.verifier.environment is not None:
        return config.verifier.environment, False
    return config.environment, True


@dataclass(frozen=True)
class VerifierEnvironment:
    """How a separate verifier container is built (Harbor `verifier_mode.py`)."""

    config: EnvironmentConfig
    """The definition, with ``docker_image`` and ``os`` resolved."""
    context_dir: str
    """The task directory it is built from or defined by: ``steps/<n>/tests/``, ``tests/`` or
    ``environment/``."""
    bundled_tests: bool
    """The image provides ``/tests`` itself, so tests are not uploaded at verify time."""
    inherits_environment: bool
    """No verifier environment is declared: a copy of ``[environment]`` is used."""


def resolve_verifier_environment(
    config: TaskConfig, files: Container[str], step: str | None = None
) -> VerifierEnvironment | None:
    """The separate verifier's environment for ``step`` (None when the verifier is shared).

    The image comes from the first candidate, the step's own (verifier environment,
    ``steps/<n>/tests/``) then the task's (``[verifier.environment]``, ``tests/``), that has a
    ``docker_image`` or a Dockerfile/docker-compose.yaml in its directory. Without one, the
    verifier is built like the agent environment from ``environment/`` and tests are uploaded.
    """
    if resolve_verifier_mode(config, step) == "shared":
        return None
    base, inherits = verifier_environment_config(config, step)
    step_config = _step(config, step)
    candidates = [(config.verifier.environment, "tests/")]
    if step_config is not None:
        candidates.insert(0, (step_config.verifier.environment, f"steps/{step}/tests/"))
    for environment, directory in candidates:
        if environment is not None and environment.docker_image:
            image = environment.docker_image
        elif f"{directory}Dockerfile" in files or f"{directory}docker-compose.yaml" in files:
            image = None
        else:
            continue
        definition = base.model_copy(update={"docker_image": image}, deep=True)
        return VerifierEnvironment(definition, directory, True, inherits)
    os = base.os if "os" in base.model_fields_set else config.environment.os
    definition = base.model_copy(
        update={"docker_image": config.environment.docker_image, "os": os}, deep=True
    )
    return VerifierEnvironment(definition, "environment/", False, inherits)


MAX_TIMEOUT_SEC = 365 * 24 * 3600.0
"""The longest timeout Shipyard holds: a year is beyond any trial, and what the task or a
multiplier asks beyond it (``timeout_sec = 1e308``, ``timeoutMultiplier: 1e308``) is held as a
year, so every timeout stays a finite whole number of seconds for the runner, Go and
Kubernetes' int64 fields. Harbor's own asyncio waits take any float."""


def held(seconds: float) -> float:
    """`seconds`, at most MAX_TIMEOUT_SEC."""
    return min(seconds, MAX_TIMEOUT_SEC)


def effective_timeout(
    base: float | None,
    *,
    override: float | None = None,
    max_timeout: float | None = None,
    multiplier: float = 1.0,
) -> float | None:
    """``min(override or base, max_timeout or inf) * multiplier``; None means no timeout.

    Harbor uses ``or``, so an override or maximum of 0 counts as unset.
    """
    timeout = override or base
    if timeout is None:
        return None
    return held(min(timeout, max_timeout or math.inf) * multiplier)


@dataclass(frozen=True)
class StepSettings:
    """What one step (or a single-step task) runs with, before run-level overrides."""

    step: str | None
    agent_timeout_sec: float | None
    """None means the agent has no timeout."""
    agent_user: str | int | None
    verifier_timeout_sec: float
    verifier_user: str | int | None
    verifier_env: dict[str, str]
    """Task env overlaid by step env, templates unresolved; run-level env goes on top."""
    verifier_mode: VerifierMode
    collect: list[VerifierCollectConfig]
    artifacts: list[ArtifactConfig]
    """The full collection set: convention entry, task, trial-level, then step artifacts."""
    healthcheck: HealthcheckConfig | None
    """The step's extra healthcheck; for a single-step task, ``[environment].healthcheck``."""
    min_reward: MinReward | None


def step_settings(
    config: TaskConfig,
    step: str | None,
    *,
    trial_artifacts: Sequence[str | ArtifactConfig] = (),
) -> StepSettings:
    """Resolve the per-step inheritance table of docs/harbor.md §a.5; ``step=None`` is the task
    level.

    Verifier timeout: Harbor reads ``steps.verifier.timeout_sec``, whose default is 600, and
    never falls back to ``[verifier].timeout_sec`` (`trial.py:953-963`). Shipyard keeps this
    quirk on purpose: a step's verifier timeout decides whether it gets a reward, and rewards
    must match Harbor's. `lint` warns about tasks that are affected by it.
    """
    step_config = _step(config, step)
    if step_config is None:
        verifier = config.verifier
        return StepSettings(
            step=None,
            agent_timeout_sec=config.agent.timeout_sec,
            agent_user=config.agent.user,
            verifier_timeout_sec=verifier.timeout_sec,
            verifier_user=verifier.user,
            verifier_env=dict(verifier.env),
            verifier_mode=resolve_verifier_mode(config),
            collect=list(verifier.collect),
            artifacts=collection_set([*config.artifacts, *trial_artifacts], config.environment.os),
            healthcheck=config.environment.healthcheck,
            min_reward=None,
        )
    agent, verifier = step_config.agent, step_config.verifier
    artifacts = [*config.artifacts, *trial_artifacts, *step_config.artifacts]
    return StepSettings(
        step=step,
        agent_timeout_sec=_first_set(agent.timeout_sec, config.agent.timeout_sec),
        agent_user=_first_set(agent.user, config.agent.user),
        verifier_timeout_sec=verifier.timeout_sec,
        verifier_user=_first_set(verifier.user, config.verifier.user),
        verifier_env={**config.verifier.env, **verifier.env},
        verifier_mode=resolve_verifier_mode(config, step),
        collect=[*config.verifier.collect, *verifier.collect],
        artifacts=collection_set(artifacts, config.environment.os),
        healthcheck=step_config.healthcheck,
        min_reward=step_config.min_reward,
    )


def _first_set(value: _T | None, fallback: _T | None) -> _T | None:
    return fallback if value is None else value
