"""Creating Trials and reading what the CLI shows: Trials, Tasks and their logs ConfigMaps."""

from __future__ import annotations

from typing import Any

from shipyard.api.conventions import CANCEL_ANNOTATION
from shipyard.api.models import GROUP, VERSION
from shipyard.kube import objects
from shipyard.kube.client import custom


def create_trial(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom().create_namespaced_custom_object(GROUP, VERSION, namespace, "trials", body)


def request_cancel(namespace: str, name: str) -> dict[str, Any]:
    """Set the cancel annotation; the operator then stops the trial as `Cancelled`."""
    patch = {"metadata": {"annotations": {CANCEL_ANNOTATION: "true"}}}
    return custom().patch_namespaced_custom_object(GROUP, VERSION, namespace, "trials", name,
                                                   patch)


def configmap_data(namespace: str, name: str) -> dict[str, str] | None:
    cm = objects.get_configmap(namespace, name)
    return None if cm is None else dict(cm.get("data") or {})


# What the CLI reads, shared with the operator's own access functions.
get = objects.get_custom
list_objects = objects.list_custom


def current_namespace() -> str:
    """The namespace of the kubeconfig's current context (in a pod: its own), else default."""
    from kubernetes import config

    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        pass
    try:
        _, context = config.list_kube_config_contexts()
    except Exception:  # no kubeconfig: the client reports that when it is used
        return "default"
    return (context or {}).get("context", {}).get("namespace") or "default"


def operator_deployments(selector: str) -> list[dict[str, Any]] | None:
    """The Deployments matching `selector` in every namespace (the CLI's hint about which
    namespaces the installed operators serve); None when this user may not list them."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from shipyard.kube.client import api_client

    try:
        found = client.AppsV1Api(api_client()).list_deployment_for_all_namespaces(
            label_selector=selector, _request_timeout=10)
    except ApiException as e:
        if e.status in (401, 403):
            return None
        raise
    return [api_client().sanitize_for_serialization(d) for d in found.items]
