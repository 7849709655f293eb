"""Kueue's Workloads and ResourceFlavors (kueue.x-k8s.io/v1beta2): create, read, delete."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client.rest import ApiException

from shipyard.api.conventions import KUEUE_GROUP, KUEUE_VERSION
from shipyard.kube.client import custom

_served: tuple[float, bool] | None = None
_served_lock = threading.Lock()
SERVED_CACHE_SEC = 60.0


def served() -> bool:
    """Is Kueue's Workload API served here (cached for a minute)?"""
    global _served
    with _served_lock:
        if _served is not None and time.monotonic() - _served[0] < SERVED_CACHE_SEC:
            return _served[1]
    try:
        listed = custom().get_api_resources(KUEUE_GROUP, KUEUE_VERSION, _request_timeout=10)
        items = (listed.get("resources", []) if isinstance(listed, dict)
                 else [{"name": r.name} for r in listed.resources or []])
        found = any(r.get("name") == "workloads" for r in items)
    except ApiException as e:
        if e.status not in (403, 404, 503):
            raise
        found = False
    with _served_lock:
        _served = (time.monotonic(), found)
    return found


def get_workload(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return custom().get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace,
                                                     "workloads", name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def create_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """Create it; the existing one of the same name (an operator restarted) is returned."""
    ns, name = workload["metadata"]["namespace"], workload["metadata"]["name"]
    try:
        return custom().create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns,
                                                        "workloads", workload)
    except ApiException as e:
        if e.status == 409:
            existing = get_workload(ns, name)
            if existing is not None:
                return existing
        raise


def delete_workload(namespace: str, name: str) -> None:
    """Delete it (Kueue releases its quota at once); gone already is fine."""
    try:
        custom().delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace,
                                                 "workloads", name)
    except ApiException as e:
        if e.status != 404:
            raise


def list_workloads(namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    out = custom().list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace,
                                                 "workloads", label_selector=labels)
    return out.get("items") or []


def get_resource_flavor(name: str) -> dict[str, Any] | None:
    try:
        return custom().get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors",
                                                  name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise



def get_priority_class_value(name: str) -> int | None:
    """The value of a WorkloadPriorityClass; None when there is none of that name."""
    try:
        found = custom().get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION,
                                                   "workloadpriorityclasses", name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return int(found.get("value") or 0)
