"""``[environment]`` and what it contains: network baseline, resources, TPU, healthcheck, MCP."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WrapValidator, field_validator, model_validator
from pydantic_core import PydanticCustomError

from shipyard.taskformat.envtemplates import EnvTable
from shipyard.taskformat.errors import FieldValueError
from shipyard.taskformat.network import (
    ONLY_WITH_ALLOWLIST,
    NetworkMode,
    NetworkPolicy,
    normalize_allowed_hosts,
)
from shipyard.taskformat.sizes import parse_size_to_mb

TaskOS = Literal["linux", "windows"]


def _check_network_fields(mode: NetworkMode | None, hosts: list[str] | None) -> None:
    if (mode is None and hosts is not None) or (mode not in (None, "allowlist") and hosts):
        raise FieldValueError(ONLY_WITH_ALLOWLIST, "allowed_hosts")


class _AllowedHostsMixin:
    """Normalizes ``allowed_hosts`` (a mixin, as in Harbor, so each model orders its fields)."""

    @field_validator("allowed_hosts")
    @classmethod
    def _normalize_hosts(cls, hosts: list[str] | None) -> list[str] | None:
        return None if hosts is None else normalize_allowed_hosts(hosts)


class PhaseNetworkPolicyConfig(_AllowedHostsMixin, BaseModel):
    """Network fields of [agent] and [verifier]: an explicit phase override when set."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _check_network(self) -> PhaseNetworkPolicyConfig:
        _check_network_fields(self.network_mode, self.allowed_hosts)
        return self

    def explicit_policy(self) -> NetworkPolicy | None:
        if self.network_mode is None:
            return None
        return NetworkPolicy(self.network_mode, tuple(self.allowed_hosts or ()))


class BaselineNetworkPolicyConfig(_AllowedHostsMixin, BaseModel):
    """Network fields of an environment: the policy in force when no phase overrides it."""

    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _check_network(self) -> BaselineNetworkPolicyConfig:
        _check_network_fields(self.network_mode, self.allowed_hosts)
        return self

    def baseline_policy(self) -> NetworkPolicy:
        return NetworkPolicy(self.network_mode, tuple(self.allowed_hosts or ()))


PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A timeout or interval: Shipyard refuses zero and negative ones up front (a zero agent
timeout would kill the agent at once and still record the verifier's reward)."""
PositiveInt = Annotated[int, Field(gt=0)]


class HealthcheckConfig(BaseModel):
    """Docker HEALTHCHECK semantics: the command must succeed before the phase goes on."""

    command: str
    interval_sec: PositiveSeconds = 5.0
    timeout_sec: PositiveSeconds = 30.0
    start_period_sec: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    start_interval_sec: PositiveSeconds = 5.0
    retries: PositiveInt = 3


_TOPOLOGY = re.compile(r"^[1-9]\d*(x[1-9]\d*)+$")


class TpuSpec(BaseModel):
    """One TPU slice per pod; ``type`` is an alias or a GKE label, resolved by the provider."""

    type: str = Field(min_length=1)
    topology: str

    @field_validator("topology")
    @classmethod
    def _check_topology(cls, value: str) -> str:
        clean = value.strip()
        if not _TOPOLOGY.match(clean):
            raise ValueError(
                f"Invalid TPU topology '{value}': expected dimensions separated by 'x' with "
                "each dimension a positive integer (e.g., '2x4', '2x2x1', '4x4')."
            )
        return clean

    @property
    def chip_count(self) -> int:
        """The per-pod ``google.com/tpu`` request: the product of the topology's dimensions."""
        return math.prod(int(axis) for axis in self.topology.split("x"))


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_CREDENTIAL_HEADER = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)
_CREDENTIAL_VALUE = re.compile(
    r"^(?:[A-Za-z][A-Za-z0-9._~+/-]*[ \t]+)?\$\{[A-Za-z_][A-Za-z0-9_]*\}$"
)


def _is_credential_header(name: str) -> bool:
    return bool(_CREDENTIAL_HEADER.search(name)) or name.lower() in ("cookie", "set-cookie")


class MCPServerConfig(BaseModel):
    """An MCP server offered to the agent."""

    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("transport", mode="before")
    @classmethod
    def _normalize_transport(cls, value: Any) -> Any:
        return "streamable-http" if value == "http" else value

    @model_validator(mode="after")
    def _check_transport(self) -> MCPServerConfig:
        if self.transport in ("sse", "streamable-http") and not self.url:
            raise FieldValueError(f"'url' is required for transport '{self.transport}'", "url")
        if self.transport == "stdio" and not self.command:
            raise FieldValueError("'command' is required for transport 'stdio'", "command")
        if self.headers and self.transport == "stdio":
            raise FieldValueError("'headers' is only supported for HTTP MCP transports", "headers")
        for name, value in self.headers.items():
            if not _HEADER_NAME.match(name):
                raise FieldValueError(f"Invalid MCP HTTP header name {name!r}", "headers", name)
            if "\r" in value or "\n" in value:
                raise FieldValueError(
                    f"MCP HTTP header {name!r} value must not contain CR or LF characters",
                    "headers",
                    name,
                )
            if _is_credential_header(name) and not _CREDENTIAL_VALUE.match(value):
                raise FieldValueError(
                    f"MCP HTTP header '{name}' must reference credentials as ${{VAR}} without "
                    "a default, such as 'Bearer ${TOKEN}'",
                    "headers",
                    name,
                )
        return self


def _finite_number(value: Any, handler: Any) -> Any:
    """``int | float`` as Harbor validates it, reported as one error instead of two."""
    try:
        number = handler(value)
    except ValueError:
        raise PydanticCustomError("number_type", "Input should be a valid number") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"cpus must be a finite number; got {number}.")
    if number is not None and number <= 0:
        raise ValueError(f"cpus must be greater than 0; got {number}.")
    if isinstance(number, float) and number.is_integer():
        return int(number)
    return number


class EnvironmentConfig(BaselineNetworkPolicyConfig):
    """``[environment]``, also the schema of ``[verifier.environment]``."""

    build_timeout_sec: PositiveSeconds = 600.0
    docker_image: str | None = None
    os: TaskOS = "linux"
    cpus: Annotated[int | float | None, WrapValidator(_finite_number)] = None
    memory_mb: PositiveInt | None = None
    storage_mb: PositiveInt | None = None
    gpus: Annotated[int, Field(ge=0)] | None = None
    gpu_types: list[str] | None = None
    tpu: TpuSpec | None = None
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
    env: EnvTable = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    workdir: str | None = None
    # Deprecated; mapped onto network_mode by TaskConfig, then cleared and never dumped.
    allow_internet: bool | None = Field(default=None, exclude=True)

    @field_validator("os", mode="before")
    @classmethod
    def _lower_os(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _migrate_sizes(cls, data: Any) -> Any:
        """Legacy ``memory``/``storage`` strings become ``memory_mb``/``storage_mb``.

        As in Harbor, a legacy value that is not a string is dropped without a word.
        """
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for legacy in ("memory", "storage"):
            if legacy not in data:
                continue
            value = data.pop(legacy)
            if not isinstance(value, str):
                continue
            target = f"{legacy}_mb"
            try:
                megabytes = parse_size_to_mb(value)
            except ValueError as exc:
                raise FieldValueError(str(exc), legacy) from None
            if target in data and data[target] != megabytes:
                raise FieldValueError(
                    f"Conflicting '{legacy}' and '{target}' values: {legacy}={value!r} "
                    f"({megabytes} MB) != {target}={data[target]!r}.",
                    legacy,
                )
            data.setdefault(target, megabytes)
        return data
