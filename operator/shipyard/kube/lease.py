"""The coordination.k8s.io/v1 Lease calls of leader election (`reconcile.leader` decides).

The lease has an API client of its own (its own connection pool), so that renewals never queue
behind the trials' requests on a busy operator; each call has a short timeout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from shipyard.api.conventions import MANAGED_BY
from shipyard.kube.client import configuration


class LeaseConflict(Exception):
    """Someone else wrote the Lease first (409)."""


@dataclass(frozen=True)
class Lease:
    holder: str | None
    renew_time: str | None
    acquire_time: str | None
    duration_sec: int | None
    transitions: int
    resource_version: str


@cache
def _api() -> client.CoordinationV1Api:
    return client.CoordinationV1Api(client.ApiClient(configuration()))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime


def _lease(obj: Any) -> Lease:
    spec = obj.spec
    return Lease(
        holder=spec.holder_identity or None,
        renew_time=spec.renew_time.isoformat() if spec.renew_time else None,
        acquire_time=spec.acquire_time.isoformat() if spec.acquire_time else None,
        duration_sec=spec.lease_duration_seconds,
        transitions=spec.lease_transitions or 0,
        resource_version=obj.metadata.resource_version,
    )


def read(namespace: str, name: str, timeout: float) -> Lease | None:
    try:
        return _lease(_api().read_namespaced_lease(name, namespace, _request_timeout=timeout))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _spec(holder: str, duration_sec: int, transitions: int,
          acquired: str | None) -> dict[str, Any]:
    """`acquired`: the acquireTime to keep (None: acquired now)."""
    now = _now()
    return {"holderIdentity": holder, "leaseDurationSeconds": duration_sec, "renewTime": now,
            "leaseTransitions": transitions, "acquireTime": acquired or now}


def _metadata(namespace: str, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}


def create(namespace: str, name: str, holder: str, duration_sec: int, timeout: float) -> Lease:
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": _metadata(namespace, name),
            "spec": _spec(holder, duration_sec, 0, acquired=None)}
    try:
        return _lease(_api().create_namespaced_lease(namespace, body, _request_timeout=timeout))
    except ApiException as e:
        if e.status == 409:
            raise LeaseConflict(f"lease {namespace}/{name} was created meanwhile") from None
        raise


def write(namespace: str, name: str, previous: Lease, holder: str, duration_sec: int,
          timeout: float) -> Lease:
    """Renew (same holder), take over (another holder: a transition, acquireTime now) or release
    (holder ""); only if the Lease is still at `previous`'s resourceVersion."""
    changed = holder != (previous.holder or "")
    spec = _spec(holder, duration_sec, previous.transitions + (1 if changed and holder else 0),
                 acquired=None if changed else previous.acquire_time)
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {**_metadata(namespace, name),
                         "resourceVersion": previous.resource_version},
            "spec": spec}
    try:
        return _lease(_api().replace_namespaced_lease(name, namespace, body,
                                                      _request_timeout=timeout))
    except ApiException as e:
        if e.status == 409:
            raise LeaseConflict(f"lease {namespace}/{name} changed meanwhile") from None
        raise
