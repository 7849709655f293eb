"""The docker-compose sidecars of a trial pod (`plan.compose`) as Kubernetes objects (pure)."""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
from typing import Any

from shipyard.api.conventions import LABEL_COMPONENT, MANAGED_BY, Component
from shipyard.plan.compose import ComposePod, Mount, SidecarPlan, Volume
from shipyard.taskformat import ArtifactConfig, VerifierCollectConfig

LOCALHOST = "127.0.0.1"


def _mounts(mounts: tuple[Mount, ...]) -> list[dict[str, Any]]:
    return [{"name": m.volume, "mountPath": m.path, **({"readOnly": True} if m.read_only else {}),
             **({"subPath": m.sub_path} if m.sub_path else {})}
            for m in mounts]


def _volume(volume: Volume) -> dict[str, Any]:
    bound = volume.task_files
    if bound is None:
        return {"name": volume.name, "emptyDir": {"medium": "Memory"} if volume.memory else {}}
    # Readable and runnable by any user, as a checkout's scripts are.
    return {"name": volume.name, "configMap": {
        "name": bound.configmap, "defaultMode": 0o755,
        "items": [{"key": key, "path": path} for key, path, _ in bound.files]}}


def task_files_configmaps(namespace: str, compose: ComposePod) -> list[dict[str, Any]]:
    """The ConfigMaps of the pod's binds of task files, made before the pod (immutable, named
    by their content)."""
    return [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": v.task_files.configmap, "namespace": namespace,
                     "labels": {**MANAGED_BY, LABEL_COMPONENT: Component.TASK_FILES.value}},
        "immutable": True,
        "binaryData": {key: base64.b64encode(content).decode()
                       for key, _, content in v.task_files.files},
    } for v in compose.volumes if v.task_files is not None]


