"""GPUs and TPUs of a task, resolved for GKE-style scheduling (docs/harbor.md §c.4, improved per
§g.4).

* GPUs: `nvidia.com/gpu` = `gpus`; when `gpu_types` is set, node affinity over **every**
  entry (Harbor uses only the first), each mapped through Harbor's alias table to a
  `cloud.google.com/gke-accelerator` label. Canonical labels pass through; anything else is
  refused with Harbor's message listing the known types.
* TPUs: `google.com/tpu` = the chips of the topology, `cloud.google.com/gke-tpu-accelerator`
  and `cloud.google.com/gke-tpu-topology`. A topology larger than one host of its type is a
  multi-host slice, which one pod can never get: it is refused at admission with the host size
  instead of staying Pending forever.
* GPU and TPU together are refused (one accelerator family per pod).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shipyard.taskformat import EnvironmentConfig

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"

# Harbor 0.25 `GKE_GPU_TYPE_MAP` (gke.py:72-84); keys are matched case-insensitively.
GKE_GPU_TYPE_MAP = {
    "t4": "nvidia-tesla-t4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
    "a100-40gb": "nvidia-tesla-a100",
    "a100-80gb": "nvidia-a100-80gb",
    "rtx-pro-6000": "nvidia-rtx-pro-6000",
    "h100": "nvidia-h100-80gb",
    "h100-mega": "nvidia-h100-mega-80gb",
    "h200": "nvidia-h200-141gb",
    "b200": "nvidia-b200",
    "gb200": "nvidia-gb200",
}

# Harbor 0.25 `GKE_TPU_TYPE_MAP` (gke.py:89-99).
GKE_TPU_TYPE_MAP = {
    "v3": "tpu-v3-slice",
    "v3-device": "tpu-v3-device",
    "v4": "tpu-v4-podslice",
    "v5e": "tpu-v5-lite-podslice",
    "v5p": "tpu-v5p-slice",
    "v6e": "tpu-v6e-slice",
    "trillium": "tpu-v6e-slice",
    "v7": "tpu7x",
    "ironwood": "tpu7x",
}

# Chips on one host (one TPU VM, so one Kubernetes node) per GKE TPU label, with the largest
# single-host topology. Sources: Cloud TPU docs "TPU v5e" (slice shapes 1x1, 2x2, 2x4 run on one
# host; 4x4 and up on 2+ hosts; 1, 4 or 8 chips per VM), "Supported TPU configurations" for v5p
# (2x2x1 = 4 chips on 1 machine, 2x2x2 = 2 machines) and v4 (4 chips per host, 2x2x1), the GKE
# "Deploy TPU Multislice" page (ct4p-hightpu-4t 2x2x1 and ct5lp-hightpu-4t 2x2 are single-host
# node pools), the GKE "TPU Ironwood" page (each TPU7x VM has 4 chips) and "TPU v3" (a v3-8 host
# is one TPU device: 8 TensorCores = 4 chips, 2 TensorCores per chip). v6e (Trillium) has the
# same VM shapes as v5e (up to 8 chips, 2x4, per host).
TPU_HOST_CHIPS: dict[str, tuple[int, str]] = {
    "tpu-v3-device": (4, "2x2"),
    "tpu-v3-slice": (4, "2x2"),
    "tpu-v4-podslice": (4, "2x2x1"),
    "tpu-v5-lite-podslice": (8, "2x4"),
    "tpu-v5p-slice": (4, "2x2x1"),
    "tpu-v6e-slice": (8, "2x4"),
    "tpu7x": (4, "2x2x1"),
}

BOTH_FAMILIES = (
    "GKE pods can only target one accelerator family per pod via nodeSelector, but the task "
    "requests both GPU and TPU."
)


class AcceleratorError(ValueError):
    """The task asks for accelerators no pod can get; `field` is the task.toml field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def _resolve(kind: str, value: str, table: dict[str, str]) -> str:
    raw = value.lower().strip()
    if raw in table:
        return table[raw]
    if raw in table.values():
        return raw
    supported = ", ".join(sorted(set(table) | set(table.values())))
    raise ValueError(f"{kind} type '{value}' is not supported on GKE. Supported types: {supported}")


def gpu_label(gpu_type: str) -> str:
    """The `cloud.google.com/gke-accelerator` label of a GPU alias or label (Harbor's text on
    an unknown type)."""
    return _resolve("GPU", gpu_type, GKE_GPU_TYPE_MAP)


def tpu_label(tpu_type: str) -> str:
    """The `cloud.google.com/gke-tpu-accelerator` label of a TPU alias or label."""
    return _resolve("TPU", tpu_type, GKE_TPU_TYPE_MAP)


@dataclass(frozen=True)
class GpuRequest:
    count: int
    accelerators: tuple[str, ...] = ()  # any of these node labels; empty: any GPU node


@dataclass(frozen=True)
class TpuRequest:
    accelerator: str
    topology: str
    chips: int


