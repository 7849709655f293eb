"""Task images at run time: a Task's ImageBuilds (created or adopted), each build's registry
probe and Job, the owner Tasks' `status.images` / ImagesReady as builds finish, and the trials
waiting for them (woken through `runtime.wake`). Its kopf registrations are
`handlers.image_builds`; decisions are in `plan.images` and `reconcile.image_build`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf

from shipyard.api.conditions import carried, changed, event_key
from shipyard.api.conventions import (
    iso,
    object_conditions,
    owner_references,
    parse_time,
)
from shipyard.api.models import (
    IMAGES_READY,
    Condition,
    ImageBuildSpec,
    ImageBuildStatus,
    TaskStatus,
)
from shipyard.api.reasons import Reason
from shipyard.kube import image_builds as kube_builds
from shipyard.kube import objects
from shipyard.kube.errors import ApiException
from shipyard.kube.registry import RegistryUnavailable, manifest_digest
from shipyard.plan.images import (
    ImageNeed,
    ImageSettingError,
    ImageSettings,
    ImagesFailed,
    ImagesReady,
    ImagesUnavailable,
    ImagesWait,
    context_files,
    image_needs,
    images_status,
    trial_images,
    unavailable_condition,
)
from shipyard.reconcile import image_build as machine
from shipyard.render.build_job import (
    BUILD_CONTAINER,
    TLS_KEYS,
    build_context_configmaps,
    build_image_build,
    build_job,
    build_tls_secret,
    context_parts,
)
from shipyard.runtime import config, metrics, wake
from shipyard.runtime.status_writer import StatusWriter, named
from shipyard.runtime.task_files import TaskUnavailable, load_task, task_body
from shipyard.taskformat import LoadedTask

PLURAL = "imagebuilds"
REFRESH_SEC = 10.0


def now_iso() -> str:
    return iso(datetime.now(UTC))


def image_settings() -> ImageSettings:
    """The operator's build settings (`OperatorSettings.images`); ImageSettingError when they
    could not be read."""
    settings = config.current()
    if settings.images_error:
        raise ImageSettingError(settings.images_error)
    return settings.images


# ---------------------------------------------------------------- trials waiting


def wait_for(namespace: str, task: str, trial: str) -> None:
    """The trial waits for its Task's images: a change of them wakes it (`wake_trials`)."""
    wake.follow((wake.TASK, namespace, task), (wake.TRIAL, namespace, trial))


def stop_waiting(namespace: str, task: str, trial: str) -> None:
    wake.unfollow((wake.TASK, namespace, task), (wake.TRIAL, namespace, trial))


def wake_trials(namespace: str, task: str) -> None:
    """The Task's images changed: the trials waiting for them look again."""
    wake.wake(wake.TASK, namespace, task)


# ---------------------------------------------------------------- the Task side


async def ensure_task_images(body: dict[str, Any], task: LoadedTask,
                             status: TaskStatus) -> TaskStatus:
    """After validation: the Task's images (prebuilt, or an ImageBuild created or adopted per
    context) and its ImagesReady condition."""
    generation = body["metadata"].get("generation")
    force = bool((body.get("spec") or {}).get("forceBuild"))
    try:
        needs = image_needs(task, image_settings(), force)
    except (ImagesUnavailable, ImageSettingError) as e:
        error = e if isinstance(e, ImagesUnavailable) else ImagesUnavailable(
            Reason.NO_IMAGE_BUILDER, f"operator settings: {e}")
        cond = unavailable_condition(error, now_iso(), generation)
        return status.model_copy(update={"images": {}, "conditions": [
            *status.conditions, carried(object_conditions(body), cond, now_iso())]})
    builds, refs = await asyncio.to_thread(ensure_builds, body, task, needs, force)
    images, cond = images_status(needs, builds, refs, now_iso(), generation)
    return status.model_copy(update={"images": images, "conditions": [
        *status.conditions, carried(object_conditions(body), cond, now_iso())]})


def ensure_builds(body: dict[str, Any], task: LoadedTask, needs: list[ImageNeed], force: bool
                  ) -> tuple[dict[str, ImageBuildStatus | None], dict[str, str]]:
    """Create or adopt the ImageBuild of each context to build, with its context ConfigMap."""
    builds: dict[str, ImageBuildStatus | None] = {}
    refs: dict[str, str] = {}
    for need in needs:
        if not need.build or need.build_name in builds:
            continue
        parts = context_parts(context_files(task, need))
        existing = kube_builds.create_or_adopt(build_image_build(dict(body), need, force,
                                                                 len(parts)))
        for configmap in build_context_configmaps(existing, parts):
            kube_builds.ensure_context(configmap)
        builds[need.build_name] = build_status(existing)
        refs[need.build_name] = existing["spec"]["ref"]
    return builds, refs


