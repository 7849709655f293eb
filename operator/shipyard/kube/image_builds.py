"""Reading and writing ImageBuilds, their context ConfigMaps and build Jobs."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from shipyard.api.models import GROUP, VERSION
from shipyard.kube.client import api_client, core, custom
from shipyard.kube.errors import create_or_none
from shipyard.kube.objects import ensure_configmap

PLURAL = "imagebuilds"


def _batch() -> client.BatchV1Api:
    return client.BatchV1Api(api_client())


def create_or_adopt(image_build: dict[str, Any]) -> dict[str, Any]:
    """Create the ImageBuild, or add the Task's ownerReference to the existing one (another
    Task with the same context made it): one build per context hash, GC with the last owner."""
    ns, name = image_build["metadata"]["namespace"], image_build["metadata"]["name"]
    owner = image_build["metadata"]["ownerReferences"][0]
    api = custom()
    try:
        return api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, image_build)
    except ApiException as e:
        if e.status != 409:
            raise
    for _ in range(5):
        existing = api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        owners = existing["metadata"].get("ownerReferences") or []
        if any(o.get("uid") == owner["uid"] for o in owners):
            return existing
        body = {"metadata": {"ownerReferences": [*owners, owner],
                             "resourceVersion": existing["metadata"]["resourceVersion"]}}
        try:
            return api.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, body,
                _content_type="application/merge-patch+json")
        except ApiException as e:
            if e.status != 409:  # a concurrent adopter: read again
                raise
    raise RuntimeError(f"could not adopt ImageBuild {ns}/{name}")


def ensure_context(configmap: dict[str, Any]) -> None:
    ensure_configmap(configmap)


def get_job(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return api_client().sanitize_for_serialization(
            _batch().read_namespaced_job(name, namespace))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def create_job(job: dict[str, Any], secret: dict[str, Any] | None = None) -> None:
    """Create the build Job (and first the Secret it mounts); existing ones (a restarted
    operator) are kept."""
    if secret is not None:
        create_or_none(core().create_namespaced_secret, secret["metadata"]["namespace"], secret)
    create_or_none(_batch().create_namespaced_job, job["metadata"]["namespace"], job)


def job_pods(namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of this Job (by its uid: a deleted Job of the same name may leave pods)."""
    uid = job["metadata"]["uid"]
    pods = core().list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/controller-uid={uid}").items
    return [api_client().sanitize_for_serialization(p) for p in pods]


def pod_log_tail(namespace: str, pod: str, container: str, lines: int = 40) -> str:
    try:
        return core().read_namespaced_pod_log(pod, namespace, container=container,
                                              tail_lines=lines)
    except ApiException:
        return ""


def job_log(namespace: str, job_name: str, container: str) -> str | None:
    """The whole log of a build Job's container (its newest pod); None when the Job or its pod
    is gone."""
    job = get_job(namespace, job_name)
    pods = job_pods(namespace, job) if job is not None else []
    if not pods:
        return None
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
    try:
        return core().read_namespaced_pod_log(pods[-1]["metadata"]["name"], namespace,
                                              container=container)
    except ApiException:
        return None