@dataclass(frozen=True)
class Accelerators:
    gpu: GpuRequest | None = None
    tpu: TpuRequest | None = None

    @property
    def requested(self) -> bool:
        return self.gpu is not None or self.tpu is not None


NO_ACCELERATORS = Accelerators()


def resolve_accelerators(env: EnvironmentConfig, override_gpus: int | None = None
                         ) -> Accelerators:
    """The accelerators of `env` (`[environment]` or a verifier environment), or
    `AcceleratorError` naming the task.toml field when no single pod could ever get them."""
    gpus = override_gpus if override_gpus is not None else env.gpus
    if gpus and env.tpu is not None:
        raise AcceleratorError(BOTH_FAMILIES, "environment.tpu")
    gpu = None
    if gpus:
        labels: list[str] = []
        for gpu_type in env.gpu_types or ():
            try:
                label = gpu_label(gpu_type)
            except ValueError as e:
                raise AcceleratorError(str(e), "environment.gpu_types") from None
            if label not in labels:
                labels.append(label)
        gpu = GpuRequest(gpus, tuple(labels))
    tpu = None
    if env.tpu is not None:
        try:
            accelerator = tpu_label(env.tpu.type)
        except ValueError as e:
            raise AcceleratorError(str(e), "environment.tpu.type") from None
        chips = env.tpu.chip_count
        host = TPU_HOST_CHIPS.get(accelerator)
        if host is not None and chips > host[0]:
            raise AcceleratorError(
                f"TPU topology {env.tpu.topology} of {accelerator} needs {chips} chips, more "
                f"than one host of that type has ({host[0]} chips, topology {host[1]} at "
                "most): that is a multi-host slice, which one pod cannot use; multi-host TPU "
                "slices are not supported yet. Use a topology of at most one host",
                "environment.tpu.topology",
            )
        tpu = TpuRequest(accelerator, env.tpu.topology, chips)
    return Accelerators(gpu, tpu)


