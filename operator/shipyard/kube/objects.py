"""Reading and writing the objects Shipyard uses: pods, ConfigMaps, Tasks and Trials."""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes.client.rest import ApiException

from shipyard.api.models import GROUP, VERSION
from shipyard.kube.client import api_client, core, custom
from shipyard.kube.errors import create_or_none
from shipyard.kube.owned import ForeignObject, create_owned

log = logging.getLogger("shipyard.objects")


def _sanitize(obj: Any) -> Any:
    return api_client().sanitize_for_serialization(obj)


def get_pod(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return _sanitize(core().read_namespaced_pod(name, namespace))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def create_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Create the trial's pod; its own of the same name (a retried create) is returned, one a
    deleted namesake left is replaced (`owned.create_owned`)."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    for _ in range(3):
        created = create_owned(
            lambda: core().create_namespaced_pod(ns, pod), lambda: get_pod(ns, name),
            lambda options: core().delete_namespaced_pod(name, ns, body=options), pod)
        if created is not None:
            return _sanitize(created)
        existing = get_pod(ns, name)
        if existing is not None:
            return existing
    raise ForeignObject(f"pod {ns}/{name} keeps being deleted and made again by someone else")


def container_log(namespace: str, pod: str, container: str, limit_bytes: int) -> str:
    """The end of a container's log (its last `limit_bytes`, roughly); "" when there is none
    (the pod or container gone, never started)."""
    try:
        return core().read_namespaced_pod_log(pod, namespace, container=container,
                                              limit_bytes=limit_bytes) or ""
    except ApiException as e:
        if e.status in (400, 404):
            return ""
        raise


def delete_pod(namespace: str, name: str, grace_seconds: int = 0) -> None:
    try:
        core().delete_namespaced_pod(name, namespace, grace_period_seconds=grace_seconds)
    except ApiException as e:
        if e.status != 404:
            raise


class ForeignConfigMap(RuntimeError):
    """A content-addressed ConfigMap holds what the operator did not write, and could not be
    replaced."""


def same_content(found: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Does an existing ConfigMap carry exactly `wanted`'s data (and is it as immutable)?"""
    return all((found.get(k) or {}) == (wanted.get(k) or {}) for k in ("data", "binaryData")) \
        and bool(found.get("immutable")) == bool(wanted.get("immutable"))


def ensure_configmap(configmap: dict[str, Any]) -> None:
    """Create it unless it exists. Its name is content-addressed (the runner, a build context),
    so one found under it must hold that content: anyone who may write ConfigMaps in the
    namespace could have made it first, and a pod would then run their runner or build their
    context. A foreign one is deleted (only that object: its uid) and made again; one that
    cannot be replaced (a finalizer holds it, another writer races) raises `ForeignConfigMap`."""
    ns, name = configmap["metadata"]["namespace"], configmap["metadata"]["name"]
    for _ in range(2):
        if create_or_none(core().create_namespaced_config_map, ns, configmap) is not None:
            return
        try:
            found = _sanitize(core().read_namespaced_config_map(name, ns))
        except ApiException as e:
            if e.status == 404:  # deleted in between: create it again
                continue
            raise
        if same_content(found, configmap):
            return
        log.warning(f"ConfigMap {ns}/{name} does not hold what its name stands for (made by "
                    "someone other than a Shipyard operator): replacing it")
        try:
            core().delete_namespaced_config_map(name, ns, body={
                "preconditions": {"uid": found["metadata"]["uid"]}})
        except ApiException as e:
            if e.status not in (404, 409):
                raise
    raise ForeignConfigMap(f"ConfigMap {ns}/{name} holds content that no Shipyard operator "
                           "wrote and could not be replaced: delete it (and find out who made "
                           "it), then retry")


_ensured_lock = threading.Lock()
_ensured: dict[tuple[str, str], threading.Lock | None] = {}


def ensure_configmap_once(configmap: dict[str, Any]) -> None:
    """`ensure_configmap`, once per process for a content-addressed ConfigMap (the runner's),
    however many trials of a namespace start at once: one request, not one per trial."""
    key = (configmap["metadata"]["namespace"], configmap["metadata"]["name"])
    with _ensured_lock:
        lock = _ensured.setdefault(key, threading.Lock())
    if lock is None:
        return
    with lock:
        if _ensured.get(key) is None:
            return
        ensure_configmap(configmap)
        with _ensured_lock:
            _ensured[key] = None


def forget_configmap(namespace: str, name: str) -> None:
    """A ConfigMap `ensure_configmap_once` made was deleted: the next call makes it again."""
    with _ensured_lock:
        if _ensured.get((namespace, name), False) is None:
            del _ensured[(namespace, name)]


def ensured_configmaps() -> list[tuple[str, str]]:
    """(namespace, name) of each ConfigMap `ensure_configmap_once` made or found equal."""
    with _ensured_lock:
        return [k for k, v in _ensured.items() if v is None]


def merge_configmap_data(configmap: dict[str, Any], exists: bool = False) -> None:
    """Create the ConfigMap, or add its data keys to the existing one (`exists`: patch it
    without trying to create it first)."""
    ns, name = configmap["metadata"]["namespace"], configmap["metadata"]["name"]
    if exists:
        try:
            core().patch_namespaced_config_map(name, ns, {"data": configmap["data"]})
            return
        except ApiException as e:
            if e.status != 404:
                raise
    if create_owned(lambda: core().create_namespaced_config_map(ns, configmap),
                    lambda: get_configmap(ns, name),
                    lambda options: core().delete_namespaced_config_map(name, ns, body=options),
                    configmap) is None:
        core().patch_namespaced_config_map(name, ns, {"data": configmap["data"]})


def get_configmap(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return _sanitize(core().read_namespaced_config_map(name, namespace))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def get_custom(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return custom().get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def list_custom(plural: str, namespace: str | None, selector: str | None = None
                ) -> list[dict[str, Any]]:
    kwargs = {"label_selector": selector} if selector else {}
    if namespace:
        result = custom().list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, **kwargs)
    else:
        result = custom().list_cluster_custom_object(GROUP, VERSION, plural, **kwargs)
    return result.get("items", [])


def patch_status(plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the status subresource; lists (conditions, phases) are replaced whole."""
    try:
        custom().patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, {"status": status}
        )
    except ApiException as e:
        if e.status != 404:  # deleted meanwhile: nothing left to record
            raise


def delete_custom(plural: str, namespace: str, name: str) -> None:
    try:
        custom().delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except ApiException as e:
        if e.status != 404:
            raise
