"""What the reconciler needs to know about an environment pod, read from its object."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shipyard.api.conventions import (
    FENCE_INIT_CONTAINER,
    LABEL_NETWORK,
    PROBE_CONTAINER,
    RUNNER_INIT_CONTAINER,
    RUNNER_PATH,
    parse_time,
)
from shipyard.plan.network import FENCE_MARK

IMAGE_PULL_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RegistryUnavailable",
}
# Pull errors no retry mends: the image is not there, or the registry refuses us.
PERMANENT_PULL_REASONS = {"ErrImageNeverPull", "InvalidImageName"}
PERMANENT_PULL_WORDS = ("not found", "manifest unknown", "unauthorized", "denied", "forbidden",
                        "invalid reference")
CONTAINER_CONFIG_REASONS = {
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
TRANSIENT_CONTAINER_WORDS = ("context deadline exceeded", "deadlineexceeded")
"""A container runtime that timed out creating the container (an overloaded node: 9 of 1,000
trials with 250 pods on 2 cores) is no configuration error: the kubelet tries again, and the
start timeout bounds the wait."""


@dataclass(frozen=True)
class PodObservation:
    exists: bool
    ready: bool = False
    """Running with no phase running: a result may be read (not waited for to launch). A pod
    without a readiness probe is ready once running (`probed`)."""
    probed: bool = True
    """A readiness probe tells whether a phase runs (the `probe` container's, or an older
    operator's exec probe); without, a result is asked for with a wait."""
    running: bool = False
    deleting: bool = False
    created_at: datetime | None = None
    scheduled_at: datetime | None = None  # when it was bound to a node
    lost: str | None = None  # why the pod can no longer run a phase
    image_pull_error: str | None = None
    image_pull_permanent: bool = False  # else kubelet's retries may still pull it
    config_error: str | None = None
    unschedulable: str | None = None  # the scheduler's message while Unschedulable
    passing_taints: tuple[str, ...] = ()
    """Taints the kubelet's conditions put on a node, all that keep the pod off it
    (`plan.capacity.passing_taints`; looked up only for an Unschedulable pod's taint)."""
    network: str | None = None  # the network policy key the pod is under (its label)
    network_settled_at: datetime | None = None
    """When the last change of `network` has been applied by the dataplane (None: long ago)."""
    service_failure: str | None = None
    """A docker-compose service that failed to start (`service_failure`)."""
    fence_failure: str | None = None
    """The pod's network policy was not in force within the fence's time: its fence init
    container's message (`fence_failure`); no container of the task's image started."""
    container_exit: bool = False
    """`lost` because of what ran in the pod (issue 22, class 7): a container ended by itself
    (neither OOM-killed, nor the pod deleted, evicted or its node lost), or the kubelet evicted
    the pod for going over its own storage limits (`over_own_limit`), not the node's."""
    runner: str | None = None
    """The runner ConfigMap the pod mounts (content-addressed: which runner it has; a pod made
    by an older operator keeps an older one)."""
    go_runner: str | None = None
    """The Go runner the pod has: its first ConfigMap part (named by content), or the image of
    its runner init container; None with runner.sh."""

    @classmethod
    def absent(cls) -> PodObservation:
        return cls(exists=False)


def observe_pod(pod: dict[str, Any] | None) -> PodObservation:
    if pod is None:
        return PodObservation.absent()
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    phase = status.get("phase")
    ready = _idle(pod, conditions, phase)
    probed = any(c.get("readinessProbe") for c in (pod.get("spec") or {}).get("containers") or [])
    lost = None
    if meta.get("deletionTimestamp"):
        lost = "the environment pod is being deleted"
    elif phase in ("Failed", "Succeeded"):
        why = status.get("reason") or phase
        # Without a pod message (e.g. a container the kubelet could not start while it
        # restarted: StartError), the first terminated container says what happened.
        detail = status.get("message") or _terminated(status) or "no message"
        lost = f"the environment pod stopped ({why}): {detail.strip()}"
        if over_own_limit(status) and "EmptyDir" not in detail:
            lost += (" (the pod's ephemeral-storage limit: the task's storage_mb, the Trial's "
                     "spec.environment.overrideStorageMb or the namespace's LimitRange)")
    image_pull_error = config_error = None
    image_pull_permanent = False
    # The pod's own `reason` (Evicted, NodeLost, Shutdown...) says the cluster ended it,
    # unless it was evicted for its own storage limit: what ran in it wrote too much.
    container_exit = not meta.get("deletionTimestamp") and (over_own_limit(status) or (
        not status.get("reason") and any(
            "terminated" in (cs.get("state") or {})
            and (cs["state"]["terminated"].get("reason") or "") != "OOMKilled"
            for cs in status.get("containerStatuses") or [])))
    main_statuses = status.get("containerStatuses") or []
    # Init containers too: a docker-compose sidecar's image may not pull either.
    for cs in [*main_statuses, *(status.get("initContainerStatuses") or [])]:
        state = cs.get("state") or {}
        if "terminated" in state and lost is None and any(cs is m for m in main_statuses):
            lost = _ended(cs)
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            image_pull_error = f"{waiting['reason']}: {waiting.get('message') or cs.get('image')}"
            image_pull_permanent = image_pull_permanent or (
                waiting["reason"] in PERMANENT_PULL_REASONS
                or any(w in (waiting.get("message") or "").lower() for w in PERMANENT_PULL_WORDS))
        elif waiting.get("reason") in CONTAINER_CONFIG_REASONS and not any(
                w in (waiting.get("message") or "").lower() for w in TRANSIENT_CONTAINER_WORDS):
            config_error = f"{waiting['reason']}: {waiting.get('message') or ''}".strip()
    scheduled = conditions.get("PodScheduled", {})
    scheduled_at = (parse_time(scheduled.get("lastTransitionTime"))
                    if scheduled.get("status") == "True" else None)
    unschedulable = None
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        unschedulable = scheduled.get("message") or "no node can run the pod"
    return PodObservation(
        exists=True,
        ready=ready,
        probed=probed,
        running=phase == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        created_at=parse_time(meta.get("creationTimestamp")),
        scheduled_at=scheduled_at,
        lost=lost,
        image_pull_error=image_pull_error,
        image_pull_permanent=image_pull_permanent,
        config_error=config_error,
        unschedulable=unschedulable,
        network=(meta.get("labels") or {}).get(LABEL_NETWORK),
        service_failure=service_failure(pod),
        fence_failure=fence_failure(pod),
        container_exit=bool(lost) and container_exit,
        runner=next((v["configMap"].get("name") for v in (pod.get("spec") or {}).get("volumes")
                     or [] if v.get("name") == "runner" and v.get("configMap")), None),
        go_runner=go_runner_of(pod.get("spec") or {}),
    )


OWN_LIMIT_EVICTIONS = (
    "ephemeral local storage usage exceeds the total limit of containers",
    "exceeded its local ephemeral storage limit",
    "Usage of EmptyDir volume",
)
"""The kubelet's words (`pkg/kubelet/eviction`) when it evicts a pod for the pod's own limits:
its containers' `ephemeral-storage` (the task's storage_mb) or an emptyDir's sizeLimit. A
node low on disk or memory evicts with "The node was low on resource" instead: the cluster's."""


def over_own_limit(status: dict[str, Any]) -> bool:
    """The pod was evicted for going over its own storage limits (`OWN_LIMIT_EVICTIONS`)."""
    message = status.get("message") or ""
    return status.get("reason") == "Evicted" and any(w in message for w in OWN_LIMIT_EVICTIONS)


def go_runner_of(spec: dict[str, Any]) -> str | None:
    """Which Go runner a pod's spec gives it (`PodObservation.go_runner`)."""
    for v in spec.get("volumes") or []:
        if v.get("name") == "runner" and v.get("projected"):
            sources = v["projected"].get("sources") or [{}]
            return (sources[0].get("configMap") or {}).get("name")
    return next((c.get("image") for c in spec.get("initContainers") or []
                 if c.get("name") == RUNNER_INIT_CONTAINER), None)


def fence_failure(pod: dict[str, Any]) -> str | None:
    """The pod start's fence message when it failed (the runner's own words), else None: the
    fence init container's, or the main container's whose command is the runner's fence
    (`render.pod.fence_start`); in both, nothing of the task's image ran."""
    status = pod.get("status") or {}
    fenced_main = any(c.get("name") == "main" and (c.get("command") or [])[:2]
                      == [RUNNER_PATH, "fence"]
                      for c in (pod.get("spec") or {}).get("containers") or [])
    fences = [(cs, True) for cs in status.get("initContainerStatuses") or []
              if cs.get("name") == FENCE_INIT_CONTAINER]
    if fenced_main:
        fences += [(cs, False) for cs in status.get("containerStatuses") or []
                   if cs.get("name") == "main"]
    for cs, init in fences:
        ended = (cs.get("state") or {}).get("terminated") or {}
        if not ended or ended.get("exitCode") == 0:
            continue
        message = (ended.get("message") or "").strip()[:1000]
        if init:
            return message or (f"the network fence failed ({ended.get('reason') or 'Error'}, "
                               f"exit code {ended.get('exitCode')})")
        if message.startswith(FENCE_MARK):
            return message
    return None


SERVICE_LOG_LINES = 15


def service_failure(pod: dict[str, Any]) -> str | None:
    """Why a docker-compose service of the pod did not start (None: none failed): a sidecar
    that restarted before `main` ran (its healthcheck never passed, or it exited), or a one-shot
    service that exited non-zero; with the tail of its log (its termination message)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    services = {c.get("name"): c for c in spec.get("initContainers") or []
                if not str(c.get("name", "")).startswith("agent-")
                and c.get("name") not in (RUNNER_INIT_CONTAINER, FENCE_INIT_CONTAINER)}
    main_started = any(cs.get("name") == "main" and ("running" in (cs.get("state") or {})
                                                      or "terminated" in (cs.get("state") or {}))
                       for cs in status.get("containerStatuses") or [])
    for cs in status.get("initContainerStatuses") or []:
        container = services.get(cs.get("name"))
        if container is None:
            continue
        sidecar = container.get("restartPolicy") == "Always"
        ended = ((cs.get("state") or {}).get("terminated")
                 or ((cs.get("lastState") or {}).get("terminated") if sidecar else None))
        if not ended or (not sidecar and ended.get("exitCode") == 0):
            continue
        if sidecar and main_started:
            continue  # a crash mid-trial: the kubelet restarts it (docs/compose.md)
        name, code = cs.get("name"), ended.get("exitCode")
        if sidecar and container.get("startupProbe") and code in (137, 143):
            probe = container["startupProbe"]
            why = (f"service {name} never became healthy: its healthcheck failed "
                   f"{probe.get('failureThreshold')} times, every {probe.get('periodSeconds')} s")
        else:
            why = f"service {name} exited with code {code} ({ended.get('reason') or 'Error'})"
        lines = (ended.get("message") or "").rstrip().splitlines()[-SERVICE_LOG_LINES:]
        tail = "\n".join(lines) if lines else "(no output)"
        return f"{why}; the end of its log:\n{tail}"
    return None


def _terminated(status: dict[str, Any]) -> str | None:
    for cs in status.get("containerStatuses") or []:
        if (cs.get("state") or {}).get("terminated"):
            return _ended(cs)
    return None


RUNTIME_MESSAGES = frozenset({"StartError", "ContainerCannotRun"})
"""Terminations whose message is the container runtime's (why the container could not start:
`chdir to cwd ("/etc/passwd") … not a directory`). Any other message is what the container
wrote to its termination log, which an agent can write to: it stays out of the status."""


def _ended(cs: dict[str, Any]) -> str:
    """A terminated container, with the runtime's message when it is the runtime's."""
    t = cs["state"]["terminated"]
    runtime = t.get("reason") in RUNTIME_MESSAGES
    message = (t.get("message") or "").strip()[:300] if runtime else ""
    return (f"container {cs.get('name')} terminated ({t.get('reason') or 'Error'}, exit code "
            f"{t.get('exitCode')})" + (f": {message}" if message else ""))


def _idle(pod: dict[str, Any], conditions: dict[str, Any], phase: str | None) -> bool:
    """No phase runs in a running pod. With a `probe` container (`render.pod.probe_container`)
    that container is Ready while a phase runs; without, the pod is Ready while none does (an
    older operator's exec probe) or, with no probe at all, once its containers run."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not any(c.get("name") == PROBE_CONTAINER for c in containers):
        return conditions.get("Ready", {}).get("status") == "True"
    statuses = {cs.get("name"): cs for cs in (pod.get("status") or {}).get("containerStatuses")
                or []}
    probe = statuses.get(PROBE_CONTAINER)
    return (phase == "Running" and probe is not None and "running" in (probe.get("state") or {})
            and not probe.get("ready"))
