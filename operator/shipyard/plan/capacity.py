"""What a trial's pods request and whether they can ever fit a node (pure).

A task's `cpus` is its pod's CPU limit; its request is `cpus` times the operator's ratio, at
most its cap (`SHIPYARD_TRIAL_CPU_REQUEST_RATIO`, `SHIPYARD_TRIAL_CPU_REQUEST_MAX`; the chart's
`trials.cpuRequestRatio`, `trials.cpuRequestMax`). With the defaults (ratio 1, no cap) a trial
is guaranteed what it declares, as on GKE with Harbor; on a small cluster (a laptop, a CI
runner) a lower ratio lets a `cpus = 2` task run on a 2-core node at all.

A pod that does not fit any node *now* but fits the largest node's allocatable waits for
capacity (other trials end); one that can never fit the largest node is refused at once with
the request that did not fit and how to change it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shipyard.plan.accelerators import PodOverrides

MI = 1024 * 1024
REQUEST_SETTINGS = ("SHIPYARD_TRIAL_CPU_REQUEST_RATIO / SHIPYARD_TRIAL_CPU_REQUEST_MAX (the "
                    "chart's trials.cpuRequestRatio / trials.cpuRequestMax; limits stay as "
                    "declared)")


@dataclass(frozen=True)
class NodeCapacity:
    """A schedulable node's allocatable CPU and memory."""

    name: str
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class PodRequests:
    cpu_millis: int
    memory_bytes: int

    def __add__(self, other: PodRequests) -> PodRequests:
        return PodRequests(self.cpu_millis + other.cpu_millis,
                           self.memory_bytes + other.memory_bytes)

    def fits(self, node: NodeCapacity) -> bool:
        return self.cpu_millis <= node.cpu_millis and self.memory_bytes <= node.memory_bytes

    def describe(self) -> str:
        return f"cpu {format_cpu(self.cpu_millis)}, memory {format_memory(self.memory_bytes)}"


SIDECAR_REQUESTS = PodRequests(10, 16 * MI)
"""The `probe` container's requests (`render.pod.probe_container`), which every trial pod with a
probe image has beside `main`."""

_CPU = re.compile(r"^([0-9]*\.?[0-9]+)(m?)$")
_MEMORY = re.compile(r"^([0-9]*\.?[0-9]+)(Ki|Mi|Gi|Ti|k|K|M|G|T)?$")
_MEMORY_UNITS = {None: 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
                 "Ki": 1024, "Mi": MI, "Gi": 1024**3, "Ti": 1024**4}


def parse_cpu(quantity: str | None) -> int | None:
    """Millicores of a CPU quantity ("2", "1.5", "500m"); None when unreadable."""
    m = _CPU.match((quantity or "").strip())
    if not m:
        return None
    value = float(m.group(1))
    return round(value if m.group(2) else value * 1000)


def parse_memory(quantity: str | None) -> int | None:
    """Bytes of a memory quantity ("2Gi", "512Mi", "1G", "1048576"); None when unreadable."""
    m = _MEMORY.match((quantity or "").strip())
    if not m:
        return None
    return round(float(m.group(1)) * _MEMORY_UNITS[m.group(2)])


def format_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def format_memory(size: int) -> str:
    return f"{size // MI}Mi" if size % MI == 0 else str(size)


def cpu_request_millis(cpus: float, overrides: PodOverrides) -> int:
    """The CPU request for a declared `cpus` (the limit): times the ratio, at most the cap."""
    request = max(1, round(cpus * 1000 * overrides.cpu_request_ratio))
    if overrides.cpu_request_max_millis is not None:
        request = min(request, overrides.cpu_request_max_millis)
    return request


def pod_requests(cpus: float | None, memory_mb: int | None, overrides: PodOverrides,
                 sidecars: bool = True) -> PodRequests:
    """What the scheduler must find for the pod: `main`'s requests (the task's, else the
    operator's defaults) and the sidecars'."""
    if cpus is not None:
        cpu = cpu_request_millis(cpus, overrides)
    else:
        cpu = parse_cpu(overrides.default_requests.get("cpu")) or 0
    if memory_mb is not None:
        memory = memory_mb * MI
    else:
        memory = parse_memory(overrides.default_requests.get("memory")) or 0
    main = PodRequests(cpu, memory)
    return main + SIDECAR_REQUESTS if sidecars else main


