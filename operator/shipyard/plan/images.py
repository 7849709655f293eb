"""Which images a task needs, where they come from, and whether its trials may start (pure).

A task's environment is a prebuilt `docker_image`, or built from `environment/Dockerfile`; a
separate verifier may be built from `tests/Dockerfile` or `steps/<step>/tests/Dockerfile`. Built
images are tagged as Harbor's GKE environment tags them, `<registry>/<task>:<environment_id>`
(Harbor's content hash), and built once per hash by an `ImageBuild` named from the hash, so
identical contexts share one build. Roles: `environment`, `verifier`, `verifier.<step>`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from shipyard.api.models import (
    IMAGES_READY,
    Condition,
    ImageBuildStatus,
    ImageStatus,
)
from shipyard.api.reasons import Reason
from shipyard.taskformat import LoadedTask, TaskFormatError
from shipyard.taskformat.compose import ComposeEnvironment, load_compose
from shipyard.taskformat.content_hash import environment_content_hash
from shipyard.taskformat.network import (
    AllowlistEntryType,
    classify_allowlist_entry,
    normalize_allowed_host,
)
from shipyard.taskformat.resolve import held

ROLE_ENVIRONMENT = "environment"
ROLE_VERIFIER = "verifier"
ROLE_SERVICE = "service."
"""`service.<name>`: the image of a docker-compose sidecar."""
DOCKERFILE = "Dockerfile"
COMPOSE_FILE = "docker-compose.yaml"
Backend = Literal["buildkit", "none"]

# ImagesReady=False reasons. Building/Pending/RegistryUnavailable wait; the rest are final.
WAITING_REASONS = (Reason.BUILDING, Reason.PENDING, Reason.REGISTRY_UNAVAILABLE)
FAILED_REASONS = (Reason.IMAGE_BUILD_FAILED, Reason.BUILD_TIMEOUT)


class ImageSettingError(ValueError):
    pass


@dataclass(frozen=True)
class ImageSettings:
    """The operator's image-build settings (chart values `builds.*`, env SHIPYARD_BUILD_*)."""

    backend: Backend = "none"
    registry: str | None = None
    """Repository prefix built images are pushed under, e.g. `127.0.0.1:5055/shipyard` or
    `us-central1-docker.pkg.dev/PROJECT/REPO`."""
    insecure_registry: bool = False  # plain HTTP (the local cluster's registry)
    buildkit_addr: str = "tcp://buildkitd:1234"
    builder_image: str = "moby/buildkit:v0.34.2"
    host_network: bool = False  # build Jobs on the host network (the local cluster)
    push_secret: str | None = None  # a dockerconfigjson Secret in the Task's namespace
    service_account: str | None = None  # the build Jobs' (e.g. Workload Identity) account
    node_selector: Mapping[str, str] = field(default_factory=dict)
    buildkit_tls_dir: str | None = None
    """A directory with `ca.crt`, `tls.crt`, `tls.key` (a mounted TLS Secret): buildkitd's CA
    and the build Jobs' client certificate. Each build Job gets them in a Secret of its own."""
    buildkit_tls_server_name: str | None = None  # the name buildkitd's certificate carries
    mirrors: Mapping[str, str] = field(default_factory=dict)
    """Path-preserving registry mirrors as the nodes' (SHIPYARD_REGISTRY_MIRRORS,
    `docker.io=mirror:5000,ghcr.io=mirror:5000/ghcr.io`): where the operator reads an image's
    config (`kube.registry.image_config`) before the registry itself."""
    insecure_hosts: frozenset[str] = frozenset()
    """Registries read over plain HTTP (SHIPYARD_REGISTRY_INSECURE_HOSTS; the build registry
    too when SHIPYARD_BUILD_REGISTRY_INSECURE)."""
    add_hosts: tuple[tuple[str, str], ...] = ()
    """(name, IP) lines added to /etc/hosts of every `RUN` step (SHIPYARD_BUILD_ADD_HOSTS,
    `docker build --add-host`): e.g. an internal mirror that the build's DNS does not name."""

    def plain_http_hosts(self) -> frozenset[str]:
        if self.registry and self.insecure_registry:
            return self.insecure_hosts | {self.registry.split("/", 1)[0]}
        return self.insecure_hosts

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ImageSettings:
        backend = environ.get("SHIPYARD_BUILD_BACKEND", "").strip() or "none"
        if backend not in ("buildkit", "none"):
            raise ImageSettingError(
                f"SHIPYARD_BUILD_BACKEND={backend!r}: use buildkit or none")
        registry = environ.get("SHIPYARD_BUILD_REGISTRY", "").strip().rstrip("/") or None
        if backend == "buildkit" and not registry:
            raise ImageSettingError("SHIPYARD_BUILD_REGISTRY: the buildkit backend needs a "
                                    "registry to push built images to")
        selector = {}
        for item in environ.get("SHIPYARD_BUILD_NODE_SELECTOR", "").split(","):
            if "=" in item:
                key, value = item.split("=", 1)
                selector[key.strip()] = value.strip()
        mirrors = {}
        for item in environ.get("SHIPYARD_REGISTRY_MIRRORS", "").split(","):
            host, sep, mirror = item.partition("=")
            if sep and host.strip() and mirror.strip():
                mirrors[host.strip()] = mirror.strip().rstrip("/")
            elif item.strip():
                raise ImageSettingError(f"SHIPYARD_REGISTRY_MIRRORS: {item.strip()!r} is not "
                                        "REGISTRY=MIRROR (e.g. docker.io=mirror.internal:5000)")
        defaults = cls()
        return cls(
            add_hosts=parse_add_hosts(environ.get("SHIPYARD_BUILD_ADD_HOSTS", "")),
            backend=backend,  # type: ignore[arg-type]
            registry=registry,
            insecure_registry=_flag(environ.get("SHIPYARD_BUILD_REGISTRY_INSECURE")),
            buildkit_addr=environ.get("SHIPYARD_BUILDKIT_ADDR") or defaults.buildkit_addr,
            builder_image=environ.get("SHIPYARD_BUILDER_IMAGE") or defaults.builder_image,
            host_network=_flag(environ.get("SHIPYARD_BUILD_HOST_NETWORK")),
            push_secret=environ.get("SHIPYARD_BUILD_PUSH_SECRET") or None,
            service_account=environ.get("SHIPYARD_BUILD_SERVICE_ACCOUNT") or None,
            node_selector=selector,
            buildkit_tls_dir=environ.get("SHIPYARD_BUILDKIT_TLS_DIR", "").strip() or None,
            buildkit_tls_server_name=environ.get("SHIPYARD_BUILDKIT_TLS_SERVER_NAME",
                                                 "").strip() or None,
            mirrors=mirrors,
            insecure_hosts=frozenset(h.strip() for h in environ.get(
                "SHIPYARD_REGISTRY_INSECURE_HOSTS", "").split(",") if h.strip()),
        )


