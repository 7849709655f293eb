"""A task's docker-compose services as the containers of its one trial pod (pure).

`main` stays the agent's container; every other service becomes a native sidecar (an init
container with `restartPolicy: Always`), started in `depends_on` order: the kubelet starts an
init container only once the one before has started, and a sidecar with a healthcheck has
started once its startup probe (the healthcheck) passed, so `main`, and with it the trial's
environment phase, waits for every service to be started or healthy. A service others wait to
complete (`service_completed_successfully`) is a plain init container that runs to its end.
Service names (and aliases) resolve to 127.0.0.1 for every container (`hostAliases`), since all
share the pod's network; named volumes are `emptyDir`s; Harbor's `${HOST_*_PATH}` binds are the
trial's log directories, shared with `main`; a bind of the task's own files (`./setup.json`) is
a read-only ConfigMap volume holding them.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from shipyard.plan.images import ROLE_SERVICE
from shipyard.taskformat import ArtifactConfig, VerifierCollectConfig
from shipyard.taskformat.compose import (
    ALLOWED_CAPABILITIES,
    LOG_KINDS,
    MAIN,
    ComposeEnvironment,
    Healthcheck,
    Service,
    VolumeMount,
)
from shipyard.taskformat.resolve import held

VOLUME_PREFIX = "compose-"
TASK_FILES_PREFIX = "shipyard-task-files-"
SIDECAR_CAPABILITIES = (*sorted(ALLOWED_CAPABILITIES), "AUDIT_WRITE")
"""The pod policy's capabilities less MKNOD, plus one `main` lacks: the pod shares one PID
namespace, and the kernel refuses a process /proc/PID/root, environ and ptrace access to
another whose permitted capabilities are not a subset of its own. So neither reaches into the
other: the agent not into a sidecar's filesystem (its evidence), a root sidecar (task code) not
into a root agent's environment (its keys)."""


@dataclass(frozen=True)
class Mount:
    volume: str
    path: str
    read_only: bool = False
    sub_path: str | None = None  # one file of the volume (a bound task file)


@dataclass(frozen=True)
class TaskFiles:
    """Task files bound into a container: one immutable ConfigMap named by its content,
    shared by every trial of that content in the namespace. `files`: (key, path under the
    mount, content)."""

    configmap: str
    files: tuple[tuple[str, str, bytes], ...]


@dataclass(frozen=True)
class Volume:
    name: str
    memory: bool = False  # tmpfs
    task_files: TaskFiles | None = None  # else an emptyDir


@dataclass(frozen=True)
class StartupProbe:
    """A compose healthcheck as a startup probe: the same checks, and failures within its
    start period not counted (`failure_threshold` covers them)."""

    command: tuple[str, ...]
    period_sec: int
    timeout_sec: int
    failure_threshold: int


@dataclass(frozen=True)
class SidecarPlan:
    name: str
    image: str
    command: tuple[str, ...] | None  # the image's ENTRYPOINT replaced (compose `entrypoint`)
    args: tuple[str, ...] | None  # its CMD replaced (compose `command`)
    env: tuple[tuple[str, str], ...]
    working_dir: str | None
    run_as_user: int | None
    run_as_group: int | None
    cpus: float | None
    memory_mb: int | None
    cpus_request: float | None
    memory_request_mb: int | None
    startup_probe: StartupProbe | None
    one_shot: bool  # others wait for it to complete: a plain init container
    mounts: tuple[Mount, ...]
    capabilities: tuple[str, ...]
    read_only: bool = False


@dataclass(frozen=True)
class ComposePod:
    sidecars: tuple[SidecarPlan, ...]
    volumes: tuple[Volume, ...]
    main_mounts: tuple[Mount, ...]
    host_names: tuple[str, ...]  # resolve to 127.0.0.1 in every container

    @property
    def service_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sidecars)


def service_log_key(name: str) -> str:
    """A sidecar's log in the trial's logs ConfigMap (`shipyard logs TRIAL --service NAME`)."""
    return f"service.{name}.log"


def startup_probe(check: Healthcheck) -> StartupProbe:
    """A compose healthcheck as a startup probe; Kubernetes' probe fields are int32, so a
    `1000000000h` interval or a billion retries is held within them."""
    period = _int32(max(1, math.ceil(held(check.interval_sec))))
    grace = math.ceil(held(check.start_period_sec) / period) if check.start_period_sec else 0
    return StartupProbe(check.command, period, _int32(max(1, math.ceil(held(check.timeout_sec)))),
                        _int32(check.retries + grace))


def _int32(value: int) -> int:
    return min(value, 2**31 - 1)