def fits_some(requests: PodRequests, nodes: tuple[NodeCapacity, ...]) -> bool | None:
    """Whether some node could ever hold the pod (None: the nodes are not known)."""
    if not nodes:
        return None
    return any(requests.fits(n) for n in nodes)


def largest(nodes: tuple[NodeCapacity, ...]) -> NodeCapacity:
    return max(nodes, key=lambda n: (n.cpu_millis, n.memory_bytes))


def never_fits_message(what: str, requests: PodRequests, cpus: float | None,
                       nodes: tuple[NodeCapacity, ...]) -> str:
    """Why a pod can never be scheduled here, and what to change."""
    big = largest(nodes)
    declared = f" (the task declares cpus = {cpus:g})" if cpus is not None else ""
    return (f"the {what} requests {requests.describe()}{declared}, more than the largest node "
            f"({big.name}) can ever give: it has cpu {format_cpu(big.cpu_millis)}, memory "
            f"{format_memory(big.memory_bytes)} allocatable. Lower the task's cpus/memory_mb "
            f"or the operator's CPU request setting {REQUEST_SETTINGS}")


_REASON = re.compile(r"^(\d+)\s+(.+)$")
TAINT_REASON = "untolerated taint"
"""The scheduler's words for a node whose taints the pod does not tolerate (since Kubernetes
1.33 without naming them)."""
TEMPORARY_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
    "node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/network-unavailable",
})
"""The taints the node lifecycle controller puts on a node for a condition and takes off when
it passes (a full disk, memory pressure, a kubelet restarting)."""

NodeTaints = tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...]
"""(node, its taints as (key, value, effect)) of the schedulable nodes."""


def waits_for_capacity(message: str, temporary_taints: bool = False) -> bool:
    """Whether the scheduler's Unschedulable message says only that the nodes are full now
    (Insufficient cpu/memory, too many pods) or, with `temporary_taints`, carry a taint that
    passes (`passing_taints`), not that no node may take the pod at all. Its form: `0/1 nodes
    are available: 1 Insufficient cpu, 2 ... [.,] preemption: ...`; phrases without a node
    count (`no new claims to deallocate`) are not reasons."""
    head = (message or "").split("preemption:")[0]
    if "nodes are available:" not in head:
        return False
    listed = re.split(r"[,.]\s*", head.split("nodes are available:", 1)[1])
    reasons = [m.group(2).strip() for m in map(_REASON.match, (p.strip() for p in listed)) if m]
    return bool(reasons) and all(r.startswith("Insufficient ") or r == "Too many pods"
                                 or (temporary_taints and TAINT_REASON in r) for r in reasons)


def _tolerates(toleration: dict, key: str, value: str, effect: str) -> bool:
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == key
    return toleration.get("key") == key and (toleration.get("value") or "") == value


def passing_taints(nodes: NodeTaints, tolerations: list[dict]) -> tuple[str, ...]:
    """The taint keys keeping the pod off a node whose untolerated taints all pass
    (`TEMPORARY_TAINTS`), or () when no node is only held so: the pod waits for them to go."""
    for _, taints in nodes:
        held = sorted({key for key, value, effect in taints
                       if effect in ("NoSchedule", "NoExecute")
                       and not any(_tolerates(t, key, value, effect) for t in tolerations)})
        if held and all(key in TEMPORARY_TAINTS for key in held):
            return tuple(held)
    return ()


def unschedulable_message(scheduler: str, what: str, requests: PodRequests,
                          cpus: float | None) -> str:
    """The Unschedulable failure: the scheduler's words, the request that did not fit, and
    how to change it."""
    declared = f" (the task declares cpus = {cpus:g})" if cpus is not None else ""
    return (f"{scheduler.strip()} The {what} requests {requests.describe()}{declared}; "
            f"requests are set by {REQUEST_SETTINGS}.")


def node_capacities(allocatable: tuple[tuple[str, str, str], ...]
                    ) -> tuple[NodeCapacity, ...]:
    """The nodes from their (name, cpu, memory) allocatable quantities (unreadable ones left
    out)."""
    found = []
    for name, cpu, memory in allocatable:
        cpu_millis, size = parse_cpu(cpu), parse_memory(memory)
        if cpu_millis is not None and size is not None:
            found.append(NodeCapacity(name, cpu_millis, size))
    return tuple(found)
