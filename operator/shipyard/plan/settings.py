"""The operator's settings, parsed once when the operator starts (as kopf's `OperatorSettings`)
from the environment variables the Helm chart sets (charts/shipyard/README.md):

| variable | setting |
|---|---|
| SHIPYARD_TRIAL_DEFAULT_CPU, _MEMORY, SHIPYARD_TRIAL_RUNTIME_CLASS, SHIPYARD_TRIAL_NODE_SELECTOR, SHIPYARD_TRIAL_TOLERATIONS | `scheduling.pod_defaults` |
| SHIPYARD_UNSCHEDULABLE_GRACE_SEC, SHIPYARD_ACCELERATOR_UNSCHEDULABLE_GRACE_SEC, SHIPYARD_IMAGE_PULL_GRACE_SEC | `scheduling` graces |
| SHIPYARD_LOG_LIMIT_BYTES | `scheduling.log_limit_bytes` |
| SHIPYARD_FQDN_BACKEND, SHIPYARD_BLOCKED_EGRESS_CIDRS, SHIPYARD_DNS_EGRESS_CIDRS, SHIPYARD_IP_FAMILIES, SHIPYARD_BLOCK_APISERVER, SHIPYARD_BLOCK_CLUSTER_EGRESS, SHIPYARD_CLUSTER_CIDRS, SHIPYARD_NETWORK_FENCE_SEC, SHIPYARD_NETWORK_FENCE_CONTAINERS | `network` |
| SHIPYARD_TASK_WAIT_SEC | `task_wait_sec` |
| SHIPYARD_NETWORK_SETTLE_SEC | `network_settle_sec` |
| SHIPYARD_TASK_ENV_ALLOW | `task_env` |
| SHIPYARD_TRIAL_TTL_SECONDS_AFTER_FINISHED | `trial_ttl_seconds` |
| SHIPYARD_AGENT_BUNDLE_REPOSITORY | `agent_bundle_repository` |
| SHIPYARD_THREADS | `threads` |
| SHIPYARD_PROBE_IMAGE | `probe_image` |
| SHIPYARD_RUNNER_IMAGE, SHIPYARD_RUNNER | `runner_image` |
| SHIPYARD_RUNNER_FILES | `runner_files` |
| SHIPYARD_BUILD_BACKEND, SHIPYARD_BUILD_REGISTRY, … (`plan.images`) | `images` |
| SHIPYARD_SWEEP_STATUS_INTERVAL_SEC | `sweep_status_interval_sec` |
| SHIPYARD_SWEEP_WARM_PODS, SHIPYARD_SWEEP_WARM_AHEAD | `sweep_warm_pods`, `sweep_warm_ahead` |
| SHIPYARD_METRICS_PORT | `shipyard operator --metrics-port` (read by the CLI, `METRICS_PORT`) |
| SHIPYARD_LEADER_ELECTION, SHIPYARD_LEADER_LEASE_NAME, _NAMESPACE, SHIPYARD_LEADER_IDENTITY, SHIPYARD_LEADER_LEASE_SEC, _RENEW_DEADLINE_SEC, _RETRY_SEC | `leader` |

A bad value does not stop the operator: it is kept in `error`, and each trial fails with
TrialInvalid naming it (the operator keeps serving Tasks and finished Trials).
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from shipyard.api.conventions import OPERATOR_LEASE, operator_lease_name
from shipyard.plan.accelerators import SchedulingSettings
from shipyard.plan.agents import BUNDLE_REPOSITORY_ENV
from shipyard.plan.images import ImageSettingError, ImageSettings
from shipyard.plan.network import NetworkConfig, NetworkSettingError

TASK_WAIT_ENV = "SHIPYARD_TASK_WAIT_SEC"
NETWORK_SETTLE_ENV = "SHIPYARD_NETWORK_SETTLE_SEC"
TASK_ENV_ALLOW = "SHIPYARD_TASK_ENV_ALLOW"
DEFAULT_TTL_ENV = "SHIPYARD_TRIAL_TTL_SECONDS_AFTER_FINISHED"
THREADS_ENV = "SHIPYARD_THREADS"
PROBE_IMAGE_ENV = "SHIPYARD_PROBE_IMAGE"
RUNNER_IMAGE_ENV = "SHIPYARD_RUNNER_IMAGE"
RUNNER_ENV = "SHIPYARD_RUNNER"
RUNNER_FILES_ENV = "SHIPYARD_RUNNER_FILES"
"""`go` (the default when a runner image is set) or `sh`: the runner trial pods get
(docs/runner-protocol.md)."""
RUNNERS = ("go", "sh")
KUEUE_DEFAULT_QUEUE_ENV = "SHIPYARD_KUEUE_DEFAULT_QUEUE"
"""The chart's `kueue.defaultQueueName`: the LocalQueue of Trials that name none."""
LOCAL_PROBE_IMAGE = "localhost/shipyard/busybox:latest"
"""The local cluster's busybox, for SHIPYARD_PROBE_IMAGE there (tests, benches). Unset (or
`none`), no trial pod has a readiness probe (every phase's end is waited for by an exec): a
probe image is opted into, so that no cluster gets pods of an image it cannot pull."""
SWEEP_STATUS_INTERVAL_ENV = "SHIPYARD_SWEEP_STATUS_INTERVAL_SEC"
SWEEP_WARM_PODS_ENV = "SHIPYARD_SWEEP_WARM_PODS"
SWEEP_WARM_PODS = 0
"""At most this many warm pods a Sweep keeps per task (`plan.warm`); 0 (the default) turns
them off: on the shared 2-core node a Sweep of trivial trials ran slower with them (its pod
starts are the node's limit, and warm pods add their own; bench/README.md, "Warm pods")."""
SWEEP_WARM_AHEAD_ENV = "SHIPYARD_SWEEP_WARM_AHEAD"
SWEEP_WARM_AHEAD = 2
"""Warm pods a Sweep keeps per slot of its parallelism (within SHIPYARD_SWEEP_WARM_PODS and its
trials left to start): a trivial trial ends before the pod replacing its warm one is up."""
METRICS_PORT_ENV = "SHIPYARD_METRICS_PORT"
METRICS_PORT = 8081
"""The operator's `/metrics` port (`shipyard operator --metrics-port`, the chart's
`metrics.port`); 0 takes a free port, a negative one turns the endpoint off."""

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


