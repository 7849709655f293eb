"""The objects of one image build: the `ImageBuild`, its context ConfigMap and its Job (pure).

The Job is the durable record of the build (`kubectl logs job/<name>` shows it): an init
container unpacks the context into an emptyDir, the main container runs `buildctl` against the
configured buildkitd with the dockerfile frontend, pushes the image and exports/imports a registry
cache. Push credentials (a dockerconfigjson Secret, or a Workload Identity service account) are
mounted only here. The Job's activeDeadlineSeconds enforces `build_timeout_sec`; on failure the
container's last log lines become its termination message (FallbackToLogsOnError).
"""

from __future__ import annotations

import base64
import math
import re
from typing import Any

from shipyard.api.conventions import LABEL_IMAGE_BUILD
from shipyard.api.models import API_VERSION, ImageBuildSpec
from shipyard.api.task_source import build_bundle, part_names, split_bundle
from shipyard.plan.images import ImageNeed, ImageSettings
from shipyard.render.pod import LABEL_COMPONENT, MANAGED_BY

CONTEXT_KEY = "context.tar.gz"
BUILD_CONTAINER = "buildctl"
TLS_KEYS = ("ca.crt", "tls.crt", "tls.key")
TLS_MOUNT = "/buildkit-tls"


def context_configmap_name(build: str) -> str:
    return f"{build}-context"


def build_labels(build: str, component: str) -> dict[str, str]:
    return {**MANAGED_BY, LABEL_COMPONENT: component, LABEL_IMAGE_BUILD: build}


def task_owner(task: dict[str, Any]) -> dict[str, Any]:
    """A non-controller owner: several Tasks may share one build; GC follows the last."""
    return {"apiVersion": API_VERSION, "kind": "Task", "name": task["metadata"]["name"],
            "uid": task["metadata"]["uid"], "controller": False,
            "blockOwnerDeletion": False}


def build_owner(image_build: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ImageBuild",
            "name": image_build["metadata"]["name"], "uid": image_build["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def build_image_build(task: dict[str, Any], need: ImageNeed, force: bool,
                      context_parts: int = 1) -> dict[str, Any]:
    name = need.build_name
    assert need.context_hash is not None
    spec = ImageBuildSpec(ref=need.ref, context_hash=need.context_hash,
                          context_config_map=context_configmap_name(name),
                          context_parts=context_parts if context_parts > 1 else None,
                          cache_ref=need.cache_ref, timeout_sec=need.timeout_sec, force=force)
    return {
        "apiVersion": API_VERSION,
        "kind": "ImageBuild",
        "metadata": {"name": name, "namespace": task["metadata"]["namespace"],
                     "labels": build_labels(name, "image-build"),
                     "ownerReferences": [task_owner(task)]},
        "spec": spec.model_dump(by_alias=True, mode="json"),
    }


def context_parts(files: dict[str, bytes]) -> list[bytes]:
    """The context (the files under the context directory) as a deterministic tar.gz, in
    ConfigMap-sized parts."""
    return split_bundle(build_bundle(files))


def build_context_configmaps(image_build: dict[str, Any],
                             parts: list[bytes]) -> list[dict[str, Any]]:
    spec = ImageBuildSpec.model_validate(image_build["spec"])
    name = image_build["metadata"]["name"]
    return [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": image_build["metadata"]["namespace"],
                     "labels": build_labels(name, "build-context"),
                     "ownerReferences": [build_owner(image_build)]},
        "immutable": True,  # one build's context: what its Job reads is what was checked
        "binaryData": {CONTEXT_KEY: base64.b64encode(part).decode()},
    } for cm_name, part in zip(part_names(spec.context_config_map, spec.context_parts), parts,
                               strict=True)]


def tls_secret_name(build: str) -> str:
    return f"{build}-buildkit-tls"


def build_tls_secret(image_build: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    """buildkitd's CA and the client certificate, for this build's Job only (GC with the
    ImageBuild); nothing else in the namespace (no trial pod) mounts it."""
    name = image_build["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": tls_secret_name(name),
                     "namespace": image_build["metadata"]["namespace"],
                     "labels": build_labels(name, "buildkit-client-tls"),
                     "ownerReferences": [build_owner(image_build)]},
        "type": "Opaque",
        "data": {k: base64.b64encode(files[k]).decode() for k in TLS_KEYS},
    }


def _tls_flags(settings: ImageSettings) -> list[str]:
    if not settings.buildkit_tls_dir:
        return []
    flags = ["--tlscacert", f"{TLS_MOUNT}/ca.crt", "--tlscert", f"{TLS_MOUNT}/tls.crt",
             "--tlskey", f"{TLS_MOUNT}/tls.key"]
    if settings.buildkit_tls_server_name:
        flags += ["--tlsservername", settings.buildkit_tls_server_name]
    return flags


