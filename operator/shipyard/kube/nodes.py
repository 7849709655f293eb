"""The nodes' allocatable CPU and memory (as quantities), for `plan.capacity`."""

from __future__ import annotations

import threading
import time

from kubernetes.client.rest import ApiException

from shipyard.kube.client import core

CACHE_SEC = 30.0
_lock = threading.Lock()
_cache: tuple[float, tuple[tuple[str, str, str], ...]] | None = None


def _list() -> tuple[tuple[str, str, str], ...]:
    try:
        nodes = core().list_node().items
    except ApiException:  # e.g. not allowed to look: capacity unknown, nothing refused
        return ()
    found = []
    for node in nodes:
        if node.spec and node.spec.unschedulable:
            continue
        allocatable = (node.status.allocatable or {}) if node.status else {}
        if "cpu" in allocatable and "memory" in allocatable:
            found.append((node.metadata.name, allocatable["cpu"], allocatable["memory"]))
    return tuple(found)


def allocatable() -> tuple[tuple[str, str, str], ...]:
    """(name, cpu, memory) of the schedulable (not cordoned) nodes, cached for 30 s; empty
    when the operator may not list nodes."""
    global _cache
    with _lock:
        if _cache is not None and time.monotonic() - _cache[0] < CACHE_SEC:
            return _cache[1]
    nodes = _list()
    with _lock:
        _cache = (time.monotonic(), nodes)
    return nodes