IN_POD_ENV = "KUBERNETES_SERVICE_HOST"


def with_cluster_defaults(environ: Mapping[str, str], published: Mapping[str, str]
                          ) -> dict[str, str]:
    """An operator run by hand (not in a pod) against a cluster that publishes defaults (the
    local test cluster: its builder, registry, probe image): those under its own environment,
    which wins. In a pod (the chart sets every setting) the environment alone."""
    if IN_POD_ENV in environ:
        return dict(environ)
    return {**{k: v for k, v in published.items() if k.startswith("SHIPYARD_")}, **environ}


def task_environ(environ: Mapping[str, str], allow: str) -> dict[str, str]:
    """What task `${VAR}` templates resolve against: the operator's environment, as Harbor uses
    its host's, but only the names the platform team allows (`allow`: comma separated names or
    `PREFIX_*` patterns), so that a Task cannot copy the operator's own credentials into a
    pod."""
    patterns = [p.strip() for p in allow.split(",") if p.strip()]
    return {k: v for k, v in environ.items() if any(fnmatchcase(k, p) for p in patterns)}


THREADS = 64
"""The blocking-call thread pool's size: asyncio's default, min(32, cores + 4), is 6 threads on a
2-core node, one ceiling shared by every trial (`shipyard.runtime.executor` measures it)."""


def _positive_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _count(environ: Mapping[str, str], name: str, default: int) -> int:
    """A count of 0 or more (`default` when unset or not a number)."""
    try:
        return max(0, int(environ.get(name, "").strip() or default))
    except ValueError:
        return default


def _probe_image(environ: Mapping[str, str]) -> str | None:
    raw = environ.get(PROBE_IMAGE_ENV, "").strip()
    return None if raw.lower() in ("", "none") else raw


def _runner_files(environ: Mapping[str, str]) -> str | None:
    """The Go runner's files, unless SHIPYARD_RUNNER=sh asks for runner.sh."""
    raw = environ.get(RUNNER_FILES_ENV, "").strip()
    if environ.get(RUNNER_ENV, "").strip().lower() == "sh" or raw.lower() in ("", "none"):
        return None
    return raw