def buildctl_argv(spec: ImageBuildSpec, settings: ImageSettings) -> list[str]:
    insecure = ",registry.insecure=true" if settings.insecure_registry else ""
    argv = [
        "buildctl", "--addr", settings.buildkit_addr, *_tls_flags(settings), "build",
        "--progress", "plain",
        "--frontend", "dockerfile.v0",
        "--local", "context=/ctx", "--local", "dockerfile=/ctx",
        "--output", f"type=image,name={spec.ref},push=true{insecure}",
    ]
    if settings.add_hosts:
        argv += ["--opt", "add-hosts=" + ",".join(f"{n}={ip}" for n, ip in settings.add_hosts)]
    if spec.cache_ref:
        argv += ["--export-cache", f"type=registry,ref={spec.cache_ref},mode=max{insecure}",
                 "--import-cache", f"type=registry,ref={spec.cache_ref}{insecure}"]
    return argv


WAIT_SECONDS = 60


def wait_for_buildkitd(settings: ImageSettings) -> dict[str, Any] | None:
    """An init container that waits until buildkitd's TCP port answers this pod: a new pod
    is let in by buildkitd's NetworkPolicy only once the dataplane has its address, and a
    `buildctl` that connects before that fails the build. It always exits 0: past the wait,
    buildctl's own error tells what is wrong. None on the host network (no policy there) and
    for a unix socket."""
    match = re.fullmatch(r"tcp://\[?([^\]]+?)\]?:(\d+)", settings.buildkit_addr)
    if settings.host_network or match is None:
        return None
    host, port = match.groups()
    script = (f"i=0; until nc -w 2 {host} {port} </dev/null >/dev/null 2>&1; do "
              f"i=$((i+1)); if [ $i -ge {WAIT_SECONDS} ]; then "
              f"echo 'buildkitd at {host}:{port} did not answer within {WAIT_SECONDS}s' >&2; "
              "exit 0; fi; sleep 1; done")
    return {"name": "wait-buildkitd", "image": settings.builder_image,
            "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}


def build_job(image_build: dict[str, Any], settings: ImageSettings) -> dict[str, Any]:
    name = image_build["metadata"]["name"]
    spec = ImageBuildSpec.model_validate(image_build["spec"])
    labels = build_labels(name, "image-build-job")
    names = part_names(spec.context_config_map, spec.context_parts)
    volumes: list[dict[str, Any]] = [
        *({"name": f"context-{i}", "configMap": {"name": n}} for i, n in enumerate(names)),
        {"name": "ctx", "emptyDir": {}},
    ]
    unpack = " ".join(f"/context/{i}/{CONTEXT_KEY}" for i in range(len(names)))
    mounts = [{"name": "ctx", "mountPath": "/ctx"}]
    env: list[dict[str, Any]] = []
    if settings.push_secret:
        volumes.append({"name": "push-auth", "secret": {
            "secretName": settings.push_secret,
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}})
        mounts.append({"name": "push-auth", "mountPath": "/docker-config", "readOnly": True})
        env.append({"name": "DOCKER_CONFIG", "value": "/docker-config"})
    if settings.buildkit_tls_dir:
        volumes.append({"name": "buildkit-tls", "secret": {
            "secretName": tls_secret_name(name), "defaultMode": 0o400}})
        mounts.append({"name": "buildkit-tls", "mountPath": TLS_MOUNT, "readOnly": True})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": settings.service_account is not None,
        "enableServiceLinks": False,
        "initContainers": [{
            "name": "context",
            "image": settings.builder_image,
            "imagePullPolicy": "IfNotPresent",
            # -m: today's mtimes, not the bundle's fixed ones. buildkitd reuses what it was sent
            # for a `context` before and skips files whose size and mtime match (fsutil's
            # diff copy), so two contexts with a same-sized file (a test.sh differing in one
            # word) built one after the other got the first one's file: a wrong verifier.
            "command": ["sh", "-c", f"cat {unpack} | tar -xzmf - -C /ctx"],
            "volumeMounts": [*mounts[:1], *({"name": f"context-{i}",
                                             "mountPath": f"/context/{i}"}
                                            for i in range(len(names)))],
        }],
        "containers": [{
            "name": BUILD_CONTAINER,
            "image": settings.builder_image,
            "imagePullPolicy": "IfNotPresent",
            "command": buildctl_argv(spec, settings),
            "env": env,
            "volumeMounts": mounts,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        }],
        "volumes": volumes,
    }
    wait = wait_for_buildkitd(settings)
    if wait is not None:
        pod_spec["initContainers"].append(wait)
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    if settings.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": image_build["metadata"]["namespace"],
                     "labels": labels, "ownerReferences": [build_owner(image_build)]},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, math.ceil(spec.timeout_sec)),
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
