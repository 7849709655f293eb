"""The ``task.toml`` model, field for field as Harbor 0.25 (`models/task/config.py`).

Unknown keys are ignored like Harbor does (pydantic's default); `lint.unknown_keys` lists them.
Field order follows Harbor's, so that dumps compare key by key.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from shipyard.taskformat.artifacts import (
    ArtifactConfig,
    check_artifact_source,
    validate_compose_service,
)
from shipyard.taskformat.documents import load_toml
from shipyard.taskformat.environment import (
    EnvironmentConfig,
    HealthcheckConfig,
    PhaseNetworkPolicyConfig,
    PositiveSeconds,
)
from shipyard.taskformat.envtemplates import EnvTable
from shipyard.taskformat.errors import (
    FieldValueError,
    from_validation_error,
    union_tag,
)
from shipyard.taskformat.stepnames import step_name_key, validate_step_name

_PACKAGE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")


def _one_union_error(value: Any, handler: Any) -> Any:
    """Validate ``str | int`` as Harbor does, but report one error rather than one per member."""
    try:
        return handler(value)
    except ValidationError:
        raise PydanticCustomError(
            "user_type", "Input should be a valid string or integer"
        ) from None


User = Annotated[str | int | None, WrapValidator(_one_union_error)]
"""A user name or UID; None means the container's default user."""

_PATH, _TABLE = union_tag("path"), union_tag("table")

ArtifactEntry = Annotated[
    Annotated[str, AfterValidator(check_artifact_source), Tag(_PATH)]
    | Annotated[ArtifactConfig, Tag(_TABLE)],
    Discriminator(lambda v: _PATH if isinstance(v, str) else _TABLE),
]
"""An artifact as written: a plain source path, or a table."""

_SCALAR, _KEYED = union_tag("scalar"), union_tag("keyed")

MinReward = Annotated[
    Annotated[float, Tag(_SCALAR)] | Annotated[dict[str, float], Tag(_KEYED)],
    Discriminator(lambda v: _KEYED if isinstance(v, dict) else _SCALAR),
]
"""A threshold on the ``reward`` key, or one threshold per reward key."""


class Author(BaseModel):
    name: str
    email: str | None = None


class PackageInfo(BaseModel):
    """``[task]``: the registry identity."""

    name: str
    version: str | None = Field(default=None, min_length=1)
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _PACKAGE_NAME.match(value) or ".." in value:
            raise ValueError(
                "Package name must be in 'org/name' format with alphanumeric characters, "
                "hyphens, underscores, and dots. Cannot start with a dot or contain '..'. "
                f"Got: {value}"
            )
        return value

    @property
    def short_name(self) -> str:
        return self.name.split("/")[1]


class SolutionConfig(BaseModel):
    """``[solution]``: env for the oracle's solve script (``${VAR}`` templates allowed)."""

    env: EnvTable = Field(default_factory=dict)


class AgentConfig(PhaseNetworkPolicyConfig):
    """``[agent]`` and ``[steps.agent]``."""

    timeout_sec: PositiveSeconds | None = None
    user: User = None


class VerifierCollectConfig(BaseModel):
    """``[[verifier.collect]]``: a best-effort snapshot command run before artifact collection."""

    command: str
    service: str = "main"
    timeout_sec: PositiveSeconds = 60.0
    user: User = None

    @field_validator("service")
    @classmethod
    def _check_service(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("Collect hook service must not be empty.")
        return validate_compose_service(value)


class VerifierConfig(PhaseNetworkPolicyConfig):
    """``[verifier]`` and ``[steps.verifier]``."""

    timeout_sec: PositiveSeconds = 600.0
    env: EnvTable = Field(default_factory=dict)
    user: User = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentConfig | None = None
    collect: list[VerifierCollectConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_mode(self) -> VerifierConfig:
        if self.environment_mode == "shared" and self.environment is not None:
            raise FieldValueError(
                "[verifier].environment_mode='shared' is incompatible with "
                "[verifier.environment]; either omit the environment or set "
                "environment_mode='separate'.",
                "environment_mode",
            )
        return self


class StepConfig(BaseModel):
    """One ``[[steps]]`` entry; its directory is ``steps/<name>/``."""

    name: str
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    min_reward: MinReward | None = None
    healthcheck: HealthcheckConfig | None = None
    artifacts: list[ArtifactEntry] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return validate_step_name(value)


class TaskConfig(BaseModel):
    """The whole ``task.toml``."""

    schema_version: str = "1.4"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepConfig] | None = None
    artifacts: list[ArtifactEntry] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _rename_version(cls, data: Any) -> Any:
        """The legacy root key ``version`` is ``schema_version``."""
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        return data

    @field_validator("steps")
    @classmethod
    def _check_unique_step_names(cls, steps: list[StepConfig] | None) -> list[StepConfig] | None:
        seen: set[str] = set()
        for index, step in enumerate(steps or []):
            key = step_name_key(step.name)
            if key in seen:
                raise FieldValueError(
                    "Step names must be unique, including case and Unicode normalization "
                    f"variants: {step.name!r}",
                    index,
                    "name",
                )
            seen.add(key)
        return steps

    @model_validator(mode="after")
    def _apply_allow_internet(self) -> TaskConfig:
        """Legacy ``allow_internet`` sets a baseline ``network_mode`` the task left unset."""
        environments = [self.environment, self.verifier.environment]
        environments += [step.verifier.environment for step in self.steps or []]
        for environment in environments:
            if environment is None or environment.allow_internet is None:
                continue
            if "network_mode" not in environment.model_fields_set and (
                environment.allowed_hosts is None
            ):
                environment.network_mode = "public" if environment.allow_internet else "no-network"
            environment.allow_internet = None
        return self

    @property
    def is_multi_step(self) -> bool:
        return bool(self.steps)

    @property
    def reward_strategy(self) -> Literal["mean", "final"] | None:
        """The effective multi-step strategy: unset means mean; None for single-step tasks."""
        if not self.is_multi_step:
            return None
        return self.multi_step_reward_strategy or "mean"

    def step(self, name: str) -> StepConfig:
        """The ``[[steps]]`` entry called ``name``; ValueError for an unknown step."""
        for step in self.steps or []:
            if step.name == name:
                return step
        raise ValueError(f"Unknown step {name!r}")


def parse_toml(text: str, file: str = "task.toml") -> dict[str, Any]:
    return load_toml(text, file)


def load_task_config(text: str, file: str = "task.toml") -> TaskConfig:
    """Parse and validate task.toml text; every problem becomes a `TaskFormatError`."""
    data = parse_toml(text, file)
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file) from None


def task_config_json(config: TaskConfig) -> dict[str, Any]:
    """Harbor's resolved configuration as JSON data (``model_dump(mode="json")``).

    Every field is present with its default filled in; ``allow_internet`` is never dumped.
    """
    return config.model_dump(mode="json")
