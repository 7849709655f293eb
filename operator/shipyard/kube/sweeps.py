"""The API calls of a Sweep: creating its Trials (a 409 means the slot's Trial exists),
listing its Trials and the namespace's Tasks, writing its status."""

from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException

from shipyard.api.models import GROUP, VERSION
from shipyard.kube import objects
from shipyard.kube.client import custom

_requests = 0


def _count() -> None:
    global _requests
    _requests += 1


def requests_made() -> int:
    """API requests made for Sweeps (Trial creates, lists, status writes); bench/ reads it."""
    return _requests


def create_trial(namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The created Trial, or None when one of that name exists already."""
    _count()
    try:
        return custom().create_namespaced_custom_object(GROUP, VERSION, namespace, "trials",
                                                        body)
    except ApiException as e:
        if e.status == 409:
            return None
        raise


def list_trials(namespace: str, selector: str) -> list[dict[str, Any]]:
    _count()
    return objects.list_custom("trials", namespace, selector)


def list_tasks(namespace: str) -> list[dict[str, Any]]:
    _count()
    return objects.list_custom("tasks", namespace)


def write_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    _count()
    objects.patch_status("sweeps", namespace, name, status)


def set_spec_fields(namespace: str, name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch fields of a Sweep's spec (`shipyard sweep retry`, suspend/resume)."""
    return custom().patch_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", name,
                                                   {"spec": fields})