def _resources(sidecar: SidecarPlan) -> dict[str, Any]:
    """Limits as declared; requests the reservations, else the limits."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if sidecar.cpus is not None:
        limits["cpu"] = f"{sidecar.cpus:g}"
    if sidecar.memory_mb is not None:
        limits["memory"] = f"{sidecar.memory_mb}Mi"
    cpus = sidecar.cpus_request if sidecar.cpus_request is not None else sidecar.cpus
    memory = (sidecar.memory_request_mb if sidecar.memory_request_mb is not None
              else sidecar.memory_mb)
    if cpus is not None:
        requests["cpu"] = f"{cpus:g}"
    if memory is not None:
        requests["memory"] = f"{memory}Mi"
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def sidecar_container(sidecar: SidecarPlan, pull_policy: str) -> dict[str, Any]:
    """A native sidecar (an init container that keeps running), or a one-shot init container.
    Its own user (the image's unless the service sets one), the pod policy's capabilities, its
    log's tail as its termination message (a failed start names what the service printed)."""
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": list(sidecar.capabilities)},
    }
    if sidecar.run_as_user is not None:
        security["runAsUser"] = sidecar.run_as_user
    if sidecar.run_as_group is not None:
        security["runAsGroup"] = sidecar.run_as_group
    if sidecar.read_only:
        security["readOnlyRootFilesystem"] = True
    container: dict[str, Any] = {
        "name": sidecar.name,
        "image": sidecar.image,
        "imagePullPolicy": pull_policy,
        "env": [{"name": k, "value": v} for k, v in sidecar.env],
        "securityContext": security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if not sidecar.one_shot:
        container["restartPolicy"] = "Always"
    if sidecar.command is not None:
        container["command"] = list(sidecar.command)
    if sidecar.args is not None:
        container["args"] = list(sidecar.args)
    if sidecar.working_dir:
        container["workingDir"] = sidecar.working_dir
    resources = _resources(sidecar)
    if resources:
        container["resources"] = resources
    if sidecar.mounts:
        container["volumeMounts"] = _mounts(sidecar.mounts)
    probe = sidecar.startup_probe
    if probe is not None:
        container["startupProbe"] = {
            "exec": {"command": list(probe.command)},
            "periodSeconds": probe.period_sec,
            "timeoutSeconds": probe.timeout_sec,
            "failureThreshold": probe.failure_threshold,
            "successThreshold": 1,
        }
    return container


def apply_compose(spec: dict[str, Any], main: dict[str, Any], compose: ComposePod,
                  pull_policy: str) -> None:
    """Add the services to a pod spec whose `main` container is `main` (in place): the sidecars
    after the pod's own init containers, their volumes, main's shared mounts, the names."""
    spec["initContainers"] = [*spec.get("initContainers", []),
                              *(sidecar_container(s, pull_policy) for s in compose.sidecars)]
    spec["volumes"] = [*spec.get("volumes", []),
                       *(_volume(v) for v in compose.volumes)]
    main["volumeMounts"] = [*main.get("volumeMounts", []), *_mounts(compose.main_mounts)]
    spec["hostAliases"] = [{"ip": LOCALHOST, "hostnames": list(compose.host_names)}]


def sidecar_hook_argv(hook: VerifierCollectConfig) -> list[str]:
    """A collect hook in a sidecar: POSIX `sh -c`, as Harbor (minimal images lack bash)."""
    return ["sh", "-c", hook.command]


def sidecar_artifact_argv(artifact: ArtifactConfig) -> list[str]:
    """Prints a tar of one artifact of a sidecar: a directory from inside (`./...`, with its
    `exclude` patterns, as Harbor's `tar --exclude`), a file by its name; nothing when absent.
    Needs `sh` and `tar` in the sidecar's image (as Harbor does)."""
    rel = artifact.source.strip("/")
    parent, _, name = rel.rpartition("/")
    excludes = "".join(f" --exclude={shlex.quote(x)}" for x in artifact.exclude)
    src = shlex.quote("/" + rel)
    return ["sh", "-c",
            f"if [ -d {src} ]; then cd {src} && exec tar -c -f -{excludes} .; "
            f"elif [ -e {src} ]; then cd {shlex.quote('/' + parent)} && exec tar -c -f - "
            f"{shlex.quote(name)}; fi"]


def merge_sidecar_tars(parts: list[tuple[ArtifactConfig, bytes]]) -> bytes:
    """One tar of the sidecars' artifacts at their original paths (relative to /), from each
    artifact's tar (`sidecar_artifact_argv`); the first claim of a path wins, as in Harbor.
    Links and device files are left out (a sidecar's evidence is data)."""
    out = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w") as merged:
        for artifact, data in parts:
            if not data:
                continue
            rel = artifact.source.strip("/")
            try:
                _copy_members(merged, data, rel, seen)
            except tarfile.TarError:
                continue  # a broken tar from a sidecar: that artifact is left out
    return out.getvalue()


def _copy_members(merged: tarfile.TarFile, data: bytes, rel: str, seen: set[str]) -> None:
    parent = rel.rpartition("/")[0]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as source:
        members = source.getmembers()
        directory = any(m.name == "." or m.name.startswith("./") for m in members)
        for member in members:
            inner = member.name.removeprefix("./").strip("/")
            if directory:  # the directory's content, from inside it
                name = f"{rel}/{inner}" if inner else rel
            else:
                name = f"{parent}/{inner}" if parent else inner
            if ".." in name.split("/") or name in seen or not (member.isfile()
                                                               or member.isdir()):
                continue
            seen.add(name)
            member.name = name
            merged.addfile(member, source.extractfile(member) if member.isfile() else None)


def concat_tars(first: bytes, second: bytes) -> bytes:
    """One tar of both tars' members, `first`'s first (an empty or unreadable part is left
    out); the operator cleans the result (`render.artifact_bundle`)."""
    if not second:
        return first
    if not first:
        return second
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as merged:
        for data in (first, second):
            try:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as part:
                    for member in part:
                        merged.addfile(member, part.extractfile(member) if member.isreg()
                                       else None)
            except tarfile.TarError:
                continue
    return out.getvalue()