@dataclass(frozen=True)
class PodOverrides:
    """Trial-level pod settings for platform teams (`spec.pod`): merged into every pod of the
    trial. Node selector entries win over the accelerator selectors on the same key;
    tolerations are added to the accelerator tolerations."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    default_requests: dict[str, str] = field(default_factory=dict)
    """Operator-wide requests (cpu, memory) for pods whose task sets none."""
    image_pull_secrets: tuple[str, ...] = ()
    cpu_request_ratio: float = 1.0
    """Operator-wide: a task's CPU request is its declared cpus times this (the limit stays
    as declared), e.g. 0.25 on a laptop cluster (`plan.capacity.cpu_request_millis`)."""
    cpu_request_max_millis: int | None = None
    """Operator-wide: and at most this many millicores (None: no cap)."""

    def under(self, trial: PodOverrides) -> PodOverrides:
        """These operator-wide defaults with a Trial's settings on top: the Trial's node
        selector entries and classes win, tolerations add up."""
        tolerations = list(self.tolerations)
        tolerations += [t for t in trial.tolerations if t not in tolerations]
        return PodOverrides(
            node_selector={**self.node_selector, **trial.node_selector},
            tolerations=tuple(tolerations),
            priority_class_name=trial.priority_class_name or self.priority_class_name,
            runtime_class_name=trial.runtime_class_name or self.runtime_class_name,
            default_requests={**self.default_requests, **trial.default_requests},
            image_pull_secrets=tuple(dict.fromkeys(self.image_pull_secrets
                                                   + trial.image_pull_secrets)),
            cpu_request_ratio=self.cpu_request_ratio,
            cpu_request_max_millis=self.cpu_request_max_millis,
        )


NO_OVERRIDES = PodOverrides()


UNSCHEDULABLE_GRACE_ENV = "SHIPYARD_UNSCHEDULABLE_GRACE_SEC"
ACCELERATOR_GRACE_ENV = "SHIPYARD_ACCELERATOR_UNSCHEDULABLE_GRACE_SEC"
IMAGE_PULL_GRACE_ENV = "SHIPYARD_IMAGE_PULL_GRACE_SEC"
POD_DEFAULTS_ENV = {
    "node_selector": "SHIPYARD_TRIAL_NODE_SELECTOR",  # a JSON object
    "tolerations": "SHIPYARD_TRIAL_TOLERATIONS",  # a JSON list of tolerations
    "runtime_class_name": "SHIPYARD_TRIAL_RUNTIME_CLASS",
    "cpu": "SHIPYARD_TRIAL_DEFAULT_CPU",  # a Kubernetes quantity
    "memory": "SHIPYARD_TRIAL_DEFAULT_MEMORY",
    "image_pull_secrets": "SHIPYARD_IMAGE_PULL_SECRETS",  # comma separated Secret names
    "cpu_request_ratio": "SHIPYARD_TRIAL_CPU_REQUEST_RATIO",  # 0 < ratio <= 1
    "cpu_request_max": "SHIPYARD_TRIAL_CPU_REQUEST_MAX",  # a CPU quantity: "500m", "1"
}
LOG_LIMIT_ENV = "SHIPYARD_LOG_LIMIT_BYTES"
RELEASE_ENVIRONMENT_ENV = "SHIPYARD_RELEASE_ENVIRONMENT"
DEFAULT_LOG_LIMIT_BYTES = 256 * 1024


def _json_env(environ: Mapping[str, str], name: str, kind: type) -> Any:
    raw = (environ.get(name) or "").strip()
    if not raw or raw == "null":
        return kind()
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f"{name}: not JSON: {raw[:100]!r}") from None
    if not isinstance(value, kind) or (
            kind is dict and not all(isinstance(v, str) for v in value.values())) or (
            kind is list and not all(isinstance(t, dict) for t in value)):
        expected = "object of strings" if kind is dict else "list of tolerations"
        raise ValueError(f"{name}: expected a JSON {expected}, got {raw[:100]!r}")
    return value


def _cpu_request_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    from shipyard.plan.capacity import parse_cpu

    settings: dict[str, Any] = {}
    name = POD_DEFAULTS_ENV["cpu_request_ratio"]
    raw = (environ.get(name) or "").strip()
    if raw:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0 < ratio <= 1:
            raise ValueError(f"{name}={raw!r}: expected a number in (0, 1], e.g. 0.5")
        settings["cpu_request_ratio"] = ratio
    name = POD_DEFAULTS_ENV["cpu_request_max"]
    raw = (environ.get(name) or "").strip()
    if raw:
        millis = parse_cpu(raw)
        if millis is None or millis <= 0:
            raise ValueError(f"{name}={raw!r}: expected a CPU quantity, e.g. 500m or 1")
        settings["cpu_request_max_millis"] = millis
    return settings


@dataclass(frozen=True)
class SchedulingSettings:
    """The operator's scheduling settings: how long a pod may stay Unschedulable before the
    trial fails, longer for accelerator pods, which often wait for the cluster autoscaler to
    add a node (several minutes)."""

    unschedulable_grace_sec: float = 30.0
    accelerator_grace_sec: float = 600.0
    image_pull_grace_sec: float = 120.0
    """How long a pull error that may pass (kubelet's pull QPS, a registry timeout) is left to
    the kubelet's retries; a missing image or a denied pull fails at once."""
    pod_defaults: PodOverrides = NO_OVERRIDES
    """Operator-wide pod settings (the Helm chart's `trials.*`) under each Trial's spec.pod."""
    log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES
    """The tail of each phase log kept in a Trial's logs ConfigMap."""
    release_environment: bool = True
    """Stop the environment pod (its artifacts kept in ConfigMaps) before the last step's
    separate verifier pod is created, as Harbor does (SHIPYARD_RELEASE_ENVIRONMENT, on unless
    0/false/no/off): the verifier gets the resources the environment held. Off: the two pods
    coexist."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SchedulingSettings:
        defaults = PodOverrides(
            node_selector=_json_env(environ, POD_DEFAULTS_ENV["node_selector"], dict),
            tolerations=tuple(_json_env(environ, POD_DEFAULTS_ENV["tolerations"], list)),
            runtime_class_name=environ.get(POD_DEFAULTS_ENV["runtime_class_name"]) or None,
            default_requests={k: environ[POD_DEFAULTS_ENV[k]].strip() for k in ("cpu", "memory")
                              if (environ.get(POD_DEFAULTS_ENV[k]) or "").strip()},
            image_pull_secrets=tuple(s.strip() for s in environ.get(
                POD_DEFAULTS_ENV["image_pull_secrets"], "").split(",") if s.strip()),
            **_cpu_request_settings(environ),
        )
        values: list[Any] = []
        for name, default in ((UNSCHEDULABLE_GRACE_ENV, cls.unschedulable_grace_sec),
                              (ACCELERATOR_GRACE_ENV, cls.accelerator_grace_sec),
                              (IMAGE_PULL_GRACE_ENV, cls.image_pull_grace_sec)):
            raw = environ.get(name)
            try:
                value = float(raw) if raw else default
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
            values.append(value if value > 0 else default)
        raw_limit = environ.get(LOG_LIMIT_ENV)
        try:
            limit = int(raw_limit) if raw_limit else DEFAULT_LOG_LIMIT_BYTES
        except ValueError:
            raise ValueError(f"{LOG_LIMIT_ENV}={raw_limit!r} is not a whole number") from None
        release = (environ.get(RELEASE_ENVIRONMENT_ENV) or "").strip().lower()
        return cls(*values, pod_defaults=defaults,
                   log_limit_bytes=limit if limit > 0 else DEFAULT_LOG_LIMIT_BYTES,
                   release_environment=release not in ("0", "false", "no", "off"))
