"""The API calls of warm pods (`docs/warm-pods.md`): list a pool's pods, create and delete them
(a delete under the pod's resourceVersion, so a pod claimed meanwhile is not deleted), claim
one for a trial (a merge patch under its resourceVersion: a 409 means another trial got it),
and deliver the agent's Secrets into a claimed pod's `secrets` container over an exec's stdin
(never a command line)."""

from __future__ import annotations

import base64
import logging
from typing import Any

from kubernetes.client import V1DeleteOptions, V1Preconditions

from shipyard.api.conventions import (
    LABEL_COMPONENT,
    LABEL_TRIAL,
    LABEL_WARM_KEY,
    LABEL_WARM_POOL,
    RUNNER_PATH,
    SECRETS_CONTAINER,
    selector_string,
)
from shipyard.api.models import GROUP, VERSION
from shipyard.kube import objects, runner
from shipyard.kube.client import core, custom
from shipyard.kube.errors import ApiException
from shipyard.kube.objects import _sanitize
from shipyard.kube.owned import ForeignObject, create_owned

log = logging.getLogger("shipyard.warm")


def list_pods(namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    items = core().list_namespaced_pod(namespace, label_selector=selector_string(labels)).items
    return [_sanitize(p) for p in items]


def pool_pods(namespace: str, pool: str) -> list[dict[str, Any]]:
    """Every pod a pool made, claimed or not (the claimed keep the pool's label)."""
    return list_pods(namespace, {LABEL_WARM_POOL: pool})


def claimable_pods(namespace: str, key: str) -> list[dict[str, Any]]:
    """Unclaimed pods of this fit, of any pool in the namespace."""
    return list_pods(namespace, {LABEL_WARM_KEY: key, LABEL_COMPONENT: "warm"})


def trial_env_pods(namespace: str, trial_label: str) -> list[dict[str, Any]]:
    """The trial's environment pods that are not being deleted: a warm pod it claimed, or a
    pod it created (either before an operator restart)."""
    pods = list_pods(namespace, {LABEL_TRIAL: trial_label, LABEL_COMPONENT: "environment"})
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def create_pod(pod: dict[str, Any]) -> dict[str, Any]:
    return _sanitize(core().create_namespaced_pod(pod["metadata"]["namespace"], pod))


def delete_unclaimed(namespace: str, name: str, resource_version: str) -> bool:
    """Delete the pod unless it changed since it was seen (claimed meanwhile); False then."""
    options = V1DeleteOptions(grace_period_seconds=0,
                              preconditions=V1Preconditions(resource_version=resource_version))
    try:
        core().delete_namespaced_pod(name, namespace, body=options)
    except ApiException as e:
        if e.status == 404:
            return True
        if e.status == 409:
            return False
        raise
    return True


def claim(namespace: str, name: str, patch: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Apply the claim patch (it carries the pod's resourceVersion); None when the pod was
    claimed, changed or deleted meanwhile (404, 409; 422: the patch no longer applies, e.g.
    the warm label it removes is gone)."""
    try:
        return _sanitize(core().patch_namespaced_pod(name, namespace, patch))
    except ApiException as e:
        if e.status in (404, 409, 422):
            return None
        raise


def secret_files(namespace: str, names: tuple[str, ...]) -> list[tuple[int, str, bytes]]:
    """(index, key, value) of each Secret's keys, for the Secrets that exist (a missing one is
    left out: the runner's put-secrets then fails the trial with SecretNotFound)."""

    files = []
    for i, name in enumerate(names):
        try:
            secret = core().read_namespaced_secret(name, namespace)
        except ApiException as e:
            if e.status == 404:
                continue
            raise
        for key, value in (secret.data or {}).items():
            files.append((i, key, base64.b64decode(value)))
    return files


def deliver_secrets(namespace: str, pod: str, names: tuple[str, ...]) -> runner.Reply:
    """Write the agent's Secrets where a pod's mounted ones would be (the runner's
    <secrets source>/<index>/<key>) in its `secrets` container, whose root file system the
    main container cannot read: one exec per file of the runner's `take-secret`, the value on
    stdin (no program of the task's image, whose `sh` or `head` a task may replace, sees it).
    The runner's `put-secrets` then works as for mounted Secrets."""
    reply = runner.Reply("ok")
    for index, key, value in secret_files(namespace, names):
        reply = runner.exec_with_stdin(
            namespace, pod, SECRETS_CONTAINER,
            [RUNNER_PATH, "take-secret", str(index), key, str(len(value))], value)
        if reply.state != "ok":
            return reply
    return reply


def list_pools(namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    return objects.list_custom("warmpools", namespace, selector_string(labels))


def apply_pool(body: dict[str, Any]) -> None:
    """Create the Sweep's WarmPool, or set the spec of its own there; one a deleted Sweep of
    the same name left is replaced (`owned.create_owned`), one that is not a Sweep's is left
    alone (the Sweep's trials of that task then start cold)."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        created = create_owned(
            lambda: custom().create_namespaced_custom_object(GROUP, VERSION, ns, "warmpools",
                                                             body),
            lambda: objects.get_custom("warmpools", ns, name),
            lambda options: custom().delete_namespaced_custom_object(
                GROUP, VERSION, ns, "warmpools", name, body=options), body)
    except ForeignObject as e:
        log.warning(f"no warm pods for this pool: {e}")
        return
    if created is None:
        custom().patch_namespaced_custom_object(GROUP, VERSION, ns, "warmpools", name,
                                                {"spec": body["spec"]})


def delete_pool(namespace: str, name: str) -> None:
    objects.delete_custom("warmpools", namespace, name)