def _runner_image(environ: Mapping[str, str]) -> str | None:
    """The static Go runner's image, unless SHIPYARD_RUNNER=sh asks for runner.sh (the
    fallback; also what every pod gets while no runner image is set)."""
    runner = environ.get(RUNNER_ENV, "").strip().lower() or "go"
    if runner not in RUNNERS:
        raise ValueError(f"{RUNNER_ENV}={environ.get(RUNNER_ENV)!r}: expected one of "
                         f"{', '.join(RUNNERS)}")
    raw = environ.get(RUNNER_IMAGE_ENV, "").strip()
    if runner == "sh" or raw.lower() in ("", "none"):
        return None
    return raw


def _ttl(environ: Mapping[str, str]) -> int | None:
    return _positive_int(environ, DEFAULT_TTL_ENV)


LEADER_ELECTION_ENV = "SHIPYARD_LEADER_ELECTION"
LEASE_NAME_ENV = "SHIPYARD_LEADER_LEASE_NAME"
LEASE_NAMESPACE_ENV = "SHIPYARD_LEADER_LEASE_NAMESPACE"
IDENTITY_ENV = "SHIPYARD_LEADER_IDENTITY"
LEASE_SEC_ENV = "SHIPYARD_LEADER_LEASE_SEC"
RENEW_DEADLINE_ENV = "SHIPYARD_LEADER_RENEW_DEADLINE_SEC"
RETRY_ENV = "SHIPYARD_LEADER_RETRY_SEC"