def rebuild_for_task(namespace: str, name: str) -> None:
    """An ImageBuild of the Task was deleted (`kubectl delete imagebuild` is how a failed build
    is retried): create it again, unless the Task is going too."""
    body = objects.get_custom("tasks", namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    try:
        task = load_task(body)
        force = bool((body.get("spec") or {}).get("forceBuild"))
        ensure_builds(body, task, image_needs(task, image_settings(), force), force)
    except (TaskUnavailable, ImagesUnavailable, ImageSettingError):
        return  # the validation handler reports these
    except ApiException as e:
        if e.status in (403, 404, 409):  # e.g. the namespace is being deleted
            return
        raise
    refresh_task_images(namespace, name)


def trial_decision(namespace: str, task_name: str, task: LoadedTask,
                   environment_override: bool) -> ImagesReady | ImagesWait | ImagesFailed:
    """A trial's view of its Task's images, read from the ImageBuilds (the Task's body from the
    watch: no GET per trial)."""
    body = task_body(namespace, task_name) or {}
    force = bool((body.get("spec") or {}).get("forceBuild"))
    try:
        needs = image_needs(task, image_settings(), force)
    except ImagesUnavailable as e:
        return ImagesFailed(Reason.TASK_INVALID, e.message)
    except ImageSettingError as e:
        return ImagesFailed(Reason.TRIAL_INVALID, f"operator settings: {e}")
    builds, refs = _builds_for(namespace, needs)
    return trial_images(needs, builds, refs, environment_override)


def build_status(build: dict[str, Any]) -> ImageBuildStatus:
    raw = build.get("status") or {}
    fields = {info.alias or name for name, info in ImageBuildStatus.model_fields.items()}
    return ImageBuildStatus.model_validate({k: v for k, v in raw.items() if k in fields})


def _builds_for(namespace: str, needs: list[ImageNeed]
                ) -> tuple[dict[str, ImageBuildStatus | None], dict[str, str]]:
    builds: dict[str, ImageBuildStatus | None] = {}
    refs: dict[str, str] = {}
    for need in needs:
        if need.build and need.build_name not in builds:
            obj = objects.get_custom(PLURAL, namespace, need.build_name)
            builds[need.build_name] = None if obj is None else build_status(obj)
            if obj is not None:
                refs[need.build_name] = obj["spec"]["ref"]
    return builds, refs


def refresh_task_images(namespace: str, name: str) -> None:
    """Recompute a Task's status.images and ImagesReady from its ImageBuilds' statuses (the
    needs are derived from the task again: the status is a summary, never an input)."""
    task = objects.get_custom("tasks", namespace, name)
    if task is None:
        return
    try:
        loaded = load_task(task)
        needs = image_needs(loaded, image_settings(),
                            bool((task.get("spec") or {}).get("forceBuild")))
    except (TaskUnavailable, ImagesUnavailable, ImageSettingError):
        return  # the validation handler reports these
    if not any(n.build for n in needs):
        return
    raw = task.get("status") or {}
    builds, refs = _builds_for(namespace, needs)
    conditions = [Condition.model_validate(c) for c in raw.get("conditions") or []]
    before = next((c for c in conditions if c.type == IMAGES_READY), None)
    new_images, cond = images_status(needs, builds, refs, now_iso(),
                                     task["metadata"].get("generation"))
    cond = carried(conditions, cond, now_iso())
    conditions = [c for c in conditions if c.type != IMAGES_READY] + [cond]
    patch = {
        "images": {k: v.model_dump(by_alias=True, mode="json", exclude_none=True)
                   for k, v in new_images.items()},
        "conditions": [c.model_dump(by_alias=True, mode="json") for c in conditions],
    }
    if patch["images"] == (raw.get("images") or {}) and before == cond:
        return
    events = []
    if changed([before] if before else [], [cond], fields=("type", "status", "reason")):
        failed = cond.status == "False" and cond.reason not in (Reason.BUILDING, Reason.PENDING)
        events.append(named(task, "Warning" if failed else "Normal",
                            cond.reason if cond.status == "False" else IMAGES_READY,
                            cond.message, key=event_key(cond)))
    StatusWriter(task, "tasks").write(patch, events)


def owner_tasks(build: dict[str, Any]) -> list[str]:
    return [o["name"] for o in owner_references(build, "Task")]


# ---------------------------------------------------------------- the ImageBuild side


def reconcile_build(build: dict[str, Any]) -> tuple[ImageBuildStatus, float | None]:
    """Probe, build or observe; the new status and, when the registry did not answer, the
    delay before the next try."""
    name = build["metadata"]["name"]
    spec = ImageBuildSpec.model_validate(build["spec"])
    status = build_status(build)
    if machine.is_terminal(status):
        return status, None
    settings = image_settings()
    if status.job_name is None:
        try:
            digest = None if spec.force else manifest_digest(spec.ref,
                                                             settings.insecure_registry)
        except RegistryUnavailable as e:
            return machine.registry_unavailable(status, str(e)), 5.0
        status = machine.on_probe(status, digest, now_iso())
        if machine.is_terminal(status):
            return status, None
        _create_job(build, settings)
        return machine.on_job_created(status, name, now_iso()), None
    return observe_build(build, status, spec, settings), None


def _create_job(build: dict[str, Any], settings: ImageSettings) -> None:
    """The build Job, with buildkitd's client certificate in a Secret of its own when
    buildkitd is reached over mTLS (SHIPYARD_BUILDKIT_TLS_DIR)."""
    secret = None
    if settings.buildkit_tls_dir:
        secret = build_tls_secret(build, read_tls_dir(settings.buildkit_tls_dir))
    kube_builds.create_job(build_job(build, settings), secret)


def read_tls_dir(path: str) -> dict[str, bytes]:
    """The three files of SHIPYARD_BUILDKIT_TLS_DIR; ImageSettingError naming a missing one."""
    files = {}
    for key in TLS_KEYS:
        try:
            files[key] = (Path(path) / key).read_bytes()
        except OSError as e:
            raise ImageSettingError(f"SHIPYARD_BUILDKIT_TLS_DIR={path}: cannot read {key}: "
                                    f"{e.strerror}") from None
    return files


def observe_build(build: dict[str, Any], status: ImageBuildStatus, spec: ImageBuildSpec,
                  settings: ImageSettings) -> ImageBuildStatus:
    ns = build["metadata"]["namespace"]
    assert status.job_name is not None
    job = kube_builds.get_job(ns, status.job_name)
    pods = kube_builds.job_pods(ns, job) if job is not None else []
    seen = machine.observe_job(job, pods, datetime.now(UTC))
    if seen.state == "failed" and pods:
        # The log itself: the termination message is only its last 2 KiB, which a failed
        # step's own output (above buildkit's Dockerfile excerpt) does not fit in.
        log = kube_builds.pod_log_tail(ns, pods[0]["metadata"]["name"], BUILD_CONTAINER,
                                       machine.LOG_LINES)
        seen = machine.JobObservation(seen.state, seen.reason, log or seen.log_tail)
    if seen.state == "missing":  # deleted by hand: build again
        _create_job(build, settings)
        return status
    digest = None
    if seen.state == "succeeded":
        try:
            digest = manifest_digest(spec.ref, settings.insecure_registry)
        except RegistryUnavailable:
            digest = None
    return machine.on_job(status, spec, seen, digest, now_iso(), ns)


async def apply_build(build: dict[str, Any], retry: int = 0) -> None:
    with metrics.reconciling("imagebuild"):
        await _apply_once(build, retry)


async def _apply_once(build: dict[str, Any], retry: int) -> None:
    before = build_status(build)
    status, delay = await asyncio.to_thread(reconcile_build, build)
    if status != before:
        events = []
        if status.phase in ("Failed", "Succeeded") and status.phase != before.phase:
            began, ended = parse_time(status.started_at), parse_time(status.finished_at)
            metrics.build_finished(status.phase, (ended - began).total_seconds()
                                   if began and ended else None)
            events.append(named(build, "Warning" if status.phase == "Failed" else "Normal",
                                status.reason or status.phase, status.message or "",
                                key=status.phase))
        await asyncio.to_thread(StatusWriter(build, PLURAL).write,
                                status.model_dump(by_alias=True, mode="json"), events)
    if delay is not None:  # exponential backoff: 5 s, 10 s, 20 s ... at most 2 min
        raise kopf.TemporaryError(status.message or "registry unavailable",
                                  delay=min(120.0, delay * 2 ** min(retry, 5)))


async def decide_build_of(namespace: str, name: str | None) -> None:
    """The ImageBuild a build pod or Job belongs to, decided again unless already final."""
    build = await asyncio.to_thread(objects.get_custom, PLURAL, namespace, name)
    if build is None or machine.is_terminal(build_status(build)):
        return
    if build_status(build).job_name is None:
        return
    await apply_build(build)