def volume_name(kind: str, name: str) -> str:
    """A DNS label for a compose volume (compose names may hold '_' and '.')."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:30] or "v"
    suffix = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{VOLUME_PREFIX}{kind}-{clean}-{suffix}"


def _user(user: str | None) -> tuple[int | None, int | None]:
    if user is None:
        return None, None
    uid, _, gid = user.partition(":")
    return int(uid), int(gid) if gid else None


def task_files(mount: VolumeMount, files: Mapping[str, bytes]) -> TaskFiles:
    """The ConfigMap of a bind of task files: keys `f0`, `f1`, … (a ConfigMap key cannot hold
    a path), each with its path under the mount."""
    base = "" if mount.single_file else (f"{mount.source}/" if mount.source else "")
    entries = tuple((f"f{i}", posixpath.basename(path) if mount.single_file
                     else path.removeprefix(base), files.get(path, b""))
                    for i, path in enumerate(mount.files))
    digest = hashlib.sha256()
    for key, path, content in entries:
        digest.update(f"{key}\0{path}\0{len(content)}\0".encode())
        digest.update(content)
    return TaskFiles(f"{TASK_FILES_PREFIX}{digest.hexdigest()[:20]}", entries)


def _mounts(service: Service, volumes: dict[str, Volume], files: Mapping[str, bytes],
            skip_logs: bool = False) -> tuple[Mount, ...]:
    mounts = []
    for index, mount in enumerate(service.volumes):
        if mount.kind == "logs" and skip_logs:
            continue
        if mount.kind == "task":
            bound = task_files(mount, files)
            name = volume_name("task", bound.configmap)
            volumes.setdefault(name, Volume(name, task_files=bound))
            mounts.append(Mount(name, mount.target, True,
                                bound.files[0][1] if mount.single_file else None))
            continue
        if mount.kind == "named":
            name = volume_name("vol", mount.source)
        elif mount.kind == "logs":
            name = volume_name("logs", mount.source)
        else:  # anonymous or tmpfs: the service's own
            name = volume_name("anon", f"{service.name}-{index}")
        volumes.setdefault(name, Volume(name, memory=mount.kind == "tmpfs"))
        mounts.append(Mount(name, mount.target, mount.read_only))
    return tuple(mounts)


def compose_pod(compose: ComposeEnvironment, images: Mapping[str, str],
                files: Mapping[str, bytes] | None = None) -> ComposePod:
    """The pod's sidecars, volumes, `main`'s extra mounts and host names. `images`: the Task's
    images by role (`service.<name>` for each sidecar); `files`: the task's, for its binds."""
    files = files or {}
    volumes: dict[str, Volume] = {}
    completes = {other for s in compose.services for other, condition in s.depends_on.items()
                 if condition == "service_completed_successfully"}
    sidecars = []
    for service in compose.sidecars:
        uid, gid = _user(service.user)
        sidecars.append(SidecarPlan(
            name=service.name,
            image=images.get(f"{ROLE_SERVICE}{service.name}") or service.image or "",
            command=service.entrypoint,
            args=service.command,
            env=tuple(service.environment.items()),
            working_dir=service.working_dir,
            run_as_user=uid,
            run_as_group=gid,
            cpus=service.cpus,
            memory_mb=service.memory_mb,
            cpus_request=service.cpus_request,
            memory_request_mb=service.memory_request_mb,
            startup_probe=(startup_probe(service.healthcheck)
                           if service.healthcheck is not None
                           and service.name not in completes else None),
            one_shot=service.name in completes,
            mounts=_mounts(service, volumes, files),
            capabilities=SIDECAR_CAPABILITIES,
            read_only=service.read_only,
        ))
    main_mounts: list[Mount] = []
    main = compose.main
    if main is not None:  # its log binds are its own log directories: nothing to mount
        main_mounts += list(_mounts(main, volumes, files, skip_logs=True))
    shared_logs = {m.volume for s in sidecars for m in s.mounts
                   if m.volume.startswith(f"{VOLUME_PREFIX}logs-")}
    for kind, path in LOG_KINDS.items():  # a sidecar's log bind is main's log directory
        name = volume_name("logs", kind)
        if name in shared_logs:
            main_mounts.append(Mount(name, path))
    names = [MAIN, *(n for s in compose.services for n in (s.name, *s.aliases))]
    return ComposePod(tuple(sidecars), tuple(volumes.values()), tuple(main_mounts),
                      tuple(dict.fromkeys(names)))


@dataclass(frozen=True)
class SidecarEvidence:
    """What a separate verifier gets from one sidecar: its collect hooks run in it, then its
    artifacts copied out of it (after the collect phase in `main`, whose leftover processes the
    runner has ended), re-materialized at their paths in the verifier pod."""

    service: str
    hooks: tuple[VerifierCollectConfig, ...]
    artifacts: tuple[ArtifactConfig, ...]


def sidecar_evidence(hooks: list[VerifierCollectConfig], artifacts: list[ArtifactConfig]
                     ) -> tuple[SidecarEvidence, ...]:
    """By service, in the order the services first appear (hooks first, as Harbor)."""
    services = [h.service for h in hooks if h.service != MAIN]
    services += [a.effective_service for a in artifacts if a.effective_service != MAIN]
    return tuple(SidecarEvidence(
        name,
        tuple(h for h in hooks if h.service == name),
        tuple(a for a in artifacts if a.effective_service == name and a.source.strip("/")),
    ) for name in dict.fromkeys(services))