def _host_name(name: str) -> str | None:
    """`name` normalised when it is a host name (the allowlist's grammar), else None."""
    try:
        host = normalize_allowed_host(name)
    except ValueError:
        return None
    return host if classify_allowlist_entry(host) == AllowlistEntryType.HOSTNAME else None


def parse_add_hosts(value: str) -> tuple[tuple[str, str], ...]:
    """`NAME=IP,NAME=IP` (SHIPYARD_BUILD_ADD_HOSTS) as (name, IP) pairs, names lower-cased."""
    pairs = []
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, ip = (part.strip() for part in item.partition("="))
        host = _host_name(name) if sep else None
        if host is None:
            raise ImageSettingError(f"SHIPYARD_BUILD_ADD_HOSTS: {item.strip()!r} is not "
                                    "NAME=IP with a host name (e.g. mirror.internal=10.0.0.5)")
        try:
            ip = str(ipaddress.ip_address(ip))
        except ValueError:
            raise ImageSettingError(f"SHIPYARD_BUILD_ADD_HOSTS: {item.strip()!r}: {ip!r} is "
                                    "not an IP address") from None
        pairs.append((host, ip))
    return tuple(pairs)


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class ImageNeed:
    role: str
    context_dir: str  # "environment/", "tests/", "steps/<s>/tests/"; "" the task's directory
    ref: str
    context_hash: str | None = None
    build: bool = False  # False: a prebuilt image
    timeout_sec: float = 600.0
    dockerfile: str = DOCKERFILE  # relative to the context (compose `build.dockerfile`)

    @property
    def build_name(self) -> str:
        """The ImageBuild's name: one per context hash (a DNS label)."""
        assert self.context_hash is not None
        return f"build-{self.context_hash[:24]}"

    @property
    def cache_ref(self) -> str:
        return f"{self.ref.rsplit(':', 1)[0]}:buildcache"


class ImagesUnavailable(Exception):
    """The task's images cannot be had: reason (closed set) and message, for ImagesReady."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def repository_name(task_name: str) -> str:
    """Harbor's `environment_name` (the short task name) as a valid repository component."""
    short = task_name.split("/")[-1].lower()
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", short).strip("-._") or "task"
    return cleaned[:128]


