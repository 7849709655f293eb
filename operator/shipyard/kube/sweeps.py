"""The API calls of a Sweep: creating its Trials (a 409 means the slot's Trial exists),
listing its Trials and the namespace's Tasks, writing its status."""

from __future__ import annotations

from collections import Counter
from typing import Any

from shipyard.api.models import GROUP, VERSION
from shipyard.kube import objects
from shipyard.kube.client import custom
from shipyard.kube.errors import create_or_none

_requests: Counter[str] = Counter()


def _count(kind: str) -> None:
    _requests[kind] += 1


def requests_made() -> dict[str, int]:
    """API requests made for Sweeps, by kind (Trial creates, lists, status writes)."""
    return dict(_requests)


def create_trial(namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The created Trial, or None when one of that name exists already."""
    _count("create")
    return create_or_none(custom().create_namespaced_custom_object, GROUP, VERSION, namespace,
                          "trials", body)


def list_trials(namespace: str, selector: str) -> list[dict[str, Any]]:
    _count("list-trials")
    return objects.list_custom("trials", namespace, selector)


def list_tasks(namespace: str) -> list[dict[str, Any]]:
    _count("list-tasks")
    return objects.list_custom("tasks", namespace)


def write_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    _count("status")
    objects.patch_status("sweeps", namespace, name, status)


def set_spec_fields(namespace: str, name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch fields of a Sweep's spec (`shipyard sweep retry`, suspend/resume)."""
    return custom().patch_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", name,
                                                   {"spec": fields})