@dataclass(frozen=True)
class LeaderSettings:
    """Leader election with a coordination.k8s.io Lease, client-go's defaults: only the holder
    drives trials; it renews every `retry_sec` and exits once it has not renewed for
    `renew_deadline_sec`, shorter than `lease_sec`, after which a standby may take over."""

    enabled: bool = True
    lease_name: str = OPERATOR_LEASE
    named: bool = field(default=False, compare=False)
    """True when `lease_name` was set (SHIPYARD_LEADER_LEASE_NAME); else the Lease is named
    from the namespaces the operator serves (`lease_for`)."""
    namespace: str | None = None
    """None: the operator's own namespace (its ServiceAccount's; else the kubeconfig's)."""
    identity: str | None = None
    """None: `<hostname>_<pid>` (a pod's name; a restarted container keeps it)."""
    lease_sec: float = 15.0
    renew_deadline_sec: float = 10.0
    retry_sec: float = 2.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LeaderSettings:
        enabled = environ.get(LEADER_ELECTION_ENV, "1").strip().lower()
        if enabled not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
            raise ValueError(f"{LEADER_ELECTION_ENV}={enabled!r}: not a boolean")
        timings = {}
        for name, key in ((LEASE_SEC_ENV, "lease_sec"), (RENEW_DEADLINE_ENV, "renew_deadline_sec"),
                          (RETRY_ENV, "retry_sec")):
            raw = environ.get(name, "").strip()
            if raw:
                try:
                    timings[key] = float(raw)
                except ValueError:
                    raise ValueError(f"{name}={raw!r}: not a number of seconds") from None
        settings = cls(
            enabled=enabled in ("1", "true", "yes", "on", ""),
            lease_name=environ.get(LEASE_NAME_ENV, "").strip() or OPERATOR_LEASE,
            named=bool(environ.get(LEASE_NAME_ENV, "").strip()),
            namespace=environ.get(LEASE_NAMESPACE_ENV, "").strip() or None,
            identity=environ.get(IDENTITY_ENV, "").strip() or None,
            **timings,
        )
        if not 0 < settings.retry_sec < settings.renew_deadline_sec < settings.lease_sec:
            raise ValueError(
                f"leader election needs 0 < {RETRY_ENV} < {RENEW_DEADLINE_ENV} < {LEASE_SEC_ENV}"
                f" (got {settings.retry_sec:g}, {settings.renew_deadline_sec:g},"
                f" {settings.lease_sec:g})")
        return settings

    def lease_for(self, namespaces: Iterable[str]) -> str:
        """The Lease to hold while serving `namespaces` (none: every namespace)."""
        return self.lease_name if self.named else operator_lease_name(namespaces)


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
    probe_image: str | None = None
    """The image of the trial pods' `probe` container (`render.pod.probe_container`), which
    answers their readiness probe over HTTP; None: no probe, a phase's end is waited for by a
    `result` exec (`trial_machine.RESULT_WAIT_SEC`)."""
    runner_image: str | None = None
    """The image holding the static Go runner (`/runner`), copied into every trial pod by an
    init container (`render.pod.runner_init_container`); None: the pods run runner.sh from a
    ConfigMap on the task image's own shell."""
    runner_files: str | None = None
    """A folder with the static Go runner (`runner`) and its loader (`loader`, runner/loader):
    trial pods then mount the runner from ConfigMaps (`render.runner_parts`) instead of
    copying it from `runner_image` with an init container. None with SHIPYARD_RUNNER=sh."""
    images: ImageSettings = field(default_factory=ImageSettings)
    images_error: str | None = None
    """The build settings could not be read: Tasks that need a build say so (NoImageBuilder)
    and their trials fail; prebuilt images still run."""
    sweep_status_interval_sec: float = SWEEP_STATUS_INTERVAL_SEC
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    sweep_warm_pods: int = SWEEP_WARM_PODS
    """The cap on a Sweep's warm pods per task (`plan.warm.sweep_warm_target`); 0: none."""
    sweep_warm_ahead: int = SWEEP_WARM_AHEAD
    """A Sweep's warm pods per slot of its parallelism (`plan.warm.sweep_warm_target`)."""
    kueue_default_queue: str | None = None
    """The LocalQueue of Trials without `kueue.x-k8s.io/queue-name` (None: such Trials are
    not admitted by Kueue). Ignored where Kueue's Workload API is not served."""
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
            leader = LeaderSettings.from_env(environ)
        except ValueError as e:  # the defaults, which are safe; trials say what was wrong
            leader, errors = LeaderSettings(), [*errors, str(e)]
        try:
            runner_image = _runner_image(environ)
        except ValueError as e:
            runner_image, errors = None, [*errors, str(e)]
        try:
            images, images_error = ImageSettings.from_env(environ), None
        except ImageSettingError as e:
            images, images_error = ImageSettings(), str(e)
        return cls(
            images=images,
            leader=leader,
            images_error=images_error,
            scheduling=scheduling,
            network=network,
            task_wait_sec=_seconds(environ, TASK_WAIT_ENV, TASK_WAIT_SEC),
            network_settle_sec=_seconds(environ, NETWORK_SETTLE_ENV, NETWORK_SETTLE_SEC),
            task_env=task_environ(environ, environ.get(TASK_ENV_ALLOW, "")),
            trial_ttl_seconds=_ttl(environ),
            agent_bundle_repository=environ.get(BUNDLE_REPOSITORY_ENV) or None,
            threads=_positive_int(environ, THREADS_ENV) or THREADS,
            probe_image=_probe_image(environ),
            runner_image=runner_image,
            runner_files=_runner_files(environ),
            sweep_status_interval_sec=_seconds(environ, SWEEP_STATUS_INTERVAL_ENV,
                                               SWEEP_STATUS_INTERVAL_SEC),
            sweep_warm_pods=_count(environ, SWEEP_WARM_PODS_ENV, SWEEP_WARM_PODS),
            sweep_warm_ahead=_count(environ, SWEEP_WARM_AHEAD_ENV, SWEEP_WARM_AHEAD) or 1,
            kueue_default_queue=environ.get(KUEUE_DEFAULT_QUEUE_ENV, "").strip() or None,
            error="; ".join(errors) or None,
        )

    def ttl_seconds(self, spec: Mapping[str, object]) -> int | None:
        """The Trial's ttlSecondsAfterFinished, else the operator's default (the chart's
        `trials.logRetentionSeconds`), else None: kept until deleted."""
        if spec.get("ttlSecondsAfterFinished") is not None:
            return int(spec["ttlSecondsAfterFinished"])  # type: ignore[call-overload]
        return self.trial_ttl_seconds
