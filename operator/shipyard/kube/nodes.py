"""The nodes' allocatable CPU and memory (as quantities), for `plan.capacity`, and their
taints, for a pod the scheduler holds off a tainted node."""

from __future__ import annotations

import threading
import time

from kubernetes.client.rest import ApiException

from shipyard.kube.client import core

NodeTaints = tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...]
"""(node, its taints as (key, value, effect)), as `plan.capacity.NodeTaints`."""

CACHE_SEC = 30.0
TAINTS_CACHE_SEC = 5.0
_lock = threading.Lock()
_cache: tuple[float, tuple[tuple[str, str, str], ...]] | None = None
_taints: tuple[float, NodeTaints] | None = None


def _list() -> tuple[tuple[tuple[str, str, str], ...], NodeTaints]:
    try:
        nodes = core().list_node().items
    except ApiException:  # e.g. not allowed to look: capacity unknown, nothing refused
        return (), ()
    found, taints = [], []
    for node in nodes:
        if node.spec and node.spec.unschedulable:
            continue
        allocatable = (node.status.allocatable or {}) if node.status else {}
        if "cpu" in allocatable and "memory" in allocatable:
            found.append((node.metadata.name, allocatable["cpu"], allocatable["memory"]))
        taints.append((node.metadata.name, tuple(
            (t.key or "", t.value or "", t.effect or "")
            for t in (node.spec.taints or [] if node.spec else []))))
    return tuple(found), tuple(taints)


def _refresh() -> tuple[tuple[tuple[str, str, str], ...], NodeTaints]:
    global _cache, _taints
    nodes, taints = _list()
    with _lock:
        now = time.monotonic()
        _cache, _taints = (now, nodes), (now, taints)
    return nodes, taints


def allocatable() -> tuple[tuple[str, str, str], ...]:
    """(name, cpu, memory) of the schedulable (not cordoned) nodes, cached for 30 s; empty
    when the operator may not list nodes."""
    with _lock:
        if _cache is not None and time.monotonic() - _cache[0] < CACHE_SEC:
            return _cache[1]
    return _refresh()[0]


def taints() -> NodeTaints:
    """(name, taints) of the schedulable nodes, cached for 5 s (a node's condition taints come
    and go); empty when the operator may not list nodes."""
    with _lock:
        if _taints is not None and time.monotonic() - _taints[0] < TAINTS_CACHE_SEC:
            return _taints[1]
    return _refresh()[1]
