"""The operator's settings, parsed once when the operator starts (as kopf's `OperatorSettings`)
from the environment variables the Helm chart sets (charts/shipyard/README.md):

| variable | setting |
|---|---|
| SHIPYARD_TRIAL_DEFAULT_CPU, _MEMORY, SHIPYARD_TRIAL_RUNTIME_CLASS, SHIPYARD_TRIAL_NODE_SELECTOR, SHIPYARD_TRIAL_TOLERATIONS | `scheduling.pod_defaults` |
| SHIPYARD_UNSCHEDULABLE_GRACE_SEC, SHIPYARD_ACCELERATOR_UNSCHEDULABLE_GRACE_SEC | `scheduling` graces |
| SHIPYARD_LOG_LIMIT_BYTES | `scheduling.log_limit_bytes` |
| SHIPYARD_FQDN_BACKEND, SHIPYARD_BLOCKED_EGRESS_CIDRS, SHIPYARD_DNS_EGRESS_CIDRS, SHIPYARD_IP_FAMILIES | `network` |
| SHIPYARD_TASK_WAIT_SEC | `task_wait_sec` |
| SHIPYARD_NETWORK_SETTLE_SEC | `network_settle_sec` |
| SHIPYARD_TASK_ENV_ALLOW | `task_env` |
| SHIPYARD_TRIAL_TTL_SECONDS_AFTER_FINISHED | `trial_ttl_seconds` |
| SHIPYARD_AGENT_BUNDLE_REPOSITORY | `agent_bundle_repository` |
| SHIPYARD_THREADS | `threads` |
| SHIPYARD_BUILD_BACKEND, SHIPYARD_BUILD_REGISTRY, … (`plan.images`) | `images` |
| SHIPYARD_SWEEP_STATUS_INTERVAL_SEC | `sweep_status_interval_sec` |

A bad value does not stop the operator: it is kept in `error`, and each trial fails with
TrialInvalid naming it (the operator keeps serving Tasks and finished Trials).
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from shipyard.plan.accelerators import SchedulingSettings
from shipyard.plan.agents import BUNDLE_REPOSITORY_ENV
from shipyard.plan.images import ImageSettingError, ImageSettings
from shipyard.plan.network import NetworkConfig, NetworkSettingError

TASK_WAIT_ENV = "SHIPYARD_TASK_WAIT_SEC"
NETWORK_SETTLE_ENV = "SHIPYARD_NETWORK_SETTLE_SEC"
TASK_ENV_ALLOW = "SHIPYARD_TASK_ENV_ALLOW"
DEFAULT_TTL_ENV = "SHIPYARD_TRIAL_TTL_SECONDS_AFTER_FINISHED"
THREADS_ENV = "SHIPYARD_THREADS"
SWEEP_STATUS_INTERVAL_ENV = "SHIPYARD_SWEEP_STATUS_INTERVAL_SEC"

TASK_WAIT_SEC = 60.0
"""How long a Trial waits for a Task that does not exist yet."""
NETWORK_SETTLE_SEC = 2.0
"""After a pod's network label changes, dataplanes take a moment to apply the new policy: no
phase starts before this has passed since the last change."""
SWEEP_STATUS_INTERVAL_SEC = 10.0
"""A Sweep's status is written at most this often while only its progress changes."""


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    """A duration; the default when unset or unreadable."""
    try:
        return max(0.0, float(environ.get(name) or default))
    except ValueError:
        return default


def task_environ(environ: Mapping[str, str], allow: str) -> dict[str, str]:
    """What task `${VAR}` templates resolve against: the operator's environment, as Harbor uses
    its host's, but only the names the platform team allows (`allow`: comma separated names or
    `PREFIX_*` patterns), so that a Task cannot copy the operator's own credentials into a
    pod."""
    patterns = [p.strip() for p in allow.split(",") if p.strip()]
    return {k: v for k, v in environ.items() if any(fnmatchcase(k, p) for p in patterns)}


THREADS = 64
"""The blocking-call thread pool's size: asyncio's default, min(32, cores + 4), is 6 threads on a
2-core node, one ceiling shared by every trial (`shipyard.handlers.executor` measures it)."""


def _positive_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _ttl(environ: Mapping[str, str]) -> int | None:
    return _positive_int(environ, DEFAULT_TTL_ENV)


@dataclass(frozen=True)
class OperatorSettings:
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    task_wait_sec: float = TASK_WAIT_SEC
    network_settle_sec: float = NETWORK_SETTLE_SEC
    task_env: dict[str, str] = field(default_factory=dict)
    trial_ttl_seconds: int | None = None
    """Operator-wide `ttlSecondsAfterFinished` for Trials that set none (None: kept)."""
    agent_bundle_repository: str | None = None
    """Where installed agents' bundle images are (None: the local cluster's own)."""
    threads: int = THREADS
    images: ImageSettings = field(default_factory=ImageSettings)
    images_error: str | None = None
    """The build settings could not be read: Tasks that need a build say so (NoImageBuilder)
    and their trials fail; prebuilt images still run."""
    sweep_status_interval_sec: float = SWEEP_STATUS_INTERVAL_SEC
    error: str | None = None
    """A setting that could not be read: trials fail with TrialInvalid saying so."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        errors = []
        try:
            scheduling = SchedulingSettings.from_env(environ)
        except ValueError as e:
            scheduling, errors = SchedulingSettings(), [*errors, str(e)]
        try:
            network = NetworkConfig.from_env(environ)
        except NetworkSettingError as e:
            network, errors = NetworkConfig(), [*errors, str(e)]
        try:
            images, images_error = ImageSettings.from_env(environ), None
        except ImageSettingError as e:
            images, images_error = ImageSettings(), str(e)
        return cls(
            images=images,
            images_error=images_error,
            scheduling=scheduling,
            network=network,
            task_wait_sec=_seconds(environ, TASK_WAIT_ENV, TASK_WAIT_SEC),
            network_settle_sec=_seconds(environ, NETWORK_SETTLE_ENV, NETWORK_SETTLE_SEC),
            task_env=task_environ(environ, environ.get(TASK_ENV_ALLOW, "")),
            trial_ttl_seconds=_ttl(environ),
            agent_bundle_repository=environ.get(BUNDLE_REPOSITORY_ENV) or None,
            threads=_positive_int(environ, THREADS_ENV) or THREADS,
            sweep_status_interval_sec=_seconds(environ, SWEEP_STATUS_INTERVAL_ENV,
                                               SWEEP_STATUS_INTERVAL_SEC),
            error="; ".join(errors) or None,
        )

    def ttl_seconds(self, spec: Mapping[str, object]) -> int | None:
        """The Trial's ttlSecondsAfterFinished, else the operator's default (the chart's
        `trials.logRetentionSeconds`), else None: kept until deleted."""
        if spec.get("ttlSecondsAfterFinished") is not None:
            return int(spec["ttlSecondsAfterFinished"])  # type: ignore[call-overload]
        return self.trial_ttl_seconds