def image_needs(task: LoadedTask, settings: ImageSettings,
                force_build: bool = False) -> list[ImageNeed]:
    """The task's images by role. ImagesUnavailable when a Dockerfile must be built and no
    builder is configured, or a context cannot be built (docker-compose)."""
    config = task.config
    try:
        compose = load_compose(task)
    except TaskFormatError as e:  # refused at validation; said again here
        raise ImagesUnavailable(Reason.TASK_INVALID, str(e)) from e
    environment = _need(task, ROLE_ENVIRONMENT, "environment/",
                        config.environment.docker_image, config.environment.build_timeout_sec,
                        settings, force_build, compose)
    needs = [environment] if environment is not None else []
    if compose is not None:
        needs += _service_needs(task, compose, settings)
    steps: list[str | None] = list(task.step_names()) if task.is_multi_step else [None]
    roles = {n.role for n in needs}
    for step in steps:
        verifier = task.verifier_environment(step)
        if verifier is None or verifier.context_dir == "environment/":
            continue  # shared, or a copy of the environment's image
        role = ROLE_VERIFIER if verifier.context_dir == "tests/" else f"{ROLE_VERIFIER}.{step}"
        if role in roles:
            continue
        roles.add(role)
        need = _need(task, role, verifier.context_dir, verifier.config.docker_image,
                     verifier.config.build_timeout_sec, settings, force_build)
        if need is not None:
            needs.append(need)
    return needs


def _service_needs(task: LoadedTask, compose: ComposeEnvironment,
                   settings: ImageSettings) -> list[ImageNeed]:
    """The sidecars' images: built from their `build:` context (one ImageBuild per context
    hash, as environment/Dockerfile), else their `image:`."""
    timeout = task.config.environment.build_timeout_sec
    needs = []
    for service in compose.sidecars:
        role = f"{ROLE_SERVICE}{service.name}"
        if service.build is None:
            assert service.image is not None  # validated: an image or a build
            needs.append(ImageNeed(role, "environment/", service.image))
        else:
            needs.append(_build_need(task, role, service.build.context, None, timeout,
                                     settings, service.build.dockerfile))
    return needs


def context_files(task: LoadedTask, need: ImageNeed) -> dict[str, bytes]:
    """What is sent to the builder: the context directory, its `dockerfile` as `Dockerfile`."""
    files = task.tree(need.context_dir)
    if need.dockerfile != DOCKERFILE:
        files[DOCKERFILE] = files[need.dockerfile]
    return files


def _need(task: LoadedTask, role: str, context_dir: str, docker_image: str | None,
          timeout_sec: float, settings: ImageSettings, force_build: bool,
          compose: ComposeEnvironment | None = None) -> ImageNeed | None:
    files = task.tree(context_dir)
    has_dockerfile = DOCKERFILE in files
    main = compose.main if compose is not None else None
    if docker_image and not (force_build and (has_dockerfile or (main and main.build))):
        return ImageNeed(role, context_dir, docker_image)
    if main is not None and main.build is not None:
        # The task's compose file is merged over Harbor's base one: its build of main wins
        # (e.g. the task's directory as the context, to COPY files beside environment/).
        return _build_need(task, role, main.build.context, docker_image, timeout_sec,
                           settings, main.build.dockerfile)
    if not has_dockerfile:
        if main is not None and main.image:
            return ImageNeed(role, context_dir, main.image)
        if COMPOSE_FILE in files:
            raise ImagesUnavailable(
                Reason.IMAGE_BUILD_UNSUPPORTED,
                f"{context_dir}{COMPOSE_FILE}: the service 'main' has neither a build nor an "
                "image, and there is no environment/Dockerfile or docker_image")
        return None  # nothing to build: the environment's image serves (lint checks the rest)
    return _build_need(task, role, context_dir, docker_image, timeout_sec, settings)


def _build_need(task: LoadedTask, role: str, context_dir: str, docker_image: str | None,
                timeout_sec: float, settings: ImageSettings,
                dockerfile: str = DOCKERFILE) -> ImageNeed:
    if settings.backend == "none" or not settings.registry:
        what = ("[environment].docker_image" if role == ROLE_ENVIRONMENT
                else "[verifier.environment].docker_image")
        raise ImagesUnavailable(
            Reason.NO_IMAGE_BUILDER,
            f"{context_dir}{dockerfile}: this operator has no image builder configured "
            f"(builds.backend is none: SHIPYARD_BUILD_BACKEND=buildkit and "
            f"SHIPYARD_BUILD_REGISTRY are not set), so images cannot be built from a "
            f"Dockerfile: configure one (the chart's builds.*; an operator run by hand against "
            f"the local cluster takes its builder from the cluster), or build and push the "
            f"image, then set {what}")
    timeout_sec = held(timeout_sec)
    need = ImageNeed(role, context_dir, "", None, True, timeout_sec, dockerfile)
    digest = environment_content_hash(context_files(task, need),
                                      dir_name=context_dir.rstrip("/").split("/")[-1],
                                      docker_image=docker_image)
    ref = f"{settings.registry}/{repository_name(task.name)}:{digest}"
    return ImageNeed(role, context_dir, ref, digest, True, timeout_sec, dockerfile)


# ---------------------------------------------------------------- the Task's images status


def images_status(needs: list[ImageNeed], builds: Mapping[str, ImageBuildStatus | None],
                  refs: Mapping[str, str], now: str, generation: int | None,
                  ) -> tuple[dict[str, ImageStatus], Condition]:
    """`status.images` and the ImagesReady condition from the ImageBuilds' statuses (`builds`:
    name → status, None when not seen yet; `refs`: name → the ImageBuild's ref, which an
    adopted build from another Task may have chosen)."""
    images: dict[str, ImageStatus] = {}
    waiting: list[str] = []
    failed: list[tuple[str, str, str]] = []
    for need in needs:
        if not need.build:
            images[need.role] = ImageStatus(ref=need.ref, source="prebuilt")
            continue
        build = builds.get(need.build_name)
        ref = refs.get(need.build_name, need.ref)
        image = ImageStatus(ref=ref, context_hash=need.context_hash, build=need.build_name)
        if build is not None and build.phase == "Succeeded":
            image.digest, image.source = build.digest, build.source
        elif build is not None and build.phase == "Failed":
            failed.append((need.role, build.reason or Reason.IMAGE_BUILD_FAILED,
                           build.message or ""))
        else:
            reason = (build.reason if build is not None and build.reason in WAITING_REASONS
                      else Reason.BUILDING)
            waiting.append(f"{need.role} ({reason}: {ref})")
        images[need.role] = image
    if failed:
        role, reason, message = failed[0]
        condition = Condition(type=IMAGES_READY, status="False", reason=reason,
                              message=f"{role} image: {message}")
    elif waiting:
        unavailable = any(Reason.REGISTRY_UNAVAILABLE in w for w in waiting)
        condition = Condition(type=IMAGES_READY, status="False",
                              reason=(Reason.REGISTRY_UNAVAILABLE if unavailable
                                      else Reason.BUILDING),
                              message="waiting for " + ", ".join(waiting))
    else:
        condition = Condition(type=IMAGES_READY, status="True", reason=Reason.READY,
                              message=", ".join(f"{r}: {i.ref} ({i.source})"
                                                for r, i in images.items()))
    condition.last_transition_time = now
    condition.observed_generation = generation
    return images, condition


def unavailable_condition(error: ImagesUnavailable, now: str,
                          generation: int | None) -> Condition:
    return Condition(type=IMAGES_READY, status="False", reason=error.reason,
                     message=error.message, last_transition_time=now,
                     observed_generation=generation)


# ---------------------------------------------------------------- a Trial's view


@dataclass(frozen=True)
class ImagesReady:
    refs: dict[str, str]  # role → ref


@dataclass(frozen=True)
class ImagesWait:
    message: str


@dataclass(frozen=True)
class ImagesFailed:
    reason: str  # a Trial failure reason: ImageBuildFailed or TaskInvalid
    message: str


def trial_images(needs: list[ImageNeed], builds: Mapping[str, ImageBuildStatus | None],
                 refs: Mapping[str, str], environment_override: bool = False
                 ) -> ImagesReady | ImagesWait | ImagesFailed:
    """What a trial does about its Task's images, from the ImageBuilds themselves (the source
    of truth; the Task's status.images is their summary for people): run with them, wait, or
    fail (never retried: a broken Dockerfile stays broken). A trial that sets its own
    environment image (`environment_override`) waits only for verifier builds."""
    if environment_override:
        needs = [n for n in needs if n.role != ROLE_ENVIRONMENT]
    images, cond = images_status(needs, builds, refs, "", None)
    ready = {role: image.ref for role, image in images.items()}
    if cond.status == "True":
        return ImagesReady(ready)
    if cond.reason in FAILED_REASONS:
        return ImagesFailed(Reason.IMAGE_BUILD_FAILED, f"the task's image build failed "
                                                f"({cond.reason}): {cond.message}")
    return ImagesWait(f"waiting for the task's images: {cond.message}")
